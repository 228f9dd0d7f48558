"""LM answers of a million characters get the same answers as short ones (the parsers read them in one pass).

Timing lives in benchmarks/parser_linearity.py; these tests assert what the parsers answer on such inputs. Before
the parsers were linear, the first tests here did not finish. Through an LM step, an answer is first cut to
``MAX_ANSWER_CHARS`` (tests/test_lm_limits.py).
"""

from __future__ import annotations

import dspy
import pytest
from dspy.utils import DummyLM

from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.graph.extraction import MAX_ENTITY_CHARS, MAX_PREDICATE_CHARS, parse_extraction
from llama_index_mhop.lm.answers import MAX_ANSWER_CHARS
from llama_index_mhop.rules.parsing import (
    MAX_LIST_ITEMS,
    LMOutputError,
    parse_confidence,
    parse_queries,
    parse_string_list,
)
from tests.fact_filter_lm import answer, texts

MILLION = 1_000_000


def test_confidence_after_a_million_digits():
    assert parse_confidence("0" * MILLION + "85%") == 85
    assert parse_confidence("score " + "0" * MILLION + "7 out of 10") == 70


def test_confidence_ratio_wins_over_an_earlier_long_number():
    assert parse_confidence("9" * MILLION + " then 8/10") == 80
    assert parse_confidence("1" * MILLION + " or 90 percent") == 90


@pytest.mark.parametrize("text", ["1" * MILLION, "7" * MILLION + " / 10", "9" * MILLION + "%"])
def test_a_million_digit_confidence_is_out_of_range(text):
    with pytest.raises(LMOutputError, match="outside 0-100"):
        parse_confidence(text)


def test_a_million_item_list_reads_only_its_head():
    items = parse_string_list("\n".join(f"- query {i}" for i in range(MILLION // 10)))
    assert items == [f"query {i}" for i in range(MAX_LIST_ITEMS)]
    assert parse_queries("[" + "'a" * (MILLION // 2)) == ["a"]


def test_extraction_drops_overlong_names_and_predicates():
    prediction = dspy.Prediction(
        named_entities=["Alice", "A" * MILLION, "B" * (MAX_ENTITY_CHARS + 1)],
        triples=[["Alice", "p" * MILLION, "Bob"], ["Alice", "x" * (MAX_PREDICATE_CHARS + 1), "Bob"],
                 ["Alice", "knows", "B" * MILLION], ["Alice", "knows", "Bob"]],
    )
    source = "Alice knows Bob. " + "A" * MILLION
    extraction = parse_extraction(prediction, source)
    assert extraction.entities == ("Alice",)
    assert extraction.triples == (("Alice", "knows", "Bob"),)


def test_fact_filter_matches_long_facts_exactly_and_nothing_else():
    long_object = "x" * (MAX_ANSWER_CHARS // 2)  # far past what is compared by similarity, within what is read
    nodes = [fact_node("alice", "knows", long_object, 0.5), fact_node("bob", "knows", "carol", 0.9)]
    copied = DSPyFactFilter(lm=DummyLM([answer(("alice", "knows", long_object))]), top_n=1)
    assert texts(copied.postprocess_nodes(nodes, query_str="Whom does Alice know?")) == [
        f"alice knows {long_object}"]
    assert copied.fallback_counts.total == 0
    # One character off: a long fact is never matched by similarity, so this is an invented fact (fallback).
    altered = DSPyFactFilter(lm=DummyLM([answer(("alice", "knows", "y" + long_object[1:]))]), top_n=1)
    assert texts(altered.postprocess_nodes(nodes, query_str="Whom does Alice know?")) == ["bob knows carol"]
    assert altered.fallback_counts.total == 1
    # An answer past MAX_ANSWER_CHARS is cut, so its JSON breaks: unusable, never read in part.
    too_long = "x" * MILLION
    nodes = [fact_node("alice", "knows", too_long, 0.5), fact_node("bob", "knows", "carol", 0.9)]
    cut = DSPyFactFilter(lm=DummyLM([answer(("alice", "knows", too_long))]), top_n=1)
    assert texts(cut.postprocess_nodes(nodes, query_str="Whom does Alice know?")) == ["bob knows carol"]
    assert cut.fallback_counts.total == 1
