"""An embedder of another dimension than a store's vectors is one line naming both and the fix, on every path,
before anything is written."""

from __future__ import annotations

import chromadb
import pytest

from llama_index_mhop.cli.commands import main as mhop
from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.stores import defaults
from llama_index_mhop.stores.vector_index import (
    EmbeddingDimensionError,
    build_vector_index,
    load_vector_index,
    passage_collection,
    sync_vector_index,
)
from tests.word_bag import WordBagEmbedding

MISMATCH = r"holds (\d+)-dimensional .*vectors but the embedder WordBagEmbedding gives (\d+); use the embedder"


@pytest.fixture
def notes(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "Marty.txt").write_text("Marty is a 1955 film directed by Delbert Mann, shot in the Bronx.")
    (folder / "Delbert Mann.txt").write_text("Delbert Mann was an American director born in Lawrence, Kansas.")
    return folder


def _one_line(exc: pytest.ExceptionInfo, stored: int, given: int) -> None:
    message = str(exc.value)
    assert "\n" not in message
    assert f"holds {stored}-dimensional" in message and f"gives {given};" in message


def _rows(collection) -> dict:
    records = collection.get(include=["embeddings"])
    return {i: list(v) for i, v in zip(records["ids"], records["embeddings"], strict=True)}


def test_an_unchanged_corpus_synced_with_another_embedder_is_refused(notes):
    client = chromadb.EphemeralClient()
    kwargs = dict(chroma_client=client, collection_name="dims_unchanged", show_progress=False)
    index = build_vector_index(notes, embed_model=WordBagEmbedding(dim=8), **kwargs)
    before = _rows(passage_collection(index))
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH) as exc:
        build_vector_index(notes, embed_model=WordBagEmbedding(dim=384), **kwargs)
    _one_line(exc, 8, 384)
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH):  # mirroring would delete: still refused first
        (notes / "Marty.txt").unlink()
        sync_vector_index(notes, embed_model=WordBagEmbedding(dim=384), delete_missing=True, **kwargs)
    assert _rows(passage_collection(index)) == before
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH):
        load_vector_index("dims_unchanged", chroma_client=client, embed_model=WordBagEmbedding(dim=384))


def test_an_unchanged_sync_with_the_same_embedder_embeds_nothing(notes):
    embedder = WordBagEmbedding(dim=8)
    kwargs = dict(chroma_client=chromadb.EphemeralClient(), collection_name="dims_same", show_progress=False,
                  embed_model=embedder)
    build_vector_index(notes, **kwargs)
    build_vector_index(notes, **kwargs)  # the probe of the check
    embedded = embedder.embedded
    build_vector_index(notes, **kwargs)
    assert embedder.embedded == embedded  # the embedder's dimension is known: not probed again


def test_mhop_index_with_another_embedder_on_an_unchanged_corpus_fails(notes, tmp_path, capsys, monkeypatch):
    embedders = {"bag8": WordBagEmbedding(dim=8), "bag16": WordBagEmbedding(dim=16)}
    monkeypatch.setattr(defaults, "load_embed_model", lambda spec: embedders.get(spec))
    store = ["--chroma-path", str(tmp_path / "chroma"), "--quiet"]
    assert mhop(["index", str(notes), "--embed-model", "bag8", *store]) == 0
    capsys.readouterr()
    assert mhop(["index", str(notes), "--embed-model", "bag16", *store]) == 2
    out = capsys.readouterr().out
    assert "holds 8-dimensional vectors but the embedder WordBagEmbedding gives 16" in out
    assert "--embed-model" in out
    assert mhop(["index", str(notes), "--embed-model", "bag8", *store]) == 0  # the right one still works


def test_a_graph_over_a_vector_index_refuses_another_embedder(notes):
    client = chromadb.EphemeralClient()
    vector_index = build_vector_index(notes, chroma_client=client, embed_model=WordBagEmbedding(dim=64),
                                      collection_name="dims_vector", show_progress=False)
    names = {c.name for c in client.list_collections()}
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH) as exc:
        HippoGraphIndex.from_vector_index(vector_index, embed_model=WordBagEmbedding(dim=128), chroma_client=client,
                                          name="dims_graph", show_progress=False)
    _one_line(exc, 64, 128)
    assert {c.name for c in client.list_collections()} == names  # nothing created, nothing written


def test_a_saved_graph_refuses_another_embedder_when_opened_and_queried(notes, tmp_path):
    root = tmp_path / "hippo"
    built = HippoGraphIndex.from_documents(notes, embed_model=WordBagEmbedding(dim=256), persist_dir=root,
                                           name="dims_saved", show_progress=False)
    facts_before = _rows(built.facts_collection)
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH) as exc:
        HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(dim=128))
    _one_line(exc, 256, 128)
    with pytest.raises(EmbeddingDimensionError, match=MISMATCH):  # a build resumed there: refused too
        HippoGraphIndex.from_documents(notes, embed_model=WordBagEmbedding(dim=128), persist_dir=root,
                                       show_progress=False)
    assert _rows(HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(dim=256)).facts_collection) \
        == facts_before

    # An index whose embedder changed after it opened (or whose store was filled by another): the query says so.
    reopened = HippoGraphIndex.from_persist_dir(root, embed_model=WordBagEmbedding(dim=256))
    reopened.stores.embed_model = WordBagEmbedding(dim=128)
    with pytest.raises(EmbeddingDimensionError, match="holds 256-dimensional passage vectors .* gives 128"):
        reopened.as_retriever().retrieve("Who directed Marty?")
