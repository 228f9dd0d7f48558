"""A corpus folder given as a relative path: an unreadable file is named and skipped, and its indexed version stays."""

from __future__ import annotations

import chromadb

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.stores import defaults
from llama_index_mhop.stores.corpus import read_corpus
from llama_index_mhop.stores.vector_index import passage_collection, stored_documents, sync_vector_index
from tests.word_bag import WordBagEmbedding

NOT_UTF8 = b"\xff\xfe not text"


def _corpus(root):
    folder = root / "badcorp"
    folder.mkdir()
    (folder / "good.txt").write_text("Leland is a town in Brunswick County, North Carolina.")
    (folder / "broken.txt").write_text("Maximum Overdrive was shot in and around Leland.")
    return folder


def test_skipped_files_are_absolute_under_the_resolved_folder(tmp_path, monkeypatch):
    folder = _corpus(tmp_path)
    (folder / "broken.txt").write_bytes(NOT_UTF8)
    monkeypatch.chdir(tmp_path)
    docs, skipped = read_corpus("./badcorp/")
    assert [d.id_ for d in docs] == ["good.txt"]
    assert [s.path for s in skipped] == [folder.resolve() / "broken.txt"]
    assert skipped[0].path.relative_to(folder.resolve()).as_posix() == "broken.txt"
    assert "badcorp/broken.txt: not UTF-8" in skipped[0].reason  # named as the user gave the folder


def test_a_relative_folder_with_an_unreadable_file_syncs_and_keeps_its_old_version(tmp_path, monkeypatch):
    folder = _corpus(tmp_path)
    monkeypatch.chdir(tmp_path)
    kwargs = dict(chroma_client=chromadb.EphemeralClient(), embed_model=WordBagEmbedding(),
                  collection_name="relative_corpus", show_progress=False, delete_missing=True)
    sync_vector_index("badcorp", **kwargs)
    (folder / "broken.txt").write_bytes(NOT_UTF8)
    result = sync_vector_index("./badcorp/", **kwargs)
    assert [s.path.name for s in result.skipped] == ["broken.txt"]
    assert result.plan.counts() == {"added": 0, "updated": 0, "removed": 0, "unchanged": 1}
    assert sorted(stored_documents(passage_collection(result.index))) == ["broken.txt", "good.txt"]


def test_mhop_index_of_a_relative_folder_names_and_skips_the_file(tmp_path, monkeypatch, capsys):
    folder = _corpus(tmp_path)
    (folder / "broken.txt").write_bytes(NOT_UTF8)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(defaults, "load_embed_model", lambda spec: WordBagEmbedding() if spec == "bag" else None)
    assert mhop(["index", "./badcorp/", "--chroma-path", "chroma", "--embed-model", "bag", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "skipped badcorp/broken.txt: not UTF-8 text" in out
    assert "1 added" in out
    assert "subpath" not in out
