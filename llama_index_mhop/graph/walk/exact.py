"""The exact walk: Personalized PageRank by power iteration, a query's seeds and dense similarities, and
:class:`GraphWalk`, which ranks a query's passages on this path or the large-graph tier's.

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
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy import sparse

from .walk import WalkMatrices, walk_matrices

if TYPE_CHECKING:
    from pathlib import Path

    from .affine import AffineResetPageRank
    from .push import PushScratch, SparsePush
    from .walk import WalkSettings

__all__ = ["DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "PUSH_TOLERANCE", "DenseScores", "GraphWalk",
           "PageRankGraph", "Ranking", "SparseVector", "all_products", "best_first"]

logger = logging.getLogger(__name__)

DEFAULT_DAMPING = 0.5  # HippoRAG 2's value
DEFAULT_TOL = 1e-10
DEFAULT_MAX_ITER = 200
PUSH_TOLERANCE = 1e-4  # the push's default epsilon times the number of nodes
_METHODS = ("exact", "push")


@dataclass(frozen=True)
class SparseVector:
    """The non-zero entries of a vector over nodes: ``nodes`` (int64, increasing) and ``values`` (float64), so a
    query's few seeds cost what they hold. ValueError: they differ in length, or ``nodes`` is not increasing."""

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
    # A dot product a row (BLAS threads only a dot of over 10,000 numbers), not one threaded BLAS product: its threads
    # keep spinning and on a small machine slow the next query embedding several times over (measured p50 340 ms
    # against 48 ms on 2 cores); twice as fast as einsum's own loop.
    return np.vecdot(matrix, query)


