"""Property tests (hypothesis): RRF, Personalized PageRank and every parser of LM answers.

Each property is checked against an independent computation or a contract from the docstrings, on inputs
hypothesis draws: rankings with repeats, random weighted graphs with dangling and unreachable nodes, and arbitrary
strings and JSON-like values as LM answers.
"""

from __future__ import annotations

import json
import re
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from llama_index_mhop.fusion import reciprocal_rank_fusion
from llama_index_mhop.graph.extraction import Extraction, entity_key, parse_extraction
from llama_index_mhop.parsing import (
    MAX_ITEM_CHARS,
    LMOutputError,
    parse_confidence,
    parse_queries,
    parse_ranking,
    parse_string_list,
)
from llama_index_mhop.perspectives import (
    MAX_PERSPECTIVES,
    MIN_PERSPECTIVES,
    ContextPassage,
    heuristic_perspectives,
    repair_perspectives,
)
from llama_index_mhop.text import normalize

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARSER = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------------------------

ids = st.integers(min_value=0, max_value=12)
rankings = st.lists(st.lists(ids, max_size=10), max_size=6)
rrf_k = st.integers(min_value=0, max_value=100)

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


def _fused_scores(lists: list[list[int]], k: int) -> dict[int, float]:
    return dict(reciprocal_rank_fusion(lists, k=k))


def _expected_scores(lists: list[list[int]], k: int) -> dict[int, float]:
    """RRF recomputed from the definition: each list counts an id once, at its first position."""
    expected: dict[int, float] = {}
    for ranking in lists:
        for item in set(ranking):
            expected[item] = expected.get(item, 0.0) + 1.0 / (k + ranking.index(item) + 1)
    return expected


def _tie_groups(fused: list[tuple[int, float]]) -> list[tuple[float, frozenset[int]]]:
    groups: list[tuple[float, set[int]]] = []
    for item, score in fused:
        if groups and groups[-1][0] == score:
            groups[-1][1].add(item)
        else:
            groups.append((score, {item}))
    return [(score, frozenset(items)) for score, items in groups]


# -- Reciprocal Rank Fusion ---------------------------------------------------------------------------------------


@PROPERTY
@given(lists=rankings, k=rrf_k, data=st.data())
def test_rrf_scores_do_not_depend_on_the_order_of_the_lists(lists, k, data) -> None:
    permuted = data.draw(st.permutations(lists))
    original = reciprocal_rank_fusion(lists, k=k)
    shuffled = reciprocal_rank_fusion(permuted, k=k)
    assert dict(original) == dict(shuffled)  # exactly: the sums are exactly rounded (math.fsum)
    # Only ids with equal scores may change places.
    assert [items for _, items in _tie_groups(original)] == [items for _, items in _tie_groups(shuffled)]


@PROPERTY
@given(lists=rankings, k=rrf_k)
def test_rrf_score_is_the_sum_of_reciprocal_ranks(lists, k) -> None:
    fused = reciprocal_rank_fusion(lists, k=k)
    expected = _expected_scores(lists, k)
    assert set(dict(fused)) == set(expected)
    assert len(fused) == len(expected)  # every id once
    for item, score in fused:
        assert score == pytest.approx(expected[item], rel=1e-12)
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)


@PROPERTY
@given(lists=rankings.filter(lambda ls: any(len(r) > 1 for r in ls)), k=rrf_k, data=st.data())
def test_rrf_moving_an_item_up_never_lowers_its_score(lists, k, data) -> None:
    which = data.draw(st.sampled_from([i for i, r in enumerate(lists) if len(r) > 1]))
    ranking = list(lists[which])
    position = data.draw(st.integers(min_value=1, max_value=len(ranking) - 1))
    item = ranking[position]
    ranking[position - 1], ranking[position] = ranking[position], ranking[position - 1]
    moved = [*lists[:which], ranking, *lists[which + 1:]]
    before, after = _fused_scores(lists, k), _fused_scores(moved, k)
    assert after[item] >= before[item] - 1e-15


@PROPERTY
@given(lists=rankings, extra=st.lists(ids, min_size=1, max_size=10), k=rrf_k, data=st.data())
def test_rrf_adding_a_list_never_lowers_a_score(lists, extra, k, data) -> None:
    item = data.draw(st.sampled_from(extra))
    before = _fused_scores(lists, k)
    after = _fused_scores([*lists, extra], k)
    assert after[item] > before.get(item, 0.0)
    for other, score in before.items():  # no id loses anything either
        assert after[other] >= score - 1e-15


@PROPERTY
@given(lists=rankings, k=rrf_k, top_n=st.integers(min_value=0, max_value=15))
def test_rrf_top_n_is_a_prefix_of_the_full_result(lists, k, top_n) -> None:
    full = reciprocal_rank_fusion(lists, k=k)
    assert reciprocal_rank_fusion(lists, k=k, top_n=top_n) == full[:top_n]


# -- parsers of LM answers ----------------------------------------------------------------------------------------


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
