"""Personalized PageRank on a cached sparse transition matrix: the graph-search step of HippoRAG 2.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory: Non-Parametric Continual Learning for Large Language
Models") seeds a Personalized PageRank (PPR) walk with the entities of the recognised facts and the dense
passage scores, runs it with ``damping=0.5`` over the weighted entity/passage graph, and ranks passages by the
resulting probabilities (seeds/003, seeds/004). :class:`PageRankGraph` is one graph version's matrix: the power
iteration of a whole reset, and the local push from a few seeds (:mod:`.push_ppr`) that
:class:`~.graph_walk.GraphWalk` runs on a large graph. Scipy/numpy only, no I/O.

Conventions (they match ``networkx.pagerank`` and igraph's PRPACK personalized PageRank):

* ``adjacency[i, j]`` is the weight of the edge ``i -> j``; an undirected graph is a symmetric matrix. Parallel
  edges are summed; a self-loop is the diagonal entry as given (igraph counts an undirected self-loop twice,
  networkx once, like this module).
* The walker at node ``i`` follows an edge with probability ``damping`` (choosing ``i -> j`` in proportion to
  its weight) and jumps back to the reset distribution otherwise.
* A dangling node (no positive out-weight) returns all its mass to the reset distribution.
* Nodes the walk cannot reach from the reset support get exactly 0.

The transition matrix is column-stochastic, ``M[j, i] = A[i, j] / sum_k A[i, k]``, stored as CSR so that one
walk step is the sparse product ``M @ x``; the columns of dangling nodes are empty.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy import sparse

from .push_ppr import PushScratch, SparsePush, push_sparse, threshold_weights
from .sparse_vector import SparseVector

__all__ = [
    "DEFAULT_DAMPING",
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "PUSH_MIN_NODES",
    "PUSH_TOLERANCE",
    "PageRankGraph",
    "WalkMatrices",
]

logger = logging.getLogger(__name__)

DEFAULT_DAMPING = 0.5  # HippoRAG 2's value
DEFAULT_TOL = 1e-10
DEFAULT_MAX_ITER = 200
# From this many nodes on, PageRankGraph(method="auto") walks a query by local push instead of power iteration. On
# HippoRAG-shaped resets push took 2x the exact CPU time at 3k nodes, 0.8x at 30k, 0.6x at 90k and 300k
# (benchmarks/results/ppr_scaling-push.json, docs/SCALING.md); below, exact costs a few ms and stays the reference.
PUSH_MIN_NODES = 50_000
PUSH_TOLERANCE = 1e-4  # the push's default epsilon times the number of nodes
_METHODS = ("auto", "exact", "push")


class WalkMatrices(NamedTuple):
    """What a walk reads of a graph: the transition matrix ``M`` (column-stochastic CSR), the walk ``P = M.T``
    (row-stochastic CSR) and each node's out-weight. Given as the ``adjacency`` of :class:`PageRankGraph`, they are
    used as they are, not copied: a graph opened from memory-mapped arrays keeps them shared."""

    transition: sparse.csr_matrix
    walk: sparse.csr_matrix
    out_weight: np.ndarray
    symmetric: bool | None = None  # whether the adjacency is symmetric (None: not known, found on first use)


def _walk(adjacency: Any) -> tuple[sparse.csr_matrix, sparse.csr_matrix, np.ndarray]:
    """The transition matrix ``M``, the walk ``P = M.T`` (row-stochastic CSR) and each node's out-weight."""
    if sparse.issparse(adjacency):
        a = sparse.csr_matrix(adjacency, dtype=np.float64, copy=True)
    else:
        a = sparse.csr_matrix(np.asarray(adjacency, dtype=np.float64))
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"adjacency must be a square n x n matrix, got shape {a.shape}")
    a.sum_duplicates()
    if a.nnz and not np.all(np.isfinite(a.data)):
        raise ValueError("adjacency holds a NaN or infinite edge weight")
    if a.nnz and a.data.min() < 0:
        raise ValueError(f"adjacency holds a negative edge weight ({a.data.min():g}); weights must be >= 0")
    a.eliminate_zeros()
    n = a.shape[0]
    out_weight = np.asarray(a.sum(axis=1), dtype=np.float64).ravel()
    scale = np.zeros(n)
    np.divide(1.0, out_weight, out=scale, where=out_weight > 0)
    a.data *= np.repeat(scale, np.diff(a.indptr))  # row-normalise in place: P[i, j] = A[i, j] / out(i)
    m = a.transpose().tocsr()
    m.sort_indices()
    return m, a, out_weight


