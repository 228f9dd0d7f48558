"""Local-push Personalized PageRank: its proven error bounds against the exact power iteration, and top-k agreement."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.walk import GraphWalk, PageRankGraph, SparseVector, WalkSettings
from tests.graph.walk_reference import push_pagerank

PATH = PageRankGraph.from_edges(4, [(0, 1), (1, 2), (2, 3)], [1.0, 2.0, 1.0], method="exact", tol=1e-14)
PATH_EXPECTED = np.array([58, 33, 12, 2]) / 105  # hand-computed in test_ppr.py


def random_graph(seed: int, n: int, m: int, directed: bool = False, **kwargs) -> PageRankGraph:
    rng = np.random.default_rng(seed)
    edges = rng.integers(0, n, size=(m, 2))
    edges = edges[edges[:, 0] != edges[:, 1]]
    weights = rng.choice([1.0, 1.0, 1.0, 10.0], size=len(edges)) * rng.uniform(0.8, 1.0, size=len(edges))
    return PageRankGraph.from_edges(n, edges, weights, directed=directed, tol=1e-14, **kwargs)


def test_push_reaches_the_hand_computed_path_scores():
    reset = np.array([1.0, 0.0, 0.0, 0.0])
    result = push_pagerank(PATH, reset, epsilon=1e-12)
    assert np.abs(result.scores - PATH_EXPECTED).sum() <= result.l1_bound <= 1e-10
    assert result.scores == pytest.approx(PATH_EXPECTED, abs=1e-11)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(2, 60),
    density=st.floats(0.5, 4.0),
    epsilon=st.sampled_from([1e-2, 1e-4, 1e-6, 1e-8]),
    directed=st.booleans(),
    seeds=st.integers(1, 5),
)
def test_error_is_within_the_proven_bounds(seed, n, density, epsilon, directed, seeds):
    graph = random_graph(seed, n, int(density * n), directed=directed)
    rng = np.random.default_rng(seed + 1)
    reset = np.zeros(n)
    reset[rng.choice(n, size=min(seeds, n), replace=False)] = rng.uniform(0.1, 1.0, size=min(seeds, n))
    exact = graph.run(reset)
    result = push_pagerank(graph, reset, epsilon=epsilon)
    degree = np.where(graph._out_weight > 0, graph._out_weight, 1.0)
    assert result.scores.min() >= 0 and result.scores.sum() == pytest.approx(1.0)
    # Residual left at termination: at most epsilon * d(u) per node.
    assert result.residual <= epsilon * degree.sum() + 1e-15
    # The normalised estimate is within 2 |r|_1 / |p|_1 of the exact vector (L1).
    assert np.abs(exact - result.scores).sum() <= result.l1_bound + 1e-9
    if not directed and (graph._out_weight > 0).all():
        # Undirected, no dangling node: the unnormalised PPR sums to 1, the estimate p = scores * mass is a lower
        # bound of it, and misses at most epsilon * d(u) at each node.
        missed = exact - result.scores * result.mass
        assert missed.min() >= -1e-9
        assert (missed <= epsilon * degree + 1e-9).all()


@pytest.mark.parametrize("seed", range(12))
def test_top_k_agrees_with_exact_on_random_graphs(seed):
    """A passage/entity-shaped graph, a HippoRAG-style reset (a little on every passage, most on a few entities)."""
    rng = np.random.default_rng(seed)
    passages, entities = 400, 600
    n = passages + entities
    mentions = np.stack([np.repeat(np.arange(passages), 6), passages + rng.integers(0, entities, 6 * passages)], 1)
    facts = passages + rng.integers(0, entities, size=(800, 2))
    edges = np.concatenate([mentions, facts[facts[:, 0] != facts[:, 1]]])
    weights = np.where(np.arange(len(edges)) % 6 == 0, 10.0, 1.0)  # every passage has one title edge
    graph = PageRankGraph.from_edges(n, edges, weights, tol=1e-14, method="push")
    reset = np.zeros(n)
    reset[:passages] = 0.05 * rng.random(passages)
    reset[passages + rng.choice(entities, 5, replace=False)] = 1.0
    exact = graph.run(reset)[:passages]
    pushed = push_pagerank(graph, reset).scores[:passages]
    k = 21
    top_exact = np.argsort(-exact, kind="stable")[:k]
    top_push = np.argsort(-pushed, kind="stable")[:k]
    assert set(top_exact.tolist()) == set(top_push.tolist())
    assert np.abs(exact - pushed).max() <= push_pagerank(graph, reset).l1_bound


def test_method_is_chosen_by_size():
    graph = random_graph(0, 50, 120)
    small = GraphWalk.load(graph, 10, None, WalkSettings()).pagerank
    assert small.method == "exact"
    assert GraphWalk.load(graph, 10, None, WalkSettings("exact", push_min_nodes=50)).pagerank.method == "exact"
    reset = np.ones(50)
    large = GraphWalk.load(graph, 10, None, WalkSettings(push_min_nodes=50)).pagerank
    assert large.method == "push"
    assert np.array_equal(large.run(reset), small.run(reset))  # the power iteration, whatever the method
    pushed = push_pagerank(large, reset)
    assert np.abs(pushed.scores - large.run(reset)).sum() <= pushed.l1_bound


def test_bad_push_settings_are_refused():
    with pytest.raises(ValueError, match="method must be one of"):
        random_graph(0, 5, 5, method="fast")
    with pytest.raises(ValueError, match="push_epsilon must be > 0"):
        random_graph(0, 5, 5, push_epsilon=0.0)
    with pytest.raises(ValueError, match="epsilon must be > 0"):
        push_pagerank(PATH, np.ones(4), epsilon=-1.0)
    with pytest.raises(ValueError, match="length 4"):
        push_pagerank(PATH, np.ones(3))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 80), epsilon=st.sampled_from([1e-3, 1e-6, 1e-9]),
       directed=st.booleans())
def test_a_push_from_sparse_seeds_keeps_the_invariant_and_leaves_its_scratch_zeroed(seed, n, epsilon, directed):
    """p + (1 - d) (I - d M)^-1 r equals the exact unnormalised PageRank of the seeds, over the nodes the push
    reached; the borrowed arrays come back all zero, and the next push reuses them to the same result."""
    graph = random_graph(seed, n, 2 * n, directed=directed, method="push")
    rng = np.random.default_rng(seed + 2)
    nodes = np.sort(rng.choice(n, size=min(3, n), replace=False))
    seeds = SparseVector(nodes, rng.uniform(0.1, 2.0, size=nodes.size))
    pushed = graph.push_from(seeds, epsilon)
    d, m = graph.damping, graph.transition.toarray()
    solve = np.linalg.inv(np.eye(n) - d * m)
    exact = (1 - d) * solve @ seeds.to_dense(n)
    kept = pushed.estimate.to_dense(n) + (1 - d) * solve @ pushed.remainder.to_dense(n)
    np.testing.assert_allclose(kept, exact, rtol=1e-9, atol=1e-12)
    assert set(seeds.nodes) <= set(pushed.estimate.nodes)  # every seed is reached, pushed or not
    borrowed = graph._scratch.take()
    assert not borrowed[0].any() and not borrowed[1].any()
    graph._scratch.give_back(borrowed)
    again = graph.push_from(seeds, epsilon)
    assert np.array_equal(again.estimate.values, pushed.estimate.values)
    assert np.array_equal(again.remainder.values, pushed.remainder.values)


def test_concurrent_pushes_each_get_their_own_arrays():
    from concurrent.futures import ThreadPoolExecutor

    graph = random_graph(21, 3000, 9000, method="push")
    rng = np.random.default_rng(22)
    all_seeds = [SparseVector(np.sort(rng.choice(3000, 4, replace=False)), rng.uniform(0.1, 1, 4)) for _ in range(32)]
    alone = [graph.push_from(s, 1e-9) for s in all_seeds]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda s: graph.push_from(s, 1e-9), all_seeds))
    for one, other in zip(alone, together, strict=True):
        assert np.array_equal(one.estimate.nodes, other.estimate.nodes)
        assert np.array_equal(one.estimate.values, other.estimate.values)


def test_whether_a_graph_is_undirected_is_found_from_its_matrix():
    """Built from undirected edges a graph says so; built from a matrix, the matrix is checked (the early stop of
    a push asked for a certain top k relies on it)."""
    undirected = random_graph(5, 40, 120)
    assert undirected.symmetric
    adjacency = undirected.transition.multiply(undirected.out_weight[None, :]).tocsr()  # A = M diag(out), symmetric
    assert PageRankGraph(adjacency).symmetric
    one_way = adjacency.tolil()
    i, j = adjacency.nonzero()[0][0], adjacency.nonzero()[1][0]
    one_way[i, j] *= 2.0
    assert not PageRankGraph(one_way.tocsr()).symmetric
    assert not random_graph(5, 40, 120, directed=True).symmetric
