"""Every component answers every query while its LM raises, hangs, answers nothing, answers invalid JSON, JSON of
the wrong shape, or ten times the allowed items; each failed step falls back and is counted.

Components: the perspective transform, the RRF retriever, the fact filter, the confidence loop, the graph
retriever, and OpenIE while the graph index is built."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llama_index_mhop.graph.extraction import EXTRACTION_STEP, OpenIEExtractor
from llama_index_mhop.postprocessors import DSPyFactFilter, fact_node
from llama_index_mhop.query_transforms import PerspectiveQueryTransform
from llama_index_mhop.retrievers import RRFFusionRetriever
from llama_index_mhop.text import normalize
from tests.graph.test_index import build as build_graph
from tests.graph.test_index import mini_docs, snapshot
from tests.lm_faults import FAULTS, faulty_lm
from tests.retrievers.test_confidence_loop import QUERY as LOOP_QUERY
from tests.retrievers.test_confidence_loop import make_retriever as make_loop
from tests.retrievers.test_rrf_fusion import RecordingRetriever

TIMEOUT = 0.5
QUERY = "Are Imperial River and Amaradia both located in the same country?"


def test_perspective_transform_survives_every_fault(caplog):
    lm = faulty_lm()
    transform = PerspectiveQueryTransform(lm=lm, timeout=TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm"):
        for _ in FAULTS:
            perspectives = transform.generate(QUERY)
            assert 4 <= len(perspectives) <= 5
            assert len({normalize(p) for p in perspectives}) == len(perspectives)
    assert lm.fault_calls == list(FAULTS)
    # five faults fall back; ten times too many perspectives is repaired (cut to five), not a fallback
    assert transform.fallback_counts["perspectives"] == 5
    assert caplog.text.count("using the LLM-free strategy") == 5


def test_rrf_retriever_answers_with_faulty_lm_sync_and_async():
    for run in (lambda r: r.retrieve(QUERY), lambda r: asyncio.run(r.aretrieve(QUERY))):
        transform = PerspectiveQueryTransform(lm=faulty_lm(), timeout=TIMEOUT)
        retriever = RRFFusionRetriever(base_retriever=RecordingRetriever(), query_transform=transform)
        assert len(run(retriever)) == 21
        assert retriever.fallback_counts.total >= 2  # three iterations, faults in order: at least two fall back


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
    assert fact_filter.fallback_counts.total == len(FAULTS)  # 40 invented facts match no candidate either


@pytest.mark.parametrize("fault", FAULTS)
def test_async_paths_fall_back_too(fault):
    transform = PerspectiveQueryTransform(lm=faulty_lm([fault]), timeout=TIMEOUT)
    perspectives = asyncio.run(transform.agenerate(QUERY))
    assert 4 <= len(perspectives) <= 5


# -- the confidence loop: every step of a failed LM call answers as the LLM-free loop does --------------------------


@pytest.mark.parametrize("fault", [f for f in FAULTS if f != "too_many"])
def test_confidence_loop_falls_back_to_the_llm_free_loop(fault, caplog):
    expected = [n.node.node_id for n in make_loop([]).retrieve(LOOP_QUERY)]
    retriever = make_loop([], lm=faulty_lm([fault]), lm_timeout=TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm"):
        assert [n.node.node_id for n in retriever.retrieve(LOOP_QUERY)] == expected
    steps = retriever.last_trace["steps"]
    assert set(steps.values()) == {"fallback"}
    assert retriever.fallback_counts.total == len(steps) == caplog.text.count("using the LLM-free strategy")
    asynchronous = make_loop([], lm=faulty_lm([fault]), lm_timeout=TIMEOUT)
    assert [n.node.node_id for n in asyncio.run(asynchronous.aretrieve(LOOP_QUERY))] == expected
    assert asynchronous.fallback_counts.total == len(steps)


def test_confidence_loop_survives_ten_times_too_many_items():
    retriever = make_loop([], lm=faulty_lm(["too_many"]), lm_timeout=TIMEOUT)
    nodes = retriever.retrieve(LOOP_QUERY)
    assert len(nodes) == 21 and len({n.node.node_id for n in nodes}) == 21
    trace = retriever.last_trace
    assert all(len(r["queries"]) <= retriever.max_round1_queries + 1 for r in trace["rounds"])
    assert retriever.fallback_counts.total == list(trace["steps"].values()).count("fallback") >= 1


# -- the graph: the fact filter inside HippoGraphRetriever, and OpenIE while indexing -------------------------------

GRAPH_QUERY = "Who directed Marty?"


@pytest.fixture(scope="module")
def graph_index():
    return build_graph(mini_docs(), "faults_mini")


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
def test_graph_index_built_through_a_faulty_openie_lm_equals_the_llm_free_build(fault):
    extractor = OpenIEExtractor(lm=faulty_lm([fault]), timeout=TIMEOUT, backoff_seconds=0)
    index = build_graph(mini_docs(), f"faults_{fault}", extractor=extractor)
    assert snapshot(index) == snapshot(build_graph(mini_docs(), f"faults_reference_{fault}"))
    assert extractor.fallback_counts[EXTRACTION_STEP] == len(mini_docs())