def _check_damping(damping: float) -> float:
    damping = float(damping)
    if not 0.0 <= damping < 1.0:
        raise ValueError(f"damping must be in [0, 1), got {damping!r}")
    return damping


def _check_params(tol: float, max_iter: int) -> None:
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be an integer >= 1, got {max_iter!r}")


def _check_reset(reset: Any, n: int) -> np.ndarray:
    """The reset as a float64 probability vector of length ``n``, or a ValueError saying what is wrong."""
    r = np.array(reset, dtype=np.float64, copy=True)
    if r.ndim != 1 or r.shape[0] != n:
        raise ValueError(
            f"reset must be a 1-D vector of length {n} (one weight per node), got shape {r.shape}"
        )
    if not np.all(np.isfinite(r)):
        raise ValueError("reset holds a NaN or infinite weight")
    if n and r.min() < 0:
        raise ValueError(f"reset holds a negative weight ({r.min():g}); weights must be >= 0")
    total = r.sum()
    if not total > 0:
        raise ValueError("reset is all zero: at least one node needs a positive weight")
    r /= total
    return r


def _power_iteration(
    m: sparse.csr_matrix,
    r: np.ndarray,
    scale: float,
    tol: float,
    max_iter: int,
) -> np.ndarray:
    """Iterate ``x <- scale * M x + (1 - sum(scale * M x)) * r`` from ``x = r`` until the L1 change is < tol.

    ``m`` times ``scale`` is the damped walk step (callers may pre-multiply ``m`` by the damping and pass
    ``scale=1``). The mass the step loses, ``1 - damping`` plus what dangling columns drop, goes back to the
    reset in one term, which also keeps the vector summing to 1 despite rounding. For damping ``d`` the L1
    error after stopping is at most ``d / (1 - d)`` times the last change.
    """
    n = r.shape[0]
    support = np.flatnonzero(r)
    sparse_reset = len(support) * 8 < n  # a few seed nodes: touch only them when returning mass to the reset
    r_support = r[support]
    x = r.copy()
    diff = np.empty(n)
    change = np.inf
    # The sparse product dominates (about 30 iterations at damping 0.5 and tol 1e-10). Measured: an in-place
    # product kernel gains nothing; a float32 matrix saves about 20% of it but loses the 1e-8 accuracy.
    for _ in range(max_iter):
        y = m @ x
        if scale != 1.0:
            y *= scale
        if sparse_reset:
            y[support] += (1.0 - y.sum()) * r_support
        else:
            y += (1.0 - y.sum()) * r
        np.subtract(y, x, out=diff)
        np.abs(diff, out=diff)
        change = diff.sum()
        x = y
        if change < tol:
            break
    else:
        logger.warning(
            "personalized PageRank did not converge in %d iterations (last L1 change %.3g > tol %.3g)",
            max_iter,
            change,
            tol,
        )
    np.maximum(x, 0.0, out=x)  # rounding can leave -1e-17 where the reset subtracts from a zero entry
    x /= x.sum()
    return x


