"""Reference forms of Personalized PageRank that the tests and benchmarks compare the walk against.

* :func:`personalized_pagerank`: the power iteration on a bare transition matrix (:func:`transition_matrix`);
* :func:`push_pagerank`: a local push of a whole reset vector, normalised, with its proven error bounds;
* :func:`from_networkx`, :func:`reset_vector`, :func:`scores_by_node`: a graph and its vectors by node key.

Each runs the package's own arithmetic (:mod:`llama_index_mhop.graph.walk.ppr`,
:mod:`llama_index_mhop.graph.walk.push_ppr`), so its results are the walk's, bit for bit.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import sparse

from llama_index_mhop.graph.walk.exact import (
    DEFAULT_DAMPING,
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    PageRankGraph,
    SparseVector,
    _check_damping,
    _check_params,
    _check_reset,
    _power_iteration,
)
from llama_index_mhop.graph.walk.push import push_sparse, threshold_weights
from llama_index_mhop.graph.walk.walk import walk_matrices as _walk


def transition_matrix(adjacency: Any) -> sparse.csr_matrix:
    """The column-stochastic transition matrix of a weighted graph, as CSR: ``M[j, i] = adjacency[i, j] /
    out_weight(i)``; the column of a dangling node (no positive out-weight) is empty.

    Raises:
        ValueError: the matrix is not square, or holds a negative, NaN or infinite weight.
    """
    return _walk(adjacency)[0]


def _check_transition(m: Any) -> sparse.csr_matrix:
    if not sparse.issparse(m):
        raise ValueError("transition must be a scipy sparse matrix, as returned by transition_matrix()")
    m = m if isinstance(m, sparse.csr_matrix) else sparse.csr_matrix(m)
    if m.shape[0] != m.shape[1]:
        raise ValueError(f"transition must be square, got shape {m.shape}")
    if m.nnz:
        col_sums = np.bincount(m.indices, weights=m.data, minlength=m.shape[1])
        bad = ~(np.isclose(col_sums, 1.0, atol=1e-8) | (col_sums == 0))
        if bad.any() or m.data.min() < 0:
            raise ValueError(
                "transition must be column-stochastic (each column sums to 1, or is empty for a dangling "
                f"node); column {int(np.flatnonzero(bad)[0]) if bad.any() else '?'} is not. "
                "Build it with transition_matrix(adjacency)."
            )
    return m


def personalized_pagerank(
    transition: sparse.spmatrix,
    reset: np.ndarray,
    damping: float = DEFAULT_DAMPING,
    tol: float = DEFAULT_TOL,
    max_iter: int = DEFAULT_MAX_ITER,
) -> np.ndarray:
    """Personalized PageRank by power iteration on a column-stochastic ``transition`` (see
    :meth:`PageRankGraph.run`), the damping applied at each iteration rather than to a copy of the matrix.

    Raises:
        ValueError: a reset of the wrong length, negative, NaN/infinite or all zero; a damping outside [0, 1);
            a non-positive tol or max_iter; a transition that is not square and column-stochastic.
    """
    m = _check_transition(transition)
    damping = _check_damping(damping)
    _check_params(tol, max_iter)
    r = _check_reset(reset, m.shape[0])
    return _power_iteration(m, r, damping, tol, max_iter)


@dataclass(frozen=True)
class PushResult:
    """The push estimate of a whole reset and what it guarantees.

    Attributes:
        scores: the estimate of the PPR vector (non-negative, sums to 1).
        mass: ``|p|_1`` of the unnormalised estimate ``p`` (``p = scores * mass``).
        residual: the residual mass left, ``|r|_1``: the unnormalised estimate misses at most this much.
        l1_bound: a proven bound on the L1 distance of ``scores`` to the exact PPR vector (infinite when nothing
            was over the threshold, so nothing was pushed and ``scores`` is all zero).
        rounds: push rounds run.
        pushes: node pushes done (a node pushed in several rounds counts each time).
        remainder: the residual vector ``r`` itself (only when asked for).
    """

    scores: np.ndarray
    mass: float
    residual: float
    l1_bound: float
    rounds: int
    pushes: int
    remainder: np.ndarray | None = None


def push_pagerank(graph: PageRankGraph, reset: Any, epsilon: float | None = None,
                  keep_remainder: bool = False) -> PushResult:
    """Personalized PageRank of a whole reset vector by forward push (:func:`push_sparse`, in fresh arrays) at
    ``epsilon`` (default the graph's): the normalised estimate is within ``2 * |r|_1 / |p|_1`` of the exact
    vector in L1 (the push keeps ``y = p + (1 - d) * sum_k (d M)^k r``; with no dangling node ``y`` sums to 1).

    Raises:
        ValueError: a reset the power iteration refuses, or a threshold that is not positive.
    """
    n = graph.n_nodes
    r = _check_reset(reset, n)
    pushed = push_sparse(graph.transition, graph._walk_matrix(), threshold_weights(graph.out_weight),
                         SparseVector.from_dense(r), graph.damping,
                         graph.push_epsilon if epsilon is None else epsilon)
    estimate = pushed.estimate.to_dense(n)
    left = pushed.remainder.total()
    total = float(estimate.sum())
    remainder = pushed.remainder.to_dense(n) if keep_remainder else None
    if not total > 0:  # every node under its threshold from the start
        return PushResult(estimate, 0.0, left, float("inf"), pushed.rounds, pushed.pushes, remainder)
    return PushResult(estimate / total, total, left, 2.0 * left / total, pushed.rounds, pushed.pushes, remainder)


def from_networkx(graph: Any, weight: str | None = "weight", nodelist: Sequence[Hashable] | None = None,
                  **kwargs: Any) -> PageRankGraph:
    """A :class:`PageRankGraph` of a networkx graph (edge attribute ``weight``, default 1), its node keys kept."""
    import networkx as nx

    nodes = list(graph.nodes) if nodelist is None else list(nodelist)
    adjacency = nx.to_scipy_sparse_array(graph, nodelist=nodes, weight=weight, dtype=np.float64, format="csr")
    return PageRankGraph(adjacency, nodes=nodes, **kwargs)


def reset_vector(graph: PageRankGraph, weights: Mapping[Hashable, float]) -> np.ndarray:
    """A reset vector from ``{node key: weight}``.

    Raises:
        ValueError: a key that is not one of the graph's nodes.
    """
    index = {key: i for i, key in enumerate(graph.nodes or ())}
    r = np.zeros(graph.n_nodes)
    for key, value in weights.items():
        if key not in index:
            raise ValueError(f"unknown node {key!r} in reset weights")
        r[index[key]] += value
    return r


def scores_by_node(graph: PageRankGraph, scores: np.ndarray) -> dict[Hashable, float]:
    """A score vector as ``{node key: score}``."""
    return dict(zip(graph.nodes or (), np.asarray(scores, dtype=float).tolist(), strict=True))
