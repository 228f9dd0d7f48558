"""Defensive parsing of LM answers: every malformed shape ends in a valid value or LMOutputError."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.parsing import (
    LMOutputError,
    parse_confidence,
    parse_queries,
    parse_ranking,
    parse_string_list,
)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("85", 85),
        ("85%", 85),
        ("Confidence: 85.", 85),
        ("85 percent", 85),
        ("0.85", 85),
        (".85", 85),
        ("1.0", 100),
        ("1", 1),
        ("0", 0),
        ("100", 100),
        ("72.6", 73),
        ("8/10", 80),
        ("85 out of 100", 85),
        ("eighty", 80),
        ("Eighty-five", 85),
        ("seventy five", 75),
        ("one hundred", 100),
        ("high", 85),
        ("Very high.", 95),
        ("fairly high", 75),
        ("medium", 60),
        ("LOW", 30),
        ("very low", 10),
        ("none", 0),
        (85, 85),
        (0.5, 50),
    ],
)
def test_parse_confidence_reads_numbers_words_and_levels(answer, expected):
    assert parse_confidence(answer) == expected


@pytest.mark.parametrize("answer", ["150", "-5", "101%", "250 out of 100", "7/0"])
def test_parse_confidence_rejects_out_of_range(answer):
    with pytest.raises(LMOutputError):
        parse_confidence(answer)


@pytest.mark.parametrize("answer", [None, "", "   ", "I cannot tell", "n/a", {"a": 1}, object()])
def test_parse_confidence_rejects_missing_or_meaningless(answer):
    with pytest.raises(LMOutputError):
        parse_confidence(answer)


def test_parse_ranking_keeps_valid_indices_in_lm_order_then_the_rest_in_prior_order():
    # 9 and -1 are out of range, 2 is repeated, 1 and 4 are missing.
    assert parse_ranking("3, 9, 2, 2, -1, 0", 5, prior=[4, 3, 2, 1, 0]) == [3, 2, 0, 4, 1]


def test_parse_ranking_default_prior_is_input_order():
    assert parse_ranking("[2]", 4) == [2, 0, 1, 3]


@pytest.mark.parametrize(
    "answer", ["[1, 0, 2]", "1 > 0 > 2", "Passage 1, Passage 0, Passage 2", "1\n0\n2", "ranking: 1,0,2"]
)
def test_parse_ranking_reads_common_shapes(answer):
    assert parse_ranking(answer, 3) == [1, 0, 2]


def test_parse_ranking_reads_one_based_answers_only_when_they_cannot_be_zero_based():
    # Names 3 (out of range for n=3) and never 0: an LM that counted from 1.
    assert parse_ranking("3, 1, 2", 3) == [2, 0, 1]
    # Names 0: zero-based, the out-of-range 3 is dropped.
    assert parse_ranking("3, 0, 1", 3) == [0, 1, 2]
    assert parse_ranking("3, 1, 2", 3, one_based=False) == [1, 2, 0]


@pytest.mark.parametrize("answer", ["", "no ranking", "7, 8, 9", "-1", None])
def test_parse_ranking_without_any_valid_index_raises(answer):
    with pytest.raises(LMOutputError):
        parse_ranking(answer, 3)


def test_parse_ranking_rejects_a_prior_that_is_not_a_permutation():
    with pytest.raises(ValueError, match="permutation"):
        parse_ranking("0", 3, prior=[0, 0, 1])


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=80), st.integers(min_value=1, max_value=30))
def test_parse_ranking_is_a_permutation_or_raises(answer, n):
    try:
        ranking = parse_ranking(answer, n)
    except LMOutputError:
        return
    assert sorted(ranking) == list(range(n))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=60))
def test_parse_confidence_is_in_range_or_raises(answer):
    try:
        value = parse_confidence(answer)
    except LMOutputError:
        return
    assert 0 <= value <= 100


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            "Maximum Overdrive director\nLeland filming location",
            ["Maximum Overdrive director", "Leland filming location"],
        ),
        (
            '["Maximum Overdrive director", "Leland filming"]',
            ["Maximum Overdrive director", "Leland filming"],
        ),
        (
            "1. Maximum Overdrive director\n2) Leland filming",
            ["Maximum Overdrive director", "Leland filming"],
        ),
        ("- a\n* b\n• c", ["a", "b", "c"]),
        ("Query 1: a\nQuery 2: b", ["a", "b"]),
        ("a; b", ["a", "b"]),
        ('"quoted query"', ["quoted query"]),
        ("Leland, North Carolina", ["Leland, North Carolina"]),
        ("a\nA\n\n  a  ", ["a"]),
        ("none", []),
        ("", []),
        ('[1, "real query", null, 2.5]', ["real query"]),
        ("['single', 'quoted']", ["single", "quoted"]),
    ],
)
def test_parse_string_list_shapes(answer, expected):
    assert parse_string_list(answer) == expected


def test_parse_string_list_cuts_long_items_and_counts():
    assert parse_string_list("x" * 500) == ["x" * 300]
    assert parse_string_list("a\nb\nc", max_items=2) == ["a", "b"]


def test_parse_queries_truncates_too_many_and_drops_issued():
    assert parse_queries("q1\nq2\nq3\nq4\nq5", 1, 3) == ["q1", "q2", "q3"]
    assert parse_queries("Original?\nnew one", 1, 2, exclude=["original?"]) == ["new one"]


@pytest.mark.parametrize("answer", ["", "   ", "none", "[1, 2, 3]", '["", "  "]', None, "[]"])
def test_parse_queries_without_a_usable_query_raises(answer):
    with pytest.raises(LMOutputError):
        parse_queries(answer, 1, 3)


def test_parse_queries_below_min_count_raises():
    with pytest.raises(LMOutputError, match="at least 2"):
        parse_queries("only one", 2, 3)


def test_parse_queries_checks_its_bounds():
    with pytest.raises(ValueError):
        parse_queries("a", 2, 1)


def test_answers_written_as_json_objects():
    assert parse_confidence('{"confidence": 80, "reason": "both hops found"}') == 80
    assert parse_confidence('{"score": "0.4"}') == 40
    assert parse_ranking('{"ranking": [2, 0]}', 3) == [2, 0, 1]
    assert parse_string_list('{"queries": ["Leland film", "1986 film"], "note": 3}') == ["Leland film", "1986 film"]
    assert parse_string_list('{"unexpected": [1, 2]}') == []
    # Numbers of an object that holds no answer, or of broken JSON, mean nothing.
    for bad in ('{"unexpected": [1, 2]}', "{not: valid json [", '{"confidence": null}'):
        with pytest.raises(LMOutputError):
            parse_confidence(bad)
        with pytest.raises(LMOutputError):
            parse_ranking(bad, 3)
    with pytest.raises(LMOutputError, match="broken JSON object"):
        parse_string_list("{not: valid json [")
