"""Property tests (hypothesis) of Reciprocal Rank Fusion.

Each property is checked against an independent computation or a contract from the docstrings, on rankings with
repeats that hypothesis draws. PageRank's properties are in ``tests/graph/test_ppr.py``, those of the parsers of
LM answers in ``tests/test_parsing.py``.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llama_index_mhop.rules.ranking import reciprocal_rank_fusion

PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- strategies -------------------------------------------------------------------------------------------------

ids = st.integers(min_value=0, max_value=12)
rankings = st.lists(st.lists(ids, max_size=10), max_size=6)
rrf_k = st.integers(min_value=0, max_value=100)


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