def best_first(values: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` largest values, largest first; equal values in increasing index order."""
    k = min(k, values.shape[0])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    best = np.argpartition(-values, k - 1)[:k]
    return best[np.lexsort((best, -values[best]))]


@dataclass(frozen=True)
class DenseScores:
    """One query's similarities to a collection's records: the ``top`` rows (best first, ties by row), their
    ``top_scores``, the extremes ``high`` and ``low`` (after HNSW: the farthest record's), every record's ``scores``
    (None: only the top asked for) and, after HNSW, the ``near`` rows scored exactly, every other one ``rest``."""

    top: np.ndarray
    top_scores: np.ndarray
    high: float
    low: float
    scores: np.ndarray | None = None
    near: np.ndarray | None = None
    rest: float = 0.0

    def normalised(self, scores: np.ndarray) -> np.ndarray:
        """``scores`` min-max scaled to [0, 1] by ``low`` and ``high`` (all ones when they agree), as HippoRAG 2."""
        if scores.size == 0:
            return scores
        if self.high - self.low <= 0:
            return np.ones_like(scores)
        return (scores - self.low) / (self.high - self.low)

    def normalising(self, weight: float) -> tuple[float, float]:
        """``weight`` times :meth:`normalised` as ``scale * s + uniform``: affine in ``s``, for the solved walk."""
        scale = weight / (self.high - self.low) if self.high - self.low > 0 else 0.0
        return scale, (-scale * self.low if scale > 0 else weight)


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
    mass a step loses returns to the reset, keeping the sum at 1; the L1 error is at most ``d / (1 - d)`` times it."""
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
    ``adjacency[i, j]`` weighs ``i -> j``; ``method`` is ``"exact"`` or ``"push"``.

    Raises ValueError for a bad argument, or ``nodes`` of another length or with repeats.
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
            (self._transition, walk, self._out_weight), symmetric = walk_matrices(adjacency), None
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
        """A graph of ``edges`` (``(m, 2)`` nodes) and ``weights`` (default 1): undirected both ways, repeats added."""
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
        unreachable; ValueError: a reset of the wrong length, negative, NaN/infinite or all zero."""
        r = _check_reset(reset, self.n_nodes)
        if self._damped is None:
            damped = self._transition.copy()
            damped.data *= self.damping  # one multiply per graph instead of one per iteration
            self._damped = damped
        return _power_iteration(self._damped, r, 1.0, self.tol, self.max_iter)

    def neighbours(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """The nodes ``node`` links to and the share of its edge weight each edge holds."""
        walk = self._walk_matrix()
        start, end = walk.indptr[node], walk.indptr[node + 1]
        return walk.indices[start:end], walk.data[start:end]

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
        """Forward push from a few non-negative seeds on to the ``finer`` thresholds until ``settled``
        (:func:`~.push.push_sparse`); thread-safe."""
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


@dataclass(frozen=True)
class Ranking:
    """One query's walk: the best ``passages`` (nodes, best first, ties by node) and their ``scores``; the
    ``top_entities`` and the reset's largest non-zero entries ``reset_top``, as ``(node, score)``."""

    passages: np.ndarray
    scores: np.ndarray
    top_entities: list[tuple[int, float]]
    reset_top: list[tuple[int, float]]


class GraphWalk:
    """The PageRank walk of one graph version: its matrix (first ``num_passages`` nodes the passages) and, on the
    push path, its solved dense share ``affine`` (None: every reset is walked whole by power iteration)."""

    def __init__(self, pagerank: PageRankGraph, num_passages: int, affine: AffineResetPageRank | None = None) -> None:
        self.pagerank = pagerank
        self.num_passages = num_passages
        self.affine = affine

    @classmethod
    def load(cls, pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None,
             settings: WalkSettings, basis_folder: Path | None = None, codes_folder: Path | None = None) -> GraphWalk:
        """The walk of a graph by ``settings``: from ``push_min_nodes`` nodes with its dense share solved (or read
        from ``basis_folder``), its int8 copy shared through ``codes_folder``; ``passage_vectors`` None: HNSW."""
        from .basis_files import solved_walk  # the large-graph tier, imported only when a graph reaches it
        from .int8_rows import row_products

        if pagerank.n_nodes < settings.minimum("push_min_nodes"):
            return cls(pagerank.walking("exact"), num_passages)
        pagerank = pagerank.walking("push")
        return cls(pagerank, num_passages, solved_walk(
            pagerank, num_passages, passage_vectors, basis_folder,
            row_products=partial(row_products, int8_min_rows=settings.minimum("int8_min_rows"),
                                 codes_folder=codes_folder, codes_kind="basis-int8")))

    @property
    def damping(self) -> float:
        return self.pagerank.damping

    @property
    def num_nodes(self) -> int:
        return self.pagerank.n_nodes

    @property
    def needs_every_passage_score(self) -> bool:
        """Whether :meth:`rank` reads every passage's similarity, or only the best passages' and the extremes."""
        return self.affine is None

    def rank(self, seeds: SparseVector, dense: DenseScores, query: np.ndarray, passage_weight: float, top_k: int,
             trace_top: int) -> Ranking:
        """The best ``top_k`` passages by the PageRank of the reset ``seeds`` + ``passage_weight`` times each
        passage's normalised similarity in ``dense`` (to the normalised ``query``), and the ``trace_top`` largest
        entity scores (on the push path the seeds' walk alone) and reset entries."""
        passages = self.num_passages
        k = min(top_k, passages)
        if self.affine is None:
            scores = self.pagerank.run(self.reset(seeds, dense, passage_weight))
            passage_scores, entity_scores, exact = scores[:passages], SparseVector.from_dense(scores[passages:]), None
        else:
            walked = self.affine.rank(seeds, dense, query, passage_weight, top_k)
            passage_scores, entity_scores, exact = walked.passages, walked.seed_entities, walked.exact_rows
        # Only the exact passages can be among the best (an estimated one is bounded below them).
        order = best_first(passage_scores, k) if exact is None else exact[best_first(passage_scores[exact], k)]
        top_entities = [(passages + int(entity_scores.nodes[i]), float(entity_scores.values[i]))
                        for i in best_first(entity_scores.values, trace_top).tolist()]
        return Ranking(order, passage_scores[order], top_entities,
                       self.reset_top(seeds, dense, passage_weight, trace_top))

    def reset(self, seeds: SparseVector, dense: DenseScores, passage_weight: float) -> np.ndarray:
        """The whole reset: the seeds, and every passage's normalised similarity times ``passage_weight``."""
        if dense.scores is None:
            raise ValueError("the whole reset needs every passage's similarity (search with every=True)")
        passages = self.num_passages
        reset = seeds.to_dense(self.num_nodes)
        reset[:passages] += dense.normalised(dense.scores) * passage_weight
        if not reset.sum() > 0:  # every passage equally distant from the query: start everywhere
            reset[:passages] = 1.0
        return reset

    def reset_top(self, seeds: SparseVector, dense: DenseScores, passage_weight: float,
                  count: int) -> list[tuple[int, float]]:
        """The ``count`` largest entries of :meth:`reset` as (node, weight), best first (a seed or a ``dense.top``)."""
        nodes = np.union1d(seeds.nodes, dense.top)
        values = np.zeros(nodes.shape[0])
        values[np.searchsorted(nodes, seeds.nodes)] = seeds.values
        values[np.searchsorted(nodes, dense.top)] += dense.normalised(dense.top_scores) * passage_weight
        return [(int(nodes[i]), float(values[i])) for i in best_first(values, count).tolist() if values[i] > 0]
