"""What a corpus folder's files may not do: lead outside the folder through a symbolic link, be huge, sit as JSON
among text files unnoticed, or lose their indexed records by being broken; and their names reach log lines escaped.

Real files in tmp_path, a real persistent Chroma store, the real embedder."""

from __future__ import annotations

import json
import logging

import chromadb
import pytest

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.stores.corpus import DEFAULT_MAX_FILE_BYTES, CorpusError, read_corpus
from llama_index_mhop.stores.vector_index import passage_collection, stored_documents, sync_vector_index

CONTROLS = {chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]}


def _titles(documents) -> list[str]:
    return sorted(d.metadata["title"] for d in documents)


@pytest.fixture()
def linked(tmp_path):
    """A folder with a text file, a link to a file inside it, and a link to a secret outside it."""
    outside = tmp_path / "secret.txt"
    outside.write_text("The launch code is 0000.", encoding="utf-8")
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "sub" / "alice.txt").write_text("Alice Hart founded Hartwell Mills in 1901.", encoding="utf-8")
    (corpus / "alias.txt").symlink_to(corpus / "sub" / "alice.txt")
    (corpus / "leak.txt").symlink_to(outside)
    return corpus


def test_a_link_leading_outside_the_folder_is_named_and_skipped(linked, caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.stores.corpus"):
        documents, skipped = read_corpus(linked)
    assert _titles(documents) == ["alias", "alice"]  # a link within the folder is read
    assert [s.path.name for s in skipped] == ["leak.txt"]
    assert "symbolic link to a file outside the corpus folder" in skipped[0].reason
    assert "leak.txt" in caplog.text
    assert all("launch code" not in d.text for d in documents)
    with pytest.raises(CorpusError, match=r"leak\.txt: a symbolic link .*strict"):
        read_corpus(linked, strict=True)
    documents, skipped = read_corpus(linked, follow_symlinks=True)
    assert _titles(documents) == ["alias", "alice", "leak"] and skipped == []


def test_the_cli_follows_links_out_of_the_folder_only_when_told(linked, tmp_path, capsys):
    store = ["--quiet", "--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(linked), *store]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped" in out and "leak.txt: a symbolic link to a file outside the corpus folder" in out
    assert "2 added" in out
    assert mhop(["index", str(linked), "--follow-symlinks", *store]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped" not in out and "1 added" in out


def test_json_files_among_text_files_are_named(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "deep").mkdir(parents=True)
    (corpus / "alice.txt").write_text("Alice Hart founded Hartwell Mills in 1901.", encoding="utf-8")
    (corpus / "records.json").write_text(json.dumps([{"title": "Bob", "text": "Bob Stone bakes."}]))
    (corpus / "deep" / "more.json").write_text(json.dumps([{"title": "Carol", "text": "Carol sings."}]))
    documents, skipped = read_corpus(corpus)
    assert _titles(documents) == ["alice"]
    assert sorted(s.path.name for s in skipped) == ["more.json", "records.json"]
    assert all("JSON corpus file among text files" in s.reason for s in skipped)


def test_a_huge_file_is_named_and_skipped_unless_allowed(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "alice.txt").write_text("Alice Hart founded Hartwell Mills in 1901.", encoding="utf-8")
    line = "Hartwell Mills made cloth for a century. "
    (corpus / "dump.txt").write_text(line * (20 * 1024 * 1024 // len(line) + 1), encoding="utf-8")  # 20 MB
    documents, skipped = read_corpus(corpus)
    assert _titles(documents) == ["alice"] and [s.path.name for s in skipped] == ["dump.txt"]
    assert f"over the {DEFAULT_MAX_FILE_BYTES:,}-byte limit" in skipped[0].reason
    documents, skipped = read_corpus(corpus, max_file_bytes=None)
    assert _titles(documents) == ["alice", "dump"] and skipped == []
    with pytest.raises(CorpusError, match=r"holds no text .*alice\.txt: 42 bytes, over the 10-byte limit"):
        read_corpus(corpus, max_file_bytes=10)
    assert _titles(read_corpus(corpus / "dump.txt")[0]) == ["dump"]  # a file given alone is the user's choice


def _records(*names: str) -> str:
    return json.dumps([{"id": name, "title": name.title(), "text": f"{name.title()} Hart lives in Leeds."}
                       for name in names])


def test_a_broken_json_file_of_a_mirrored_folder_keeps_its_records(tmp_path, embed_model):
    folder = tmp_path / "jsons"
    folder.mkdir()
    (folder / "a.json").write_text(_records("alice", "bob"))
    (folder / "b.json").write_text(_records("carol", "dave"))
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))

    def sync():
        return sync_vector_index(folder, collection_name="mirror", chroma_client=client, embed_model=embed_model,
                                 show_progress=False, delete_missing=True)

    assert sorted(sync().plan.added) == ["alice", "bob", "carol", "dave"]
    text = (folder / "a.json").read_text()
    (folder / "a.json").write_text(text[: len(text) // 2])  # truncated mid-record
    result = sync()
    assert [s.path.name for s in result.skipped] == ["a.json"] and "not valid JSON" in result.skipped[0].reason
    assert result.plan.removed == ()
    assert sorted(stored_documents(passage_collection(result.index))) == ["alice", "bob", "carol", "dave"]
    # Mended without bob: now bob is gone from the folder, and only bob is removed.
    (folder / "a.json").write_text(_records("alice"))
    result = sync()
    assert result.plan.removed == ("bob",) and result.skipped == ()
    assert sorted(stored_documents(passage_collection(result.index))) == ["alice", "carol", "dave"]


def test_json_records_stay_when_a_text_file_lands_in_their_folder(tmp_path, embed_model):
    folder = tmp_path / "jsons"
    folder.mkdir()
    (folder / "a.json").write_text(_records("alice", "bob"))
    client = chromadb.PersistentClient(path=str(tmp_path / "chroma"))

    def sync():
        return sync_vector_index(folder, collection_name="landed", chroma_client=client, embed_model=embed_model,
                                 show_progress=False, delete_missing=True)

    sync()
    (folder / "README.md").write_text("Hartwell Mills records.", encoding="utf-8")
    result = sync()
    assert [s.path.name for s in result.skipped] == ["a.json"]
    assert result.plan.added == ("README.md",) and result.plan.removed == ()
    assert sorted(stored_documents(passage_collection(result.index))) == ["README.md", "alice", "bob"]


def test_a_skipped_file_name_reaches_the_log_escaped(tmp_path, caplog):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text("Alice Hart founded Hartwell Mills in 1901.", encoding="utf-8")
    hostile = "\x1b]0;owned\x07\x1b[2J\x1b]8;;https:evil\x1b\\x\x1b]8;;\x1b\\.txt"
    (corpus / hostile).write_bytes("Café".encode("latin-1"))
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.stores.corpus"):
        _, skipped = read_corpus(corpus)
    assert [s.path.name for s in skipped] == [hostile]
    (record,) = caplog.records
    assert not CONTROLS & set(record.getMessage())
    assert "\\x1b]0;owned\\x07" in record.getMessage()
