"""Every component answers every query while its LM raises, hangs, answers nothing, answers invalid JSON, JSON of
the wrong shape, or ten times the allowed items; each failed step falls back and is counted."""

from __future__ import annotations

import asyncio
import logging

import pytest

from llama_index_mhop.postprocessors import DSPyFactFilter, fact_node
from llama_index_mhop.query_transforms import PerspectiveQueryTransform
from llama_index_mhop.retrievers import RRFFusionRetriever
from llama_index_mhop.text import normalize
from tests.lm_faults import FAULTS, faulty_lm
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
