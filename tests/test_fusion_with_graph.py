"""LlamaIndex's ``QueryFusionRetriever`` over the passage index and the graph index: a passage both return is one
node (the same id and the same metadata, so the same ``node.hash``), and the fusion returns the union."""

from __future__ import annotations

import json
from pathlib import Path

import chromadb
import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.retrievers import QueryFusionRetriever

from llama_index_mhop.graph import HippoGraphIndex
from llama_index_mhop.stores.corpus import load_documents
from llama_index_mhop.stores.vector_index import sync_vector_index
from tests.word_bag import WordBagEmbedding

DATA = Path(__file__).parent / "graph" / "data"
QUERY = "Who directed Marty?"


@pytest.fixture
def folder(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for record in json.loads((DATA / "mini_corpus.json").read_text()):
        (notes / f"{record['title']}.txt").write_text(record["text"])
    return notes


def _fused(vector_index, graph, top_k: int) -> tuple[list[str], set[str], dict[str, set[str]]]:
    vector = vector_index.as_retriever(similarity_top_k=top_k)
    hippo = graph.as_retriever(similarity_top_k=top_k)
    hashes: dict[str, set[str]] = {}
    for retriever in (vector, hippo):
        for hit in retriever.retrieve(QUERY):
            hashes.setdefault(hit.node.node_id, set()).add(hit.node.hash)
    fusion = QueryFusionRetriever([vector, hippo], similarity_top_k=top_k, num_queries=1, use_async=False,
                                  mode="reciprocal_rerank", llm=MockLLM())
    return [hit.node.node_id for hit in fusion.retrieve(QUERY)], set(hashes), hashes


def _assert_union(fused: list[str], union: set[str], hashes: dict[str, set[str]], top_k: int) -> None:
    assert len(fused) == len(set(fused)) == min(top_k, len(union))
    assert set(fused) <= union
    assert all(len(h) == 1 for h in hashes.values()), "a passage came back as two different nodes"


def test_graph_over_the_vector_index_fuses_into_the_union(folder):
    client = chromadb.EphemeralClient()
    embedder = WordBagEmbedding()
    vector_index = sync_vector_index(folder, chroma_client=client, embed_model=embedder, collection_name="fused_vec",
                                     show_progress=False).index
    graph = HippoGraphIndex.from_vector_index(vector_index, chroma_client=client, name="fused_graph",
                                              show_progress=False)
    fused, union, hashes = _fused(vector_index, graph, 4)
    _assert_union(fused, union, hashes, 4)

    # A document the graph indexes before the passage index does: the graph stores that passage itself.
    (folder / "Marty remake.txt").write_text("Marty was remade for television in 1953, also directed by Delbert Mann.")
    graph.refresh_ref_docs(load_documents(folder), show_progress=False)
    vector_index = sync_vector_index(folder, chroma_client=client, embed_model=embedder, collection_name="fused_vec",
                                     show_progress=False).index
    fused, union, hashes = _fused(vector_index, graph, 4)
    _assert_union(fused, union, hashes, 4)


@pytest.mark.parametrize("top_k", [3, 4])
def test_a_graph_built_from_the_same_folder_fuses_into_the_union(folder, top_k):
    client = chromadb.EphemeralClient()
    embedder = WordBagEmbedding()
    vector_index = sync_vector_index(folder, chroma_client=client, embed_model=embedder, collection_name=f"fused_vec_k{top_k}",
                                     show_progress=False).index
    graph = HippoGraphIndex.from_documents(folder, embed_model=embedder, chroma_client=client, name="fused_graph2",
                                           show_progress=False)
    fused, union, hashes = _fused(vector_index, graph, top_k)
    _assert_union(fused, union, hashes, top_k)
