"""The exact walk: Personalized PageRank by power iteration, a query's seeds, and its dense similarities.

HippoRAG 2 (Gutiérrez et al., 2025) walks with ``damping=0.5`` from a reset of the recognised facts' entities and
every passage's min-max normalised dense score (seeds/003, seeds/004). As in ``networkx.pagerank`` and igraph,
``adjacency[i, j]`` weighs the edge ``i -> j``, a dangling node returns its mass to the reset and an unreachable
node gets exactly 0. ``M[j, i] = A[i, j] / sum_k A[i, k]`` is CSR, so that a walk step is ``M @ x``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
from scipy import sparse

if TYPE_CHECKING:
    from .push import PushScratch, SparsePush

__all__ = ["DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "PUSH_TOLERANCE", "DenseScores", "PageRankGraph",
           "SparseVector", "WalkMatrices", "all_products", "best_first"]

logger = logging.getLogger(__name__)

DEFAULT_DAMPING = 0.5  # HippoRAG 2's value
DEFAULT_TOL = 1e-10
DEFAULT_MAX_ITER = 200
PUSH_TOLERANCE = 1e-4  # the push's default epsilon times the number of nodes
_METHODS = ("exact", "push")


@dataclass(frozen=True)
class SparseVector:
    """The non-zero entries of a vector over nodes: ``nodes`` (int64, increasing) and ``values`` (float64). A query's
    few seeds among many nodes cost what they hold, not a graph-sized array.

    Raises:
        ValueError: ``nodes`` and ``values`` differ in length, or ``nodes`` is not increasing.
    """

    nodes: np.ndarray
    values: np.ndarray

    def __post_init__(self) -> None:
        if self.nodes.shape != self.values.shape or self.nodes.ndim != 1:
            raise ValueError(f"nodes {self.nodes.shape} and values {self.values.shape} must be two equal 1-D arrays")
        if self.nodes.size > 1 and not bool(np.all(self.nodes[1:] > self.nodes[:-1])):
            raise ValueError("nodes must be increasing, each node once")

    @classmethod
    def empty(cls) -> SparseVector:
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0))

    @classmethod
    def from_dense(cls, dense: np.ndarray) -> SparseVector:
        """The non-zero entries of a whole vector."""
        nodes = np.flatnonzero(dense)
        return cls(nodes.astype(np.int64, copy=False), np.asarray(dense[nodes], dtype=np.float64))

    @classmethod
    def from_mapping(cls, weights: Mapping[int, float]) -> SparseVector:
        """``{node: value}`` as a vector (zero values are left out)."""
        nodes = np.fromiter((j for j, value in weights.items() if value != 0), dtype=np.int64)
        values = np.fromiter((value for value in weights.values() if value != 0), dtype=np.float64,
                             count=nodes.size)
        order = np.argsort(nodes, kind="stable")
        return cls(nodes[order], values[order])

    def plus(self, nodes: np.ndarray, values: np.ndarray) -> SparseVector:
        """This vector with ``values`` added at ``nodes`` (a node may repeat; added in the order given)."""
        merged, positions = np.unique(np.concatenate([self.nodes, np.asarray(nodes, dtype=np.int64)]),
                                      return_inverse=True)
        # bincount adds each bin's weights in input order: this vector's value first, then the additions
        summed = np.bincount(positions, weights=np.concatenate([self.values, np.asarray(values, dtype=np.float64)]),
                             minlength=merged.size)
        return SparseVector(merged, summed)

    def total(self) -> float:
        return float(self.values.sum())

    def to_dense(self, size: int) -> np.ndarray:
        """The whole vector of ``size`` nodes."""
        dense = np.zeros(size)
        dense[self.nodes] = self.values
        return dense

    def split(self, boundary: int) -> tuple[SparseVector, SparseVector]:
        """The entries below ``boundary``, and those from it on with their nodes counted from ``boundary``."""
        cut = int(np.searchsorted(self.nodes, boundary))
        return (SparseVector(self.nodes[:cut], self.values[:cut]),
                SparseVector(self.nodes[cut:] - boundary, self.values[cut:]))


def all_products(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query``, one float per row, in the rows' precision."""
    # einsum, not BLAS: a threaded BLAS call leaves its threads spinning, and on a small machine they slow the
    # next query embedding several times over (measured p50 340 ms against 48 ms on 2 cores).
    return np.einsum("ij,j->i", matrix, query)