class PageRankGraph:
    """One version of a graph, ready for many Personalized PageRank queries.

    The transition matrix is built, checked and pre-multiplied by the damping once, at construction; each
    :meth:`run` is then only the power iteration, and each :meth:`push_from` a local push. Build a new
    ``PageRankGraph`` when the graph changes (the optional ``version`` labels which graph this is).

    Args:
        adjacency: ``n x n`` weights, ``adjacency[i, j]`` for the edge ``i -> j`` (symmetric when undirected); or
            the :attr:`matrices` of a graph, as saved.
            Weights must be finite and non-negative; zero weights are no edges, and a node without a positive
            out-weight is dangling (its mass returns to the reset).
        damping: probability of following an edge, in [0, 1); HippoRAG 2 uses 0.5.
        tol: L1 change at which the power iteration stops.
        max_iter: iteration cap.
        nodes: optional node keys in index order (a label of the rows, as ``version`` is of the graph).
        version: optional label of the graph version this matrix was built from.
        method: how a query's walk runs (:class:`~.graph_walk.GraphWalk`): ``"exact"`` (power iteration of the
            whole reset), ``"push"`` (a local push from the query's seeds, :mod:`.push_ppr`, the reset's dense
            share solved once, :mod:`.affine_ppr`) or ``"auto"``: push from :data:`PUSH_MIN_NODES` nodes on,
            exact below.
        push_epsilon: the push's residual threshold per unit of out-weight (its error bounds scale with it);
            default :data:`PUSH_TOLERANCE` / n: HippoRAG's reset puts a little mass on every passage, so scores
            shrink as 1 / n and the threshold follows them.

    Raises:
        ValueError: the adjacency is not square, or holds a negative, NaN or infinite weight; a damping outside
            [0, 1); a non-positive tol, max_iter or push_epsilon; an unknown method; ``nodes`` of another length
            or with repeats.

    Example:
        >>> graph = PageRankGraph.from_edges(3, [(0, 1), (1, 2)], [1.0, 2.0])
        >>> scores = graph.run(np.array([1.0, 0.0, 0.0]))
    """

    def __init__(
        self,
        adjacency: Any,
        *,
        damping: float = DEFAULT_DAMPING,
        tol: float = DEFAULT_TOL,
        max_iter: int = DEFAULT_MAX_ITER,
        nodes: Sequence[Hashable] | None = None,
        version: Hashable | None = None,
        method: str = "auto",
        push_epsilon: float | None = None,
    ) -> None:
        self.damping = _check_damping(damping)
        _check_params(tol, max_iter)
        if method not in _METHODS:
            raise ValueError(f"method must be one of {_METHODS}, got {method!r}")
        if push_epsilon is not None and not push_epsilon > 0:
            raise ValueError(f"push_epsilon must be > 0, got {push_epsilon!r}")
        self.tol = float(tol)
        self.max_iter = int(max_iter)
        self.version = version
        started = time.perf_counter()
        if isinstance(adjacency, WalkMatrices):  # another graph's, as saved: used as they are (maps stay shared)
            self._transition, walk, self._out_weight, symmetric = adjacency
        else:
            (self._transition, walk, self._out_weight), symmetric = _walk(adjacency), None
        n = self._transition.shape[0]
        self.method = method if method != "auto" else ("push" if n >= PUSH_MIN_NODES else "exact")
        self.push_epsilon = float(push_epsilon) if push_epsilon is not None else PUSH_TOLERANCE / max(1, n)
        self._walk = walk if self.method == "push" else None  # P = M.T: only push reads a node's out-edges
        self._threshold_weight: np.ndarray | None = None
        self._scratch: PushScratch | None = None
        self._symmetric: bool | None = symmetric
        self._damped: sparse.csr_matrix | None = None  # only run() reads it: made on its first call
        self.build_seconds = time.perf_counter() - started
        self._nodes = None if nodes is None else list(nodes)
        if self._nodes is not None:
            if len(self._nodes) != n:
                raise ValueError(f"nodes has {len(self._nodes)} keys for a graph of {n} nodes")
            if len(set(self._nodes)) != n:
                raise ValueError("nodes holds duplicate keys")

    @classmethod
    def from_edges(
        cls,
        n_nodes: int,
        edges: Any,
        weights: Any = None,
        *,
        directed: bool = False,
        **kwargs: Any,
    ) -> PageRankGraph:
        """Build from an edge list: ``edges`` is ``(m, 2)`` node indices, ``weights`` m values (default 1).

        Undirected edges are walked both ways; repeated edges add their weights (as in networkx and igraph).
        """
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 0:
            raise ValueError(f"n_nodes must be an integer >= 0, got {n_nodes!r}")
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2) if len(edges) else np.empty((0, 2), np.int64)
        w = np.ones(len(e)) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        if len(w) != len(e):
            raise ValueError(f"got {len(w)} weights for {len(e)} edges")
        if len(e) and (e.min() < 0 or e.max() >= n_nodes):
            raise ValueError(
                f"edge endpoints must be node indices in [0, {n_nodes}), got {e.min()}..{e.max()}"
            )
        rows, cols = e[:, 0], e[:, 1]
        if not directed:
            off_diagonal = rows != cols  # a self-loop appears once in the matrix
            rows, cols = (
                np.concatenate([rows, cols[off_diagonal]]),
                np.concatenate([cols, rows[off_diagonal]]),
            )
            w = np.concatenate([w, w[off_diagonal]])
        adjacency = sparse.coo_matrix((w, (rows, cols)), shape=(n_nodes, n_nodes)).tocsr()
        graph = cls(adjacency, **kwargs)
        if not directed:
            graph._symmetric = True  # each edge was added both ways: nothing to check
        return graph

    @property
    def transition(self) -> sparse.csr_matrix:
        """The cached column-stochastic transition matrix (undamped)."""
        return self._transition

    @property
    def n_nodes(self) -> int:
        return self._transition.shape[0]

    @property
    def n_edges(self) -> int:
        """Stored directed edges (an undirected edge counts twice, a self-loop once)."""
        return self._transition.nnz

    @property
    def nodes(self) -> list[Hashable] | None:
        """The node keys in index order, when given."""
        return None if self._nodes is None else list(self._nodes)

    def run(self, reset: Any) -> np.ndarray:
        """Personalized PageRank of one whole reset vector by power iteration, whatever :attr:`method` is.

        Solves ``x = damping * M x + (damping * dangling_mass(x) + 1 - damping) * r`` where ``M`` is the
        column-stochastic transition matrix and ``r`` the normalised reset: the stationary distribution of a walk
        that follows an edge with probability ``damping`` and restarts from ``r`` otherwise, dangling nodes
        restarting from ``r`` (the convention of ``networkx.pagerank`` and igraph/PRPACK).

        Args:
            reset: one non-negative weight per node, normalised here; not all zero.

        Returns:
            A probability vector over the nodes, 0 where unreachable from the reset.

        Raises:
            ValueError: a reset of the wrong length, negative, NaN/infinite or all zero.
        """
        r = _check_reset(reset, self.n_nodes)
        if self._damped is None:
            damped = self._transition.copy()
            damped.data *= self.damping  # one multiply per graph instead of one per iteration
            self._damped = damped
        return _power_iteration(self._damped, r, 1.0, self.tol, self.max_iter)

    def _walk_matrix(self) -> sparse.csr_matrix:
        """``P = M.T`` as CSR (row ``u``: where a walker at ``u`` goes), built on first use by an exact graph."""
        if self._walk is None:
            self._walk = self._transition.transpose().tocsr()
        return self._walk

    @property
    def matrices(self) -> WalkMatrices:
        """The matrices a walk reads (``PageRankGraph(graph.matrices, ...)`` walks the same graph)."""
        return WalkMatrices(self._transition, self._walk_matrix(), self._out_weight, self.symmetric)

    @property
    def out_weight(self) -> np.ndarray:
        """Each node's weighted out-degree (0 for a dangling node)."""
        return self._out_weight

    @property
    def symmetric(self) -> bool:
        """Whether the graph is undirected (its adjacency symmetric, to float rounding); found once."""
        if self._symmetric is None:
            # A = diag(out) P; P's rows were divided by the out-weights, so compare to a relative rounding
            adjacency = sparse.csr_matrix(self._walk_matrix().multiply(self._out_weight[:, None]))
            adjacency.sort_indices()
            mirrored = adjacency.transpose().tocsr()
            mirrored.sort_indices()
            self._symmetric = bool(
                np.array_equal(adjacency.indptr, mirrored.indptr)
                and np.array_equal(adjacency.indices, mirrored.indices)
                and np.allclose(adjacency.data, mirrored.data, rtol=1e-12, atol=0.0)
            )
        return self._symmetric

    def push_from(self, seeds: SparseVector, epsilon: float, finer: Sequence[float] = (),
                  settled: Callable[[SparsePush, float], bool] | None = None) -> SparsePush:
        """Forward push from a few seeds (unnormalised, non-negative), touching only the memory of the nodes it
        reaches, on to the ``finer`` thresholds until ``settled`` (:func:`~.push_ppr.push_sparse`); thread-safe."""
        walk = self._walk_matrix()
        if self._scratch is None:
            self._threshold_weight = threshold_weights(self._out_weight)
            self._scratch = PushScratch(self.n_nodes)
        assert self._threshold_weight is not None
        return push_sparse(self._transition, walk, self._threshold_weight, seeds, self.damping, epsilon,
                           self._scratch, finer, settled)

    def __repr__(self) -> str:
        return (
            f"PageRankGraph(n_nodes={self.n_nodes}, n_edges={self.n_edges}, damping={self.damping}, "
            f"method={self.method!r}, version={self.version!r})"
        )
