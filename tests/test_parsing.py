"""Defensive parsing of LM answers: every malformed shape ends in a valid value or LMOutputError.

Fixed examples first, then properties (hypothesis) of every parser of LM answers on arbitrary strings, text shaped
like LM answers and JSON-like values, each checked against the contract of its docstring.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.extraction import Extraction, entity_key, parse_extraction
from llama_index_mhop.rules.parsing import (
    MAX_ITEM_CHARS,
    LMOutputError,
    parse_confidence,
    parse_queries,
    parse_ranking,
    parse_string_list,
)
from llama_index_mhop.rules.perspectives import (
    MAX_PERSPECTIVES,
    MIN_PERSPECTIVES,
    ContextPassage,
    heuristic_perspectives,
    repair_perspectives,
)
from llama_index_mhop.rules.text import normalize


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


# -- properties of every parser of LM answers ----------------------------------------------------------------------

PARSER = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=True) | st.text(max_size=40)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=20,
)
# Text shaped like LM answers: numbers, percentages, ratios, words, bullets, brackets, JSON fragments.
answer_like = st.from_regex(
    r"\A(\s?(-?\d{1,4}(\.\d{1,3})?%?|\d+ ?/ ?\d+|out of|high|very low|none|eighty-five|\[|\]|,|\"|'|\n|[-*•]|"
    r"\d[.)]|query \d:|[A-Za-z]{1,8})){0,12}\Z"
)
json_text = json_values.map(lambda v: json.dumps(v, allow_nan=True))
lm_text = st.text(max_size=200) | answer_like | json_text


def _call(parse, *args: Any, **kwargs: Any) -> Any:
    """The parser's value, or None when it raised LMOutputError (its documented error); anything else fails."""
    try:
        return parse(*args, **kwargs)
    except LMOutputError:
        return None


@PARSER
@given(value=lm_text | json_values)
@example("8/0")
@example("1e999")
@example("9" * 5000)
@example(float("inf"))
@example(["85", 3.5, None])
def test_parse_confidence_returns_0_to_100_or_lm_output_error(value) -> None:
    result = _call(parse_confidence, value)
    if result is not None:
        assert type(result) is int
        assert 0 <= result <= 100


@PARSER
@given(value=lm_text | json_values, n=st.integers(min_value=0, max_value=12), data=st.data())
@example(value="[3, 1, 3, 99, -1]", n=4, data=None)
def test_parse_ranking_returns_a_permutation_or_lm_output_error(value, n, data) -> None:
    prior = data.draw(st.permutations(range(n))) if data is not None else None
    result = _call(parse_ranking, value, n, prior=prior)
    if result is not None:
        assert sorted(result) == list(range(n))
        assert all(type(i) is int for i in result)


@PARSER
@given(value=lm_text | json_values, max_items=st.none() | st.integers(min_value=0, max_value=6),
       max_chars=st.integers(min_value=1, max_value=MAX_ITEM_CHARS))
@example(value='["a", "A", " a ", "none", 3, "b"]', max_items=None, max_chars=MAX_ITEM_CHARS)
def test_parse_string_list_returns_clean_distinct_strings_or_lm_output_error(value, max_items, max_chars) -> None:
    result = _call(parse_string_list, value, max_items=max_items, max_chars=max_chars)
    if result is None:
        return
    assert isinstance(result, list)
    if max_items is not None:
        assert len(result) <= max_items
    keys = [item.lower() for item in result]
    assert len(keys) == len(set(keys))
    for item in result:
        assert type(item) is str
        assert item and item == item.strip()
        assert len(item) <= max_chars
        assert "\n" not in item and "\r" not in item
        assert item.lower() not in {"none", "n/a", "nothing", "null", "[]"}


@PARSER
@given(value=lm_text | json_values, counts=st.tuples(st.integers(0, 3), st.integers(1, 4)).filter(
    lambda c: c[0] <= c[1]), exclude=st.lists(st.text(max_size=20), max_size=3))
