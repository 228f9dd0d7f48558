"""A retrieval of several searches reads one version of the passage index: when a sync finishes between two of its
searches, it runs again (without holding the index's read side across LM calls and stalling the sync)."""

from __future__ import annotations

import threading

import chromadb
from llama_index.core import Document
from llama_index.core.schema import NodeWithScore, QueryBundle

from llama_index_mhop.components.base import CheckedQueryRetriever
from llama_index_mhop.components.rrf_fusion import RRFFusionRetriever
from llama_index_mhop.stores.vector_index import sync_vector_index
from tests.word_bag import WordBagEmbedding

FIRST = "Pat Hingle was an American actor. He played Commissioner Gordon in Batman."
SECOND = "Pat Hingle was an American actor. He was born in Miami, Florida and served in the Navy."


def docs(pat: str) -> list[Document]:
    return [Document(text=pat, id_="Pat Hingle", metadata={"title": "Pat Hingle"}),
            Document(text="Batman is a 1989 film directed by Tim Burton.", id_="Batman", metadata={"title": "Batman"})]


class TwoSearches(CheckedQueryRetriever):
    """Searches the index twice per retrieval; before the second search of its first run, a sync edits a document."""

    def __init__(self, index, on_between) -> None:
        self.index, self.on_between, self.runs = index, on_between, 0
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.runs += 1
        retriever = self.index.as_retriever(similarity_top_k=2)
        first = retriever.retrieve(query_bundle.query_str)
        if self.runs == 1:
            self.on_between()
        return first + retriever.retrieve(query_bundle.query_str)


def test_a_sync_between_two_searches_makes_the_retrieval_run_again_on_one_version():
    embedder, client = WordBagEmbedding(), chromadb.EphemeralClient()
    index = sync_vector_index(docs(FIRST), collection_name="one_version", chroma_client=client,
                              embed_model=embedder, show_progress=False).index
    retriever = TwoSearches(index, lambda: sync_vector_index(docs(SECOND), collection_name="one_version",
                                                             chroma_client=client, embed_model=embedder,
                                                             show_progress=False))
    texts = [n.node.get_content() for n in retriever.retrieve("Who was Pat Hingle?")]
    assert retriever.runs == 2
    assert SECOND in texts and FIRST not in texts


def test_rrf_fusion_racing_syncs_never_mixes_two_versions_of_a_document():
    embedder, client = WordBagEmbedding(), chromadb.EphemeralClient()
    index = sync_vector_index(docs(FIRST), collection_name="rrf_race", chroma_client=client, embed_model=embedder,
                              show_progress=False).index
    retriever = RRFFusionRetriever.from_defaults(index)
    done, mixed, errors = threading.Event(), [], []

    def query() -> None:
        while not done.is_set():
            try:
                texts = {n.node.get_content() for n in retriever.retrieve("Who did Pat Hingle play in Batman?")}
                if FIRST in texts and SECOND in texts:
                    mixed.append(texts)
            except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
                errors.append(exc)

    thread = threading.Thread(target=query)
    thread.start()
    try:
        for round_number in range(20):
            sync_vector_index(docs(SECOND if round_number % 2 == 0 else FIRST), collection_name="rrf_race",
                              chroma_client=client, embed_model=embedder, show_progress=False)
    finally:
        done.set()
        thread.join()
    assert errors == [] and mixed == []
