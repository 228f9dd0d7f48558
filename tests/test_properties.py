"""Property tests (hypothesis): RRF and Personalized PageRank.

Each property is checked against an independent computation or a contract from the docstrings, on inputs
hypothesis draws: rankings with repeats, and random weighted graphs with dangling and unreachable nodes. The
properties of the parsers of LM answers are in ``tests/test_parsing.py``.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import sparse

from llama_index_mhop.fusion import reciprocal_rank_fusion
from llama_index_mhop.graph.ppr import PageRankGraph, personalized_pagerank, transition_matrix

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


# -- Personalized PageRank ----------------------------------------------------------------------------------------


@st.composite
def weighted_graphs(draw: st.DrawFn) -> tuple[sparse.csr_matrix, np.ndarray, float]:
    """A random weighted graph (directed or symmetric; dangling and unreachable nodes allowed) and a reset."""
    n = draw(st.integers(min_value=1, max_value=25))
    edges = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                    st.floats(min_value=0.01, max_value=10.0)), max_size=3 * n))
    symmetric = draw(st.booleans())
    rows = [u for u, _, _ in edges] + ([v for _, v, _ in edges] if symmetric else [])
    cols = [v for _, v, _ in edges] + ([u for u, _, _ in edges] if symmetric else [])
    weights = [w for _, _, w in edges] * (2 if symmetric else 1)
    adjacency = sparse.coo_matrix((weights, (rows, cols)), shape=(n, n)).tocsr()
    support = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=min(n, 4), unique=True))
    reset = np.zeros(n)
    for node in support:
        reset[node] = draw(st.floats(min_value=0.05, max_value=5.0))
    damping = draw(st.floats(min_value=0.0, max_value=0.85))
    return adjacency, reset, damping


def _reachable(adjacency: sparse.csr_matrix, sources: np.ndarray) -> set[int]:
    seen = set(int(s) for s in sources)
    queue = deque(seen)
    while queue:
        node = queue.popleft()
        row = adjacency.getrow(node)
        for target, weight in zip(row.indices, row.data, strict=True):
            if weight > 0 and int(target) not in seen:
                seen.add(int(target))
                queue.append(int(target))
    return seen


@PROPERTY
@given(graph=weighted_graphs())
def test_ppr_is_a_probability_vector_with_mass_exactly_where_the_walk_can_go(graph) -> None:
    adjacency, reset, damping = graph
    scores = personalized_pagerank(transition_matrix(adjacency), reset, damping=damping)
    assert scores.shape == reset.shape
    assert np.all(scores >= 0)
    assert abs(scores.sum() - 1.0) < 1e-9
    support = np.flatnonzero(reset)
    assert np.all(scores[support] > 0)
    reachable = _reachable(adjacency, support)
    unreachable = [i for i in range(len(reset)) if i not in reachable]
    assert np.all(scores[unreachable] == 0.0)


@PROPERTY
@given(graph=weighted_graphs())
def test_cached_graph_gives_the_same_scores(graph) -> None:
    adjacency, reset, damping = graph
    cached = PageRankGraph(adjacency, damping=damping).run(reset)
    direct = personalized_pagerank(transition_matrix(adjacency), reset, damping=damping)
    assert np.abs(cached - direct).sum() < 1e-9