def test_parse_queries_returns_enough_new_queries_or_lm_output_error(value, counts, exclude) -> None:
    min_count, max_count = counts
    result = _call(parse_queries, value, min_count=min_count, max_count=max_count, exclude=exclude)
    if result is None:
        return
    assert min_count <= len(result) <= max_count
    issued = {e.strip().lower() for e in exclude}
    for query in result:
        assert type(query) is str and query.strip()
        assert query.lower() not in issued


_queries = st.text(min_size=1, max_size=80).filter(lambda q: q.strip()) | st.from_regex(
    r"\A(What|Who|Which) [A-Z][a-z]{2,8}( [A-Z][a-z]{2,8})? (directed|founded|wrote) [A-Z][a-z]{2,8}\?\Z")
_contexts = st.lists(st.builds(ContextPassage, title=st.text(max_size=20), text=st.text(max_size=120)), max_size=3)


@PARSER
@given(raw=lm_text | json_values | st.lists(st.text(max_size=60), max_size=8), query=_queries, context=_contexts)
@example(raw=["a" * 500 + "x", "a" * 500 + "y"], query="Who founded Acme?", context=[])
@example(raw="???", query="Who founded Acme?", context=[])
def test_repair_perspectives_returns_4_to_5_distinct_perspectives_or_value_error(raw, query, context) -> None:
    try:
        result = repair_perspectives(raw, query, context)
    except ValueError:  # documented: nothing usable (the caller falls back)
        return
    assert isinstance(result, list)
    assert MIN_PERSPECTIVES <= len(result) <= MAX_PERSPECTIVES
    for item in result:
        assert type(item) is str and item.strip() and len(item) <= 400
    # Distinct as the module compares them (normalised text), or as plain text when nothing is left to normalise.
    keys = [normalize(item) or item.strip().lower() for item in result]
    assert len(keys) == len(set(keys))


_triples = st.lists(st.lists(st.text(max_size=15), min_size=0, max_size=4) | json_values, max_size=5)


@PARSER
@given(entities=json_values | st.lists(st.text(max_size=20), max_size=6), triples=json_values | _triples)
@example(entities=["Paris", "France"], triples=[["Paris", "capital of", "France"]])
@example(entities=[], triples=[["  ", "p", "x"]])
def test_parse_extraction_returns_a_valid_extraction_or_lm_output_error(entities, triples) -> None:
    result = _call(parse_extraction, SimpleNamespace(named_entities=entities, triples=triples))
    if result is None:
        return
    assert isinstance(result, Extraction)
    assert result.from_lm is True
    assert result.entities or result.triples
    for name in result.entities:
        assert type(name) is str and entity_key(name)
    for triple in result.triples:
        assert len(triple) == 3 and all(type(part) is str for part in triple)
        subject, predicate, obj = triple
        assert entity_key(subject) and predicate and entity_key(obj)


def test_property_strategies_reach_the_interesting_answers() -> None:
    """The answer-shaped strategy produces parseable answers too, not only garbage (a guard on the strategy)."""
    assert re.fullmatch(r"\A(\s?(-?\d{1,4}(\.\d{1,3})?%?|high)){0,12}\Z", "85% high")
    assert parse_confidence(" 85% high") == 85
    assert parse_ranking("[2, 0]", 3) == [2, 0, 1]


# -- regressions: inputs the properties above found, kept as fixed examples ---------------------------------------


def test_parse_ranking_huge_number_is_an_lm_output_error() -> None:
    with pytest.raises(LMOutputError):
        parse_ranking("9" * 5000, 3)


def test_parse_string_list_deeply_nested_brackets_do_not_crash() -> None:
    result = _call(parse_string_list, "[" * 5000)
    assert result is None or all(isinstance(item, str) for item in result)


@pytest.mark.parametrize("query", ["Nirvana", "Kurt Cobain?", "Who is he?"])
def test_perspectives_of_a_one_entity_query_are_still_four(query: str) -> None:
    assert len(repair_perspectives([query], query, [])) >= MIN_PERSPECTIVES
    assert len(heuristic_perspectives(query)) >= MIN_PERSPECTIVES


def test_perspectives_that_differ_only_past_the_cut_are_not_repeated() -> None:
    result = repair_perspectives(["a" * 500 + tail for tail in "wxyz"], "Who founded Acme?", [])
    assert len(set(result)) == len(result)
