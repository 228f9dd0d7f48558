"""Personalized PageRank: hand-computed values, agreement with networkx and igraph, dangling nodes, bad input, and
its properties on random graphs (hypothesis)."""

from __future__ import annotations

import logging

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse
from scipy.sparse import csgraph

from llama_index_mhop.graph import PageRankGraph
from tests.graph.walk_reference import (
    from_networkx,
    personalized_pagerank,
    reset_vector,
    scores_by_node,
    transition_matrix,
)

# Path 0 -1- 1 -2- 2 -1- 3 (undirected, weights on the edges), reset on node 0, damping 0.5.
# Out-weights 1, 3, 3, 1, so the walk steps 0->1 (1), 1->0 (1/3), 1->2 (2/3), 2->1 (2/3), 2->3 (1/3), 3->2 (1).
# Stationary equations x = 0.5 * M x + 0.5 * e0:
#   x3 = x2/6;  x2 = x1/3 + x3/2  => x2 = 4 x1 / 11,  x3 = 2 x1 / 33
#   x1 = x0/2 + x2/3              => x1 = 33 x0 / 58
#   x0 = x1/6 + 1/2               => x0 = 58/105
# so x = (58, 33, 12, 2) / 105.
PATH_EDGES = [(0, 1), (1, 2), (2, 3)]
PATH_WEIGHTS = [1.0, 2.0, 1.0]
PATH_EXPECTED = np.array([58, 33, 12, 2]) / 105

# Directed: 0->1 (w 1), 0->3 (w 1), 1->2 (w 2), 3->0 (w 3); node 2 is dangling. Reset e0, damping 0.5.
# Steps: 0->1 (1/2), 0->3 (1/2), 1->2 (1), 3->0 (1); node 2's mass returns to the reset (node 0).
#   x1 = x0/4,  x3 = x0/4,  x2 = x1/2 = x0/8
#   x0 = x3/2 + x2/2 + 1/2 = 3 x0/16 + 1/2  => x0 = 8/13
# so x = (8, 2, 1, 2) / 13.
DANGLING_EDGES = [(0, 1), (0, 3), (1, 2), (3, 0)]
DANGLING_WEIGHTS = [1.0, 1.0, 2.0, 3.0]
DANGLING_EXPECTED = np.array([8, 2, 1, 2]) / 13


def test_hand_computed_undirected_path():
    graph = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS, tol=1e-14)
    np.testing.assert_allclose(graph.run(np.array([1.0, 0, 0, 0])), PATH_EXPECTED, rtol=0, atol=1e-13)
    # The default tolerance (L1 change 1e-10) bounds the L1 error by 1e-10 at damping 0.5.
    default = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS).run(np.array([1.0, 0, 0, 0]))
    assert np.abs(default - PATH_EXPECTED).sum() < 1e-10


def test_hand_computed_dangling_node_returns_mass_to_reset():
    graph = PageRankGraph.from_edges(4, DANGLING_EDGES, DANGLING_WEIGHTS, directed=True, tol=1e-14)
    scores = graph.run([2.0, 0, 0, 0])  # not normalised on purpose
    np.testing.assert_allclose(scores, DANGLING_EXPECTED, rtol=0, atol=1e-13)
    fn = personalized_pagerank(graph.transition, np.array([1.0, 0, 0, 0]), tol=1e-14)
    np.testing.assert_allclose(fn, DANGLING_EXPECTED, rtol=0, atol=1e-13)


def test_unreachable_nodes_get_exactly_zero():
    # The path plus a separate edge 4 - 5: the walk from node 0 never reaches it.
    graph = PageRankGraph.from_edges(6, [*PATH_EDGES, (4, 5)], [*PATH_WEIGHTS, 7.0], tol=1e-14)
    scores = graph.run(np.eye(6)[0])
    assert scores[4] == 0.0 and scores[5] == 0.0
    np.testing.assert_allclose(scores[:4], PATH_EXPECTED, atol=1e-13)


def test_damping_zero_returns_the_reset():
    graph = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS, damping=0.0)
    np.testing.assert_allclose(graph.run([1.0, 3.0, 0, 0]), [0.25, 0.75, 0, 0])


