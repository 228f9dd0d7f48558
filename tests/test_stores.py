import json

import chromadb
import pytest
from llama_index.core import Document

from llama_index_mhop.stores.corpus import (
    CorpusError,
    chunk_documents,
    join_sentences,
    load_documents,
    make_document,
)
from llama_index_mhop.stores.defaults import default_chroma_client
from llama_index_mhop.stores.vector_index import build_vector_index, load_vector_index


def test_load_documents_from_json_shapes_and_folders(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"Alpha": ["One.", " Two."], "Beta": "Three."}))
    docs = load_documents(tmp_path / "a.json")
    assert [(d.metadata["title"], d.text) for d in docs] == [("Alpha", "One. Two."), ("Beta", "Three.")]
    (tmp_path / "b.json").write_text(json.dumps([{"title": "G", "text": ["x", "y"]}, "plain text"]))
    assert [d.text for d in load_documents(tmp_path / "b.json")] == ["x y", "plain text"]
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "river.txt").write_text("The Sava is a river.")
    (folder / "notes.md").write_text("Notes.")
    assert sorted(d.metadata["title"] for d in load_documents(folder)) == ["notes", "river"]


def test_bad_corpora_raise_clear_errors(tmp_path):
    with pytest.raises(CorpusError, match="does not exist"):
        load_documents(tmp_path / "missing")
    (tmp_path / "empty.json").write_text("[]")
    with pytest.raises(CorpusError, match="no text"):
        load_documents(tmp_path / "empty.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(CorpusError, match="bad.json"):
        load_documents(tmp_path / "bad.json")
    (tmp_path / "rec.json").write_text(json.dumps([{"title": "x"}]))
    with pytest.raises(CorpusError, match="record 0"):
        load_documents(tmp_path / "rec.json")
    with pytest.raises(CorpusError, match="no text"):
        load_documents([Document(text="   ")])
    with pytest.raises(CorpusError, match="Document"):
        load_documents(["a string, not a Document"])


def test_join_sentences_respects_existing_spaces():
    assert join_sentences(["A.", " B.", "C."]) == "A. B. C."


def test_long_documents_are_chunked_not_truncated():
    text = " ".join(f"Sentence number {i} talks about the river Sava and its towns." for i in range(200))
    nodes = chunk_documents([make_document("Sava", text)])
    assert len(nodes) > 1
    covered = " ".join(n.get_content() for n in nodes)
    assert "Sentence number 0 " in covered and "Sentence number 199 " in covered
    assert all(n.metadata["title"] == "Sava" for n in nodes)
    assert len({n.node_id for n in nodes}) == len(nodes)


def test_persistent_index_reindex_and_reload(tmp_path, embed_model, hotpotqa_slice):
    _, docs = hotpotqa_slice
    docs = docs[:40]
    client = default_chroma_client(tmp_path / "chroma")
    index = build_vector_index(docs, chroma_client=client, embed_model=embed_model, show_progress=False)
    count = index.vector_store._collection.count()
    assert count >= len(docs)
    query = "Which magazine was started first?"
    before = [(n.node.node_id, round(n.score, 6)) for n in index.as_retriever(similarity_top_k=5).retrieve(query)]

    # the same documents again (and duplicates inside the batch) add nothing
    again = build_vector_index(docs + docs[:5], chroma_client=client, embed_model=embed_model, show_progress=False)
    assert again.vector_store._collection.count() == count

    # a fresh client on the same directory reloads identical retrieval
    del client, index, again
    reloaded = load_vector_index(chroma_client=default_chroma_client(tmp_path / "chroma"), embed_model=embed_model)
    after = [(n.node.node_id, round(n.score, 6)) for n in reloaded.as_retriever(similarity_top_k=5).retrieve(query)]
    assert after == before


def test_load_missing_collection_is_a_clear_error(embed_model):
    with pytest.raises(CorpusError, match="index a corpus first"):
        load_vector_index("nope", chroma_client=chromadb.EphemeralClient(), embed_model=embed_model)
