import asyncio
import json
import logging

import pytest
from dspy.utils import DummyLM
from llama_index.core.schema import QueryBundle

from llama_index_mhop.components.rrf_fusion import PerspectiveQueryTransform
from llama_index_mhop.lm.clients import function_lm
from llama_index_mhop.rules.perspectives import heuristic_perspectives
from llama_index_mhop.rules.text import normalize

QUERY = "Which magazine was started first, Arthur's Magazine or First for Women?"


def _usable(perspectives):
    return (
        4 <= len(perspectives) <= 5
        and all(isinstance(p, str) and p.strip() for p in perspectives)
        and len({normalize(p) for p in perspectives}) == len(perspectives)
    )


def test_no_lm_uses_heuristic():
    transform = PerspectiveQueryTransform()
    assert transform.generate(QUERY) == heuristic_perspectives(QUERY)
    assert transform.fallback_counts.total == 0


def test_well_formed_lm_answer_is_used_in_order():
    answer = ["Arthur's Magazine founding", "First for Women founding year", "magazines 1844", "women magazine"]
    transform = PerspectiveQueryTransform(lm=DummyLM([{"perspectives": json.dumps(answer)}]))
    assert transform.generate(QUERY) == answer
    assert transform.fallback_counts.total == 0


def test_too_few_and_duplicate_perspectives_are_topped_up():
    lm = DummyLM([{"perspectives": json.dumps(["Arthur's Magazine", "arthur's magazine", "  "])}])
    perspectives = PerspectiveQueryTransform(lm=lm).generate(QUERY)
    assert perspectives[0] == "Arthur's Magazine" and _usable(perspectives)


def test_too_many_perspectives_are_cut_to_five():
    lm = DummyLM([{"perspectives": json.dumps([f"angle {i}" for i in range(9)])}])
    assert PerspectiveQueryTransform(lm=lm).generate(QUERY) == [f"angle {i}" for i in range(5)]


@pytest.mark.parametrize("bad", ["not json at all {", "", "[]", '{"a": 1}', "[1, 2, 3]"])
def test_malformed_answers_fall_back(bad, caplog):
    transform = PerspectiveQueryTransform(lm=DummyLM([{"perspectives": bad}]))
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.lm.steps"):
        perspectives = transform.generate(QUERY)
    assert _usable(perspectives)
    assert perspectives == heuristic_perspectives(QUERY)
    assert transform.fallback_counts["perspectives"] == 1
    assert "LLM-free" in caplog.text


def test_lm_that_raises_falls_back():
    def broken(messages):
        raise RuntimeError("service unavailable")

    transform = PerspectiveQueryTransform(lm=function_lm(broken))
    assert transform.generate(QUERY) == heuristic_perspectives(QUERY)
    assert asyncio.run(transform.agenerate(QUERY)) == heuristic_perspectives(QUERY)
    assert transform.fallback_counts["perspectives"] == 2


def test_lm_that_hangs_times_out():
    import time

    def slow(messages):
        time.sleep(2)
        return "[[ ## perspectives ## ]]\n[\"late\"]\n\n[[ ## completed ## ]]"

    transform = PerspectiveQueryTransform(lm=function_lm(slow), timeout=0.2)
    assert transform.generate(QUERY) == heuristic_perspectives(QUERY)
    assert transform.fallback_counts["perspectives"] == 1


def test_bundle_carries_perspectives_for_transform_query_engine():
    transform = PerspectiveQueryTransform()
    bundle = transform.run(QUERY)
    assert bundle.query_str == QUERY
    assert bundle.custom_embedding_strs == heuristic_perspectives(QUERY)  # the query itself is already first
    bundle = asyncio.run(transform.arun(QueryBundle(QUERY)))
    assert bundle.custom_embedding_strs == heuristic_perspectives(QUERY)


def test_context_metadata_reaches_the_generator():
    context = ["The Oberoi family is an Indian family famous for hotels, namely through The Oberoi Group."]
    bundle = PerspectiveQueryTransform().run("Where is the head office of the Oberoi family's hotel company?",
                                             metadata={"context": context})
    assert any("Oberoi Group" in s for s in bundle.custom_embedding_strs)


