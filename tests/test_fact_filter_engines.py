"""DSPyFactFilter as a node postprocessor of standard LlamaIndex engines over a real Chroma VectorStoreIndex:
passages that state the recognised facts come first (without an LM: the passages about what the query names),
the rest follow in retrieval order."""

from __future__ import annotations

import asyncio

import chromadb
import pytest
from dspy.utils import DummyLM
from llama_index.core.chat_engine import CondenseQuestionChatEngine
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine

from llama_index_mhop.components.fact_filter import DSPyFactFilter
from llama_index_mhop.rules.ranking import PassageView, first_page
from llama_index_mhop.stores.corpus import make_document
from llama_index_mhop.stores.vector_index import build_vector_index
from tests.fact_filter_lm import BrokenLM, answer

CORPUS = [
    ("Maximum Overdrive", "Maximum Overdrive is a 1986 film written and directed by Stephen King. It was shot in "
                          "and around Leland, North Carolina."),
    ("Stephen King", "Stephen King is an American author of horror novels, born in Portland, Maine."),
    ("Portland, Maine", "Portland is the largest city in the U.S. state of Maine."),
    ("Leland, North Carolina", "Leland is a town in Brunswick County, North Carolina."),
    ("Bread", "the baker bakes bread every morning for the town."),  # states no fact
]
QUERY = "Which 1986 film was shot around Leland?"


@pytest.fixture(scope="module")
def index(embed_model):
    documents = [make_document(title, text) for title, text in CORPUS]
    return build_vector_index(documents, collection_name="fact_filter_engines", chroma_client=chromadb.EphemeralClient(),
                              embed_model=embed_model, show_progress=False)


@pytest.fixture(scope="module")
def retrieval_order(index):
    return titles(index.as_retriever(similarity_top_k=5).retrieve(QUERY))


def titles(nodes) -> list[str]:
    return [n.node.metadata["title"] for n in nodes]


def engines(index, fact_filter):
    """The three standard engines, each with the filter as its only node postprocessor."""
    as_query_engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=5, node_postprocessors=[fact_filter])
    retriever_engine = RetrieverQueryEngine.from_args(index.as_retriever(similarity_top_k=5), llm=MockLLM(),
                                                      node_postprocessors=[fact_filter])
    chat_engine = CondenseQuestionChatEngine.from_defaults(query_engine=retriever_engine, llm=MockLLM())
    return {"as_query_engine": as_query_engine, "RetrieverQueryEngine": retriever_engine, "chat": chat_engine}


def ask(engine, asynchronous: bool, query: str = QUERY):
    if isinstance(engine, CondenseQuestionChatEngine):
        engine.reset()
        return asyncio.run(engine.achat(query)) if asynchronous else engine.chat(query)
    return asyncio.run(engine.aquery(query)) if asynchronous else engine.query(query)


def rest_in_order(order: list[str], first: list[str]) -> list[str]:
    return first + [title for title in order if title not in first]


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("engine_name", ["as_query_engine", "RetrieverQueryEngine", "chat"])
def test_scripted_lm_fact_puts_its_passage_first(index, retrieval_order, engine_name, asynchronous):
    assert retrieval_order[0] != "Stephen King"  # so the reordering shows
    fact_filter = DSPyFactFilter(lm=DummyLM([answer(("Stephen King", "born in", "Portland"))] * 2))
    response = ask(engines(index, fact_filter)[engine_name], asynchronous)
    assert titles(response.source_nodes) == rest_in_order(retrieval_order, ["Stephen King"])
    assert fact_filter.fallback_counts.total == 0


CHAIN_QUERY = "In which state is the largest city where the director of Maximum Overdrive was born?"


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("engine_name", ["as_query_engine", "RetrieverQueryEngine", "chat"])
def test_llm_free_order_is_the_first_page(index, engine_name, asynchronous):
    retrieved = index.as_retriever(similarity_top_k=5).retrieve(CHAIN_QUERY)
    assert titles(retrieved)[1] != "Stephen King"  # so the reordering shows
    page = first_page(CHAIN_QUERY, [PassageView.from_node(n.node) for n in retrieved])
    got = titles(ask(engines(index, DSPyFactFilter())[engine_name], asynchronous, CHAIN_QUERY).source_nodes)
    # The passage about what the query names leads, and the passage its bridge (the director) leads to follows.
    assert got[:2] == ["Maximum Overdrive", "Stephen King"]
    assert got == [titles(retrieved)[i] for i in page.order]


def test_llm_free_supporting_only_keeps_the_passages_stating_the_mentioned_facts(index):
    # The query names Leland and 1986: the facts about them are stated by these two passages only.
    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=5,
                                   node_postprocessors=[DSPyFactFilter(supporting_only=True)])
    assert set(titles(engine.query(QUERY).source_nodes)) == {"Maximum Overdrive", "Leland, North Carolina"}


def test_lm_failure_falls_back_and_keeps_every_passage(index, retrieval_order):
    fact_filter = DSPyFactFilter(lm=BrokenLM())
    got = titles(engines(index, fact_filter)["as_query_engine"].query(QUERY).source_nodes)
    assert fact_filter.fallback_counts["fact_filter"] == 1
    assert sorted(got) == sorted(retrieval_order)


def test_facts_are_extracted_once_per_passage_content(index):
    calls = []

    class CountingExtractor:
        def extract(self, text, title=None):
            from llama_index_mhop.graph.extraction import extract_llm_free

            calls.append(title)
            return extract_llm_free(text, title)

    engine = index.as_query_engine(llm=MockLLM(), similarity_top_k=5,
                                   node_postprocessors=[DSPyFactFilter(extractor=CountingExtractor(),
                                                                       supporting_only=True)])
    first = titles(engine.query(QUERY).source_nodes)
    second = titles(engine.query(QUERY).source_nodes)
    assert first == second and sorted(calls) == sorted(title for title, _ in CORPUS)


def test_passages_of_a_graph_index_use_its_stored_facts(embed_model):
    from llama_index_mhop.graph import HippoGraphIndex

    graph = HippoGraphIndex.from_documents([make_document(title, text) for title, text in CORPUS],
                                           embed_model=embed_model, chroma_client=chromadb.EphemeralClient(),
                                           name="fact_filter_graph", show_progress=False)

    class NeverCalled:
        def extract(self, text, title=None):
            raise AssertionError(f"{title!r} was extracted again: the graph's stored facts should be used")

    fact_filter = DSPyFactFilter(graph_index=graph, extractor=NeverCalled(), supporting_only=True)
    engine = graph.as_query_engine(llm=MockLLM(), node_postprocessors=[fact_filter])
    kept = titles(engine.query(QUERY).source_nodes)  # no extraction: NeverCalled would raise
    assert "Maximum Overdrive" in kept and "Bread" not in kept