def best_first(values: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` largest values, largest first; equal values in increasing index order."""
    k = min(k, values.shape[0])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    best = np.argpartition(-values, k - 1)[:k]
    return best[np.lexsort((best, -values[best]))]


@dataclass(frozen=True)
class DenseScores:
    """One query's similarities to a collection's records: the ``top`` rows asked for (best first, ties by row) and
    their ``top_scores``; the ``high`` and ``low`` extremes of the min-max normalisation (``low`` after an HNSW search:
    the farthest record's); every record's ``scores`` (None when only the top was asked for); after an HNSW search
    the ``near`` rows scored exactly, every other row holding ``rest``."""

    top: np.ndarray
    top_scores: np.ndarray
    high: float
    low: float
    scores: np.ndarray | None = None
    near: np.ndarray | None = None
    rest: float = 0.0

    def normalised(self, scores: np.ndarray) -> np.ndarray:
        """``scores`` scaled to [0, 1] by ``low`` and ``high`` (HippoRAG 2's min-max normalisation); all ones
        when the extremes agree."""
        if scores.size == 0:
            return scores
        if self.high - self.low <= 0:
            return np.ones_like(scores)
        return (scores - self.low) / (self.high - self.low)

    def normalising(self, weight: float) -> tuple[float, float]:
        """``weight`` times :meth:`normalised` as ``scale * s + uniform``: affine in ``s``, for the solved walk."""
        scale = weight / (self.high - self.low) if self.high - self.low > 0 else 0.0
        return scale, (-scale * self.low if scale > 0 else weight)


class WalkMatrices(NamedTuple):
    """What a walk reads of a graph: ``M`` (column-stochastic CSR), ``P = M.T`` (row-stochastic CSR) and each
    node's out-weight; given to :class:`PageRankGraph` they are used as they are (memory maps stay shared)."""

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
        raise ValueError(f"reset must be a 1-D vector of length {n} (one weight per node), got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise ValueError("reset holds a NaN or infinite weight")
    if n and r.min() < 0:
        raise ValueError(f"reset holds a negative weight ({r.min():g}); weights must be >= 0")
    total = r.sum()
    if not total > 0:
        raise ValueError("reset is all zero: at least one node needs a positive weight")
    r /= total
    return r


def _power_iteration(m: sparse.csr_matrix, r: np.ndarray, scale: float, tol: float, max_iter: int) -> np.ndarray:
    """Iterate ``x <- scale * M x + (1 - sum(scale * M x)) * r`` from ``x = r`` until the L1 change is < tol: the
    mass a step loses (``1 - d``, dangling columns) returns to the reset in one term, keeping the sum at 1. The L1
    error after stopping is at most ``d / (1 - d)`` times the last change."""
    n = r.shape[0]
    support = np.flatnonzero(r)
    sparse_reset = len(support) * 8 < n  # a few seed nodes: touch only them when returning mass to the reset
    r_support = r[support]
    x = r.copy()
    diff = np.empty(n)
    change = np.inf
    # Measured: an in-place product kernel gains nothing; a float32 matrix saves 20% but loses 1e-8 accuracy.
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
        logger.warning("personalized PageRank did not converge in %d iterations (last L1 change %.3g > tol %.3g)",
                       max_iter, change, tol)
    np.maximum(x, 0.0, out=x)  # rounding can leave -1e-17 where the reset subtracts from a zero entry
    x /= x.sum()
    return x


class PageRankGraph:
    """One version of a graph, ready for many Personalized PageRank queries (build a new one when it changes).

    Args:
        adjacency: ``n x n`` finite non-negative weights (``[i, j]``: the edge ``i -> j``), or another graph's
            :attr:`matrices`.
        damping: probability of following an edge, in [0, 1); HippoRAG 2 uses 0.5.
        tol, max_iter: the power iteration's L1 change to stop at, and its cap.
        nodes, version: optional labels of the rows and of the graph.
        method: ``"exact"`` (power iteration of the whole reset) or ``"push"`` (a push from the seeds,
            :mod:`.push`, the dense share solved once, :mod:`.affine`).
        push_epsilon: the push's threshold per unit of out-weight; default :data:`PUSH_TOLERANCE` / n.

    Raises:
        ValueError: a bad adjacency, damping, tol, max_iter, push_epsilon or method; ``nodes`` of another length
            or with repeats.
    """

    def __init__(self, adjacency: Any, *, damping: float = DEFAULT_DAMPING, tol: float = DEFAULT_TOL,
                 max_iter: int = DEFAULT_MAX_ITER, nodes: Sequence[Hashable] | None = None,
                 version: Hashable | None = None, method: str = "exact", push_epsilon: float | None = None) -> None:
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
        self.method = method
        self.push_epsilon = float(push_epsilon) if push_epsilon is not None else PUSH_TOLERANCE / max(1, n)
        self._walk = walk if self.method == "push" else None  # P = M.T: only push reads a node's out-edges
        self._threshold_weight: np.ndarray | None = None  # the push's per-graph arrays, made on its first call
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
    def from_edges(cls, n_nodes: int, edges: Any, weights: Any = None, *, directed: bool = False,
                   **kwargs: Any) -> PageRankGraph:
        """Build from ``edges`` (``(m, 2)`` node indices) and ``weights`` (m values, default 1); undirected edges
        are walked both ways, repeated edges add their weights."""
        if isinstance(n_nodes, bool) or not isinstance(n_nodes, (int, np.integer)) or n_nodes < 0:
            raise ValueError(f"n_nodes must be an integer >= 0, got {n_nodes!r}")
        e = np.asarray(edges, dtype=np.int64).reshape(-1, 2) if len(edges) else np.empty((0, 2), np.int64)
        w = np.ones(len(e)) if weights is None else np.asarray(weights, dtype=np.float64).ravel()
        if len(w) != len(e):
            raise ValueError(f"got {len(w)} weights for {len(e)} edges")
        if len(e) and (e.min() < 0 or e.max() >= n_nodes):
            raise ValueError(f"edge endpoints must be node indices in [0, {n_nodes}), got {e.min()}..{e.max()}")
        rows, cols = e[:, 0], e[:, 1]
        if not directed:
            off_diagonal = rows != cols  # a self-loop appears once in the matrix
            rows, cols = np.concatenate([rows, cols[off_diagonal]]), np.concatenate([cols, rows[off_diagonal]])
            w = np.concatenate([w, w[off_diagonal]])
        graph = cls(sparse.coo_matrix((w, (rows, cols)), shape=(n_nodes, n_nodes)).tocsr(), **kwargs)
        if not directed:
            graph._symmetric = True  # each edge was added both ways: nothing to check
        return graph

    def walking(self, method: str) -> PageRankGraph:
        """This graph walked by ``method`` (itself when it already is), its matrices shared."""
        if method == self.method:
            return self
        return PageRankGraph(self.matrices, damping=self.damping, tol=self.tol, max_iter=self.max_iter,
                             nodes=self._nodes, version=self.version, method=method)

    @property
    def transition(self) -> sparse.csr_matrix:
        """The column-stochastic transition matrix (undamped)."""
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
        """Personalized PageRank of a whole reset (non-negative, normalised here) by power iteration, 0 where
        unreachable (the convention of ``networkx.pagerank`` and igraph/PRPACK).

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
            self._symmetric = bool(np.array_equal(adjacency.indptr, mirrored.indptr)
                                   and np.array_equal(adjacency.indices, mirrored.indices)
                                   and np.allclose(adjacency.data, mirrored.data, rtol=1e-12, atol=0.0))
        return self._symmetric

    def push_from(self, seeds: SparseVector, epsilon: float, finer: Sequence[float] = (),
                  settled: Callable[[SparsePush, float], bool] | None = None) -> SparsePush:
        """Forward push from a few seeds (unnormalised, non-negative) on to the ``finer`` thresholds until
        ``settled`` (:func:`~.push.push_sparse`); thread-safe. The push module is imported only by a push."""
        from .push import PushScratch, push_sparse, threshold_weights

        walk = self._walk_matrix()
        if self._scratch is None:
            self._threshold_weight = threshold_weights(self._out_weight)
            self._scratch = PushScratch(self.n_nodes)
        assert self._threshold_weight is not None
        return push_sparse(self._transition, walk, self._threshold_weight, seeds, self.damping, epsilon,
                           self._scratch, finer, settled)

    def __repr__(self) -> str:
        return (f"PageRankGraph(n_nodes={self.n_nodes}, n_edges={self.n_edges}, damping={self.damping}, "
                f"method={self.method!r}, version={self.version!r})")