def test_transition_matrix_is_column_stochastic_with_empty_dangling_columns():
    adjacency = sparse.coo_matrix((DANGLING_WEIGHTS, tuple(np.array(DANGLING_EDGES).T)), shape=(4, 4)).tocsr()
    m = transition_matrix(adjacency)
    assert isinstance(m, sparse.csr_matrix)
    dense = m.toarray()
    np.testing.assert_allclose(dense.sum(axis=0), [1, 1, 0, 1])
    assert dense[1, 0] == 0.5 and dense[3, 0] == 0.5 and dense[2, 1] == 1.0 and dense[0, 3] == 1.0


def test_transition_matrix_rejects_bad_weights():
    with pytest.raises(ValueError, match="square"):
        transition_matrix(sparse.csr_matrix((3, 4)))
    with pytest.raises(ValueError, match="negative"):
        transition_matrix(np.array([[0.0, -1.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="NaN"):
        transition_matrix(np.array([[0.0, np.nan], [1.0, 0.0]]))


def test_zero_weight_edges_are_no_edges():
    # Node 1's only out-edge has weight 0, so it is dangling.
    m = transition_matrix(np.array([[0.0, 1.0], [0.0, 0.0]]))
    np.testing.assert_allclose(m.toarray(), [[0, 0], [1, 0]])


@pytest.mark.parametrize(
    ("reset", "message"),
    [
        ([0.0, 0.0, 0.0, 0.0], "all zero"),
        ([1.0, -0.5, 0.0, 0.0], "negative"),
        ([1.0, np.nan, 0.0, 0.0], "NaN"),
        ([1.0, np.inf, 0.0, 0.0], "NaN or infinite"),
        ([1.0, 0.0, 0.0], "length 4"),
        ([[1.0, 0.0, 0.0, 0.0]], "length 4"),
    ],
)
def test_invalid_reset_raises(reset, message):
    graph = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS)
    with pytest.raises(ValueError, match=message):
        graph.run(np.array(reset))
    with pytest.raises(ValueError, match=message):
        personalized_pagerank(graph.transition, np.array(reset))


def test_invalid_parameters_raise():
    m = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS).transition
    reset = np.eye(4)[0]
    for damping in (1.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="damping"):
            personalized_pagerank(m, reset, damping=damping)
    with pytest.raises(ValueError, match="tol"):
        personalized_pagerank(m, reset, tol=0)
    with pytest.raises(ValueError, match="max_iter"):
        personalized_pagerank(m, reset, max_iter=0)
    with pytest.raises(ValueError, match="column-stochastic"):
        personalized_pagerank(sparse.csr_matrix(np.full((4, 4), 1.0)), reset)
    with pytest.raises(ValueError, match="sparse"):
        personalized_pagerank(np.eye(4), reset)
    with pytest.raises(ValueError, match="endpoints"):
        PageRankGraph.from_edges(3, [(0, 3)])


def test_non_convergence_logs_a_warning_and_still_returns_a_distribution(caplog):
    graph = PageRankGraph.from_edges(4, PATH_EDGES, PATH_WEIGHTS, max_iter=1)
    with caplog.at_level(logging.WARNING, logger="llama_index_mhop.graph.walk.exact"):
        scores = graph.run(np.eye(4)[0])
    assert "did not converge" in caplog.text
    assert scores.sum() == pytest.approx(1.0) and scores.min() >= 0


def _random_graph(n: int, m: int, seed: int, directed: bool) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    edges = set()
    while len(edges) < m:
        a, b = rng.integers(0, n, size=2)
        if a != b and (directed or (b, a) not in edges):
            edges.add((int(a), int(b)))
    edges = np.array(sorted(edges))
    return edges, rng.uniform(0.1, 5.0, size=len(edges))


def _seeds(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    reset = np.zeros(n)
    reset[rng.choice(n, size=5, replace=False)] = rng.uniform(0.1, 1.0, size=5)
    return reset


@pytest.mark.parametrize("directed", [False, True])
def test_agrees_with_networkx_on_a_random_weighted_graph(directed):
    n = 200
    edges, weights = _random_graph(n, 600, seed=7, directed=directed)
    g = nx.DiGraph() if directed else nx.Graph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from((int(a), int(b), float(w)) for (a, b), w in zip(edges, weights, strict=True))
    if directed:
        assert any(g.out_degree(v) == 0 for v in g), "the directed case should exercise dangling nodes"
    graph = PageRankGraph.from_edges(n, edges, weights, directed=directed)
    for seed in range(3):
        reset = _seeds(n, seed)
        ours = graph.run(reset)
        theirs = nx.pagerank(
            g,
            alpha=0.5,
            personalization={i: float(v) for i, v in enumerate(reset) if v > 0},
            weight="weight",
            tol=1e-15,
            max_iter=1000,
        )
        np.testing.assert_allclose(ours, [theirs[i] for i in range(n)], rtol=0, atol=1e-8)


def test_from_networkx_keeps_node_keys():
    g = nx.Graph()
    g.add_edge("a", "b", weight=1.0)
    g.add_edge("b", "c", weight=2.0)
    g.add_edge("c", "d", weight=1.0)
    graph = from_networkx(g, nodelist=["a", "b", "c", "d"], version="v1", tol=1e-14)
    scores = scores_by_node(graph, graph.run(reset_vector(graph, {"a": 1.0})))
    assert scores == pytest.approx(dict(zip("abcd", PATH_EXPECTED, strict=True)), abs=1e-12)
    assert graph.version == "v1" and graph.n_nodes == 4 and graph.n_edges == 6
    assert graph.nodes == ["a", "b", "c", "d"]
    with pytest.raises(ValueError, match="unknown node"):
        reset_vector(graph, {"zz": 1.0})
    with pytest.raises(ValueError, match="duplicate"):
        PageRankGraph(np.eye(2), nodes=["a", "a"])


@pytest.mark.parametrize("directed", [False, True])
def test_agrees_with_igraph_prpack(directed):
    igraph = pytest.importorskip("igraph")
    n = 200
    edges, weights = _random_graph(n, 600, seed=11, directed=directed)
    g = igraph.Graph(n=n, edges=edges.tolist(), directed=directed)
    g.es["weight"] = weights.tolist()
    graph = PageRankGraph.from_edges(n, edges, weights, directed=directed)
    for seed in range(3):
        reset = _seeds(n, seed)
        theirs = g.personalized_pagerank(
            damping=0.5, reset=reset.tolist(), weights="weight", directed=directed, implementation="prpack"
        )
        np.testing.assert_allclose(graph.run(reset), theirs, rtol=0, atol=1e-8)


def test_the_damped_copy_of_the_matrix_walks_as_the_damping_applied_at_each_step():
    n = 50
    edges, weights = _random_graph(n, 150, seed=3, directed=True)
    graph = PageRankGraph.from_edges(n, edges, weights, directed=True, damping=0.85)
    reset = _seeds(n, 1)
    np.testing.assert_allclose(
        graph.run(reset),
        personalized_pagerank(graph.transition, reset, damping=0.85),
        atol=1e-14,
    )
    assert not np.allclose(graph.run(reset), PageRankGraph.from_edges(n, edges, weights, directed=True).run(reset))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(min_value=1, max_value=12),
    data=st.data(),
    damping=st.floats(min_value=0.0, max_value=0.9),
    directed=st.booleans(),
)
def test_result_is_the_fixed_point_probability_vector_with_mass_exactly_where_the_walk_can_go(
    n, data, damping, directed
):
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=30))
    weights = data.draw(st.lists(st.floats(0.01, 10.0), min_size=len(pairs), max_size=len(pairs)))
    reset = np.array(data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n)))
    if reset.sum() <= 0:
        reset[0] = 1.0
    graph = PageRankGraph.from_edges(n, pairs, weights, directed=directed, damping=damping, tol=1e-13)
    x = graph.run(reset)
    assert x.min() >= 0 and x.sum() == pytest.approx(1.0, abs=1e-12)
    m = graph.transition
    dangling = np.asarray(m.sum(axis=0)).ravel() == 0
    r = reset / reset.sum()
    expected = damping * (m @ x) + (damping * x[dangling].sum() + 1 - damping) * r
    np.testing.assert_allclose(x, expected, atol=1e-10)
    assert np.all(x[r > 1e-9] > 0)  # a restart share of each seed stays where it is (tiny ones may underflow)
    support = np.flatnonzero(reset)
    walk = m.transpose().tocsr()  # row i: where a walker at i goes
    reachable = set()
    for source in support.tolist():
        reachable.update(csgraph.breadth_first_order(walk, source, directed=True, return_predecessors=False).tolist())
    assert np.all(x[[i for i in range(n) if i not in reachable]] == 0.0)
