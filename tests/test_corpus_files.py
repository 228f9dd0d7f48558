"""A corpus folder with a file that cannot be read: the file is named and skipped (or refused with strict), the
rest is indexed; null titles and texts are no text, never the word "None"."""

from __future__ import annotations

import json
import logging

import chromadb
import pytest

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.stores.corpus import CorpusError, chunk_documents, read_corpus
from llama_index_mhop.stores.vector_index import build_vector_index


@pytest.fixture()
def folder(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "good.txt").write_text("Alice Hart founded Hartwell Mills in 1901.", encoding="utf-8")
    (corpus / "latin1.txt").write_bytes("Café Noir opened in Montréal.".encode("latin-1"))
    (corpus / "notes.md").write_text("Bob Stone is a baker in Leeds.", encoding="utf-8")
    return corpus


def test_unreadable_file_is_named_and_skipped(folder, caplog):
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.stores.corpus"):
        documents, skipped = read_corpus(folder)
    assert sorted(d.metadata["title"] for d in documents) == ["good", "notes"]
    assert [s.path.name for s in skipped] == ["latin1.txt"]
    assert "latin1.txt: not UTF-8 text (byte 3: invalid continuation byte)" in skipped[0].reason
    assert any("latin1.txt" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_strict_refuses_the_corpus_naming_the_file(folder, embed_model):
    with pytest.raises(CorpusError, match=r"latin1\.txt: not UTF-8 text .*strict"):
        read_corpus(folder, strict=True)
    client = chromadb.EphemeralClient()
    with pytest.raises(CorpusError, match=r"latin1\.txt"):
        build_vector_index(folder, collection_name="strict_probe", chroma_client=client, embed_model=embed_model,
                           show_progress=False, strict=True)
    assert "strict_probe" not in {c.name for c in client.list_collections()}  # nothing written


def test_a_file_given_alone_is_an_error_naming_it(folder):
    with pytest.raises(CorpusError, match=r"latin1\.txt: not UTF-8"):
        read_corpus(folder / "latin1.txt")


def test_broken_json_file_in_a_folder_is_skipped(tmp_path):
    folder = tmp_path / "jsons"
    folder.mkdir()
    (folder / "a.json").write_text(json.dumps([{"title": "Alice Hart", "text": "Alice Hart founded a mill."}]))
    (folder / "b.json").write_text("[" * 100_000)
    (folder / "c.json").write_bytes(b'[{"title": "x", "text": "\xff"}]')
    documents, skipped = read_corpus(folder)
    assert [d.metadata["title"] for d in documents] == ["Alice Hart"]
    assert [s.path.name for s in skipped] == ["b.json", "c.json"]
    assert "not valid JSON" in skipped[0].reason and "not UTF-8" in skipped[1].reason


def test_null_title_and_text_are_no_text(tmp_path):
    path = tmp_path / "corpus.json"
    path.write_text(json.dumps([
        {"title": None, "text": "Alice Hart founded Hartwell Mills."},
        {"title": "Empty", "text": None},
        {"title": 1901, "text": ["Hartwell Mills opened.", None, "It closed."]},
    ]))
    documents, _ = read_corpus(path)
    assert [(d.metadata["title"], d.text) for d in documents] == [
        ("", "Alice Hart founded Hartwell Mills."), ("1901", "Hartwell Mills opened. It closed.")]
    assert [n.metadata["title"] for n in chunk_documents(documents)] == ["", "1901"]


def test_cli_names_the_skipped_file_and_indexes_the_rest(folder, tmp_path, capsys):
    store = ["--chroma-path", str(tmp_path / "chroma")]
    assert mhop(["index", str(folder), "--quiet", *store]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "skipped" in out and "latin1.txt: not UTF-8 text" in out and "(2 passages)" in out
    assert mhop(["index", str(folder), "--quiet", "--strict", "--chroma-path", str(tmp_path / "strict")]) == 2
    assert "latin1.txt: not UTF-8 text" in " ".join(capsys.readouterr().out.split())
