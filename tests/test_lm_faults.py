"""Every component answers every query while its LM raises, hangs, answers nothing, answers invalid JSON, JSON of
the wrong shape, or ten times the allowed items; each failed step falls back and is counted.

Components here: the perspective transform, the fact filter, the graph retriever, and OpenIE while the graph index
is built. The retrievers' own fault tests sit with their tests (tests/retrievers/)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.graph.extraction import EXTRACTION_STEP, OpenIEExtractor
from llama_index_mhop.rules.text import normalize
from tests.lm_faults import FAULTS, faulty_lm

TIMEOUT = 0.5
QUERY = "Are Imperial River and Amaradia both located in the same country?"


def test_perspective_transform_survives_every_fault(caplog):
    lm = faulty_lm()
    transform = PerspectiveQueryTransform(lm=lm, timeout=TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        for _ in FAULTS:
            perspectives = transform.generate(QUERY)
            assert 4 <= len(perspectives) <= 5
            assert len({normalize(p) for p in perspectives}) == len(perspectives)
            assert lm.wait_idle()  # the hung call has returned: the next fault reaches the LM
    assert lm.fault_calls == list(FAULTS)
    # five faults fall back; ten times too many perspectives is repaired (cut to five), not a fallback
    assert transform.fallback_counts["perspectives"] == 5
    assert caplog.text.count("using the LLM-free strategy") == 5


def test_fact_filter_survives_every_fault():
    facts = [
        fact_node("imperial river", "is located in", "florida", score=0.9),
        fact_node("amaradia", "flows through", "romania", score=0.8),
        fact_node("tokyo", "is capital of", "japan", score=0.1),
    ]
    lm = faulty_lm()
    fact_filter = DSPyFactFilter(lm=lm, timeout=TIMEOUT)
    for _ in FAULTS:
        kept = fact_filter.postprocess_nodes(facts, query_str=QUERY)
        assert 1 <= len(kept) <= 4 and all(node in facts for node in kept)
        assert lm.wait_idle()
    assert lm.fault_calls == list(FAULTS)
    assert fact_filter.fallback_counts.total == len(FAULTS)  # 40 invented facts match no candidate either


@pytest.mark.parametrize("fault", FAULTS)
def test_async_paths_fall_back_too(fault):
    transform = PerspectiveQueryTransform(lm=faulty_lm([fault]), timeout=TIMEOUT)
    perspectives = asyncio.run(transform.agenerate(QUERY))
    assert 4 <= len(perspectives) <= 5


# -- the graph: the fact filter inside HippoGraphRetriever, and OpenIE while indexing -------------------------------

GRAPH_QUERY = "Who directed Marty?"


@pytest.fixture(scope="module")
def graph_index(build_graph, mini_graph_documents):
    return build_graph(mini_graph_documents, "faults_mini")


@pytest.mark.parametrize("fault", FAULTS)
def test_graph_retriever_answers_with_the_fallback_facts(graph_index, fault):
    reference = graph_index.as_retriever(similarity_top_k=3, fact_filter=DSPyFactFilter(llm_free_strategy="top_score"))
    expected = [(n.node.node_id, n.score) for n in reference.retrieve(GRAPH_QUERY)]
    retriever = graph_index.as_retriever(similarity_top_k=3,
                                         fact_filter=DSPyFactFilter(lm=faulty_lm([fault]), timeout=TIMEOUT))
    assert [(n.node.node_id, n.score) for n in retriever.retrieve(GRAPH_QUERY)] == expected
    assert [(n.node.node_id, n.score) for n in asyncio.run(retriever.aretrieve(GRAPH_QUERY))] == expected
    assert retriever.fallback_counts.total == 2
    assert retriever.last_trace["kept_facts"] == reference.last_trace["kept_facts"]


@pytest.mark.parametrize("fault", FAULTS)
def test_graph_index_built_through_a_faulty_openie_lm_equals_the_llm_free_build(
    fault, build_graph, graph_snapshot, mini_graph_documents
):
    extractor = OpenIEExtractor(lm=faulty_lm([fault]), timeout=TIMEOUT, backoff_seconds=0)
    index = build_graph(mini_graph_documents, f"faults_{fault}", extractor=extractor)
    reference = build_graph(mini_graph_documents, f"faults_reference_{fault}")
    assert graph_snapshot(index) == graph_snapshot(reference)
    assert extractor.fallback_counts[EXTRACTION_STEP] == len(mini_graph_documents)
