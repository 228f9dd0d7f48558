"""Personalized PageRank of HippoRAG 2's reset with its dense share on every passage solved once per graph.

PageRank is linear in its reset: with ``M`` the transition matrix and ``d`` the damping, the PageRank of ``r`` is
``z(r) / (u . r)``, ``z(r) = (I - d M)^-1 r``, ``u = (I - d M)^-T 1``. The dense share is affine in the query
embedding ``q``, ``scale * E q + uniform`` (``E``: the passage embeddings), so

    z(r) = z(seeds) + scale * Z q + uniform * g,   Z = z of each column of E,   g = z of all passages at 1.

``Z``, ``g`` and ``u`` are solved once per graph version; a query pays a push from its seeds and ``Z q``, exact
where it can change the best ``top_k`` (:mod:`.int8_rows`). Without passage vectors only ``g`` is needed."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from .exact import DenseScores, PageRankGraph, SparseVector, all_products, best_first
from .int8_rows import ExactRows, largest_magnitude, top_candidates
from .push import SparsePush

__all__ = ["AffineResetPageRank", "AffineResetScores", "DEFAULT_BASIS_TOL", "SolvedBasis", "solve_basis"]

logger = logging.getLogger(__name__)

DEFAULT_BASIS_TOL = 1e-10  # L1 change per column, relative to the column, at which the basis solve stops
_MAX_ITER = 400
_SOLVE_BYTES = 1 << 28  # columns solved together: each iteration holds about three float64 arrays this size
_PRODUCT_ROUNDING = 2.0**-20  # the float32 rounding of scale * (Z q), relative, with room to spare
# A push asked for a certain top k starts this many steps coarser than its threshold, each step this much finer.
_COARSE_STEPS = 4
_COARSE_STEP = 8.0


@dataclass(frozen=True)
class AffineResetScores:
    """The PageRank vector of one reset: ``passages`` (their share of a vector summing to 1); ``seed_entities``
    from the seeds' walk alone (nodes counted from the first entity); ``l1_bound`` on the passages' L1 error from
    the seeds' push; ``exact_rows``, the passages computed exactly when ``top_k`` was asked (None: all are)."""

    passages: np.ndarray
    seed_entities: SparseVector
    l1_bound: float
    exact_rows: np.ndarray | None = None


@dataclass(frozen=True)
class SolvedBasis:
    """One graph version's solve: ``Z`` (None without vectors), ``g``, ``u``, iterations and seconds."""

    basis: np.ndarray | None
    uniform_response: np.ndarray
    node_totals: np.ndarray
    iterations: int
    seconds: float


def solve_basis(pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None = None,
                tol: float = DEFAULT_BASIS_TOL) -> SolvedBasis:
    """Solve ``Z``, ``g`` and ``u``, in column blocks one per core (the same floats as one after another)."""
    started = time.perf_counter()
    n, damping, m = pagerank.n_nodes, pagerank.damping, pagerank.transition
    dims = 0 if passage_vectors is None else passage_vectors.shape[1]
    basis = np.empty((num_passages, dims), dtype=np.float32) if dims else None
    block = max(1, _SOLVE_BYTES // (8 * n))

    def solve_columns(start: int) -> int:
        assert passage_vectors is not None and basis is not None
        rhs = np.asarray(passage_vectors[:, start : start + block], dtype=np.float64)
        solved, block_iterations = _solve(m, damping, rhs, n, tol)
        basis[:, start : start + rhs.shape[1]] = solved[:num_passages]
        return block_iterations

    with ThreadPoolExecutor(max_workers=_solver_threads()) as pool:
        uniform = pool.submit(_solve, m, damping, np.ones((num_passages, 1)), n, tol)
        totals = pool.submit(_solve, m.transpose().tocsr(), damping, np.ones((n, 1)), n, tol)
        iterations = max(pool.map(solve_columns, range(0, dims, block)), default=0)
        (uniform_solved, uniform_iterations), (totals_solved, _) = uniform.result(), totals.result()
    uniform_response, node_totals = uniform_solved[:num_passages, 0].copy(), totals_solved[:, 0]
    iterations = max(iterations, uniform_iterations)
    seconds = time.perf_counter() - started
    logger.info("PageRank basis of %d passages x %d dimensions solved in %.1fs (%d iterations)",
                num_passages, dims, seconds, iterations)
    return SolvedBasis(basis, uniform_response, node_totals, iterations, seconds)


def _solver_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


class AffineResetPageRank:
    """Personalized PageRank for resets ``seeds + (uniform + scale * E q)`` on the first ``num_passages`` nodes of
    ``pagerank`` (``passage_vectors``: ``E``, None under HNSW); ValueError for a bad size or shapes."""

    def __init__(self, pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None = None,
                 tol: float = DEFAULT_BASIS_TOL, row_products: Callable[[np.ndarray], ExactRows] = ExactRows,
                 solved: SolvedBasis | None = None) -> None:
        n = pagerank.n_nodes
        if not 0 < num_passages <= n:
            raise ValueError(f"num_passages must be in [1, {n}], got {num_passages}")
        if passage_vectors is not None and passage_vectors.shape[0] != num_passages:
            raise ValueError(f"passage_vectors has {passage_vectors.shape[0]} rows for {num_passages} passages")
        if solved is None:
            solved = solve_basis(pagerank, num_passages, passage_vectors, tol)
        else:
            _check_solved(solved, n, num_passages, None if passage_vectors is None else passage_vectors.shape[1])
        self.pagerank = pagerank
        self.num_passages = num_passages
        self.basis = solved.basis
        self.uniform_response = solved.uniform_response
        self.node_totals = solved.node_totals
        self.iterations = solved.iterations
        passage_totals = self.node_totals[:num_passages]
        self.uniform_total = float(passage_totals.sum())
        self.vector_totals = None if passage_vectors is None else \
            np.einsum("ij,i->j", passage_vectors, passage_totals, dtype=np.float64)
        self.vector_sums = None if passage_vectors is None else passage_vectors.sum(axis=0, dtype=np.float64)
        self.basis_products = None if self.basis is None else row_products(self.basis)
        self.build_seconds = solved.seconds

    @property
    def nbytes(self) -> int:
        """Memory held by the basis, its estimate and its totals."""
        held = [self.uniform_response, self.node_totals]
        if self.basis is not None:
            held += [self.basis, self.vector_totals, self.vector_sums]
        return int(sum(a.nbytes for a in held)) + int(getattr(self.basis_products, "nbytes", 0))

    def run(self, seeds: SparseVector, uniform: float = 0.0, scale: float = 0.0,
            query: np.ndarray | None = None, top_k: int | None = None) -> AffineResetScores:
        """The PageRank of ``seeds`` plus ``uniform + scale * E q`` on every passage, exact for the best ``top_k``.
        ValueError for an all-zero reset, bad seeds, or a query without a basis."""
        n, passages = self.pagerank.n_nodes, self.num_passages
        if seeds.nodes.size and (seeds.nodes[0] < 0 or seeds.nodes[-1] >= n or seeds.values.min() < 0):
            raise ValueError(f"seeds must be non-negative weights on nodes in [0, {n})")
        dense_mass = uniform * passages
        dense_total = uniform * self.uniform_total
        q = None
        if scale != 0:
            if query is None:
                raise ValueError("scale needs the query embedding")
            if self.basis_products is None:
                raise ValueError("this basis was built without passage vectors: fold the dense share into seeds")
            q = np.asarray(query, dtype=np.float32)
            dense_mass += scale * float(self.vector_sums @ q)
            dense_total += scale * float(self.vector_totals @ q)
        seed_mass = seeds.total()
        if not seed_mass + dense_mass > 0:
            raise ValueError("the reset is all zero: at least one node needs a positive weight")
        seed_total = float(self.node_totals[seeds.nodes] @ seeds.values)
        # Without a query product every passage's score is the walk's plus the solved uniform share: the push may
        # stop as soon as its per-node bounds settle the top k.
        settle = (uniform, top_k) if q is None and top_k is not None else None
        walked, bound = self._walk_seeds(seeds, seed_mass, seed_total, seed_mass + dense_mass, settle)
        total = seed_total + dense_total
        walked_passages, walked_entities = walked.split(passages)
        scores = uniform * self.uniform_response
        scores[walked_passages.nodes] += walked_passages.values
        exact_rows = None
        if q is not None:
            scores, exact_rows = self._add_similarity(scores, scale, q, total, top_k)
        else:
            scores /= total
        np.maximum(scores, 0.0, out=scores)
        return AffineResetScores(scores, SparseVector(walked_entities.nodes, walked_entities.values / total),
                                 bound / total, exact_rows)

    def rank(self, seeds: SparseVector, dense: DenseScores, query: np.ndarray, passage_weight: float,
             top_k: int) -> AffineResetScores:
        """The PageRank of ``seeds`` + ``passage_weight`` times each passage's normalised similarity."""
        scale, uniform = dense.normalising(passage_weight)
        q: np.ndarray | None = query
        if dense.near is not None:
            # HNSW search: the far passages share one similarity, the near ones differ from it by a few seeds.
            seeds = seeds.plus(dense.near, np.maximum(scale * (dense.scores[dense.near] - dense.rest), 0.0))
            uniform += scale * dense.rest
            scale, q = 0.0, None
        if not seeds.total() > 0 and not (scale > 0 or uniform > 0):
            uniform = 1.0  # every passage equally distant from the query: start everywhere
        return self.run(seeds, uniform, scale, q, top_k=top_k)

    def _add_similarity(self, scores: np.ndarray, scale: float, q: np.ndarray, total: float,
                        top_k: int | None) -> tuple[np.ndarray, np.ndarray | None]:
        """``(scores + scale * Z q) / total``, exact on the rows that can make the top ``k``; those rows."""
        basis = self.basis_products
        assert basis is not None
        if top_k is None:
            scores += scale * all_products(self.basis, q)
            scores /= total
            return scores, None
        estimate = basis.estimate(q)
        if estimate.max_bound == 0:
            scores += scale * estimate.values
            scores /= total
            return scores, None
        center = scores + scale * estimate.values
        center /= total

        def radius(rows: np.ndarray) -> np.ndarray:
            return abs(scale) * (estimate.bounds(rows) + np.abs(estimate.values[rows]) * _PRODUCT_ROUNDING) / total

        largest = abs(scale) * (estimate.max_bound + largest_magnitude(estimate.values) * _PRODUCT_ROUNDING) / total
        rows, threshold = top_candidates(center, radius, largest, top_k)
        if not threshold > 0:  # scores clip at 0: when the top may hold zeros, every row is a candidate
            rows = np.arange(scores.shape[0])
        # the same operations as the exact product's, row by row: the same floats
        exact = scores[rows] + scale * basis.exact(q, rows)
        center[rows] = exact / total
        return center, rows

    def _walk_seeds(self, seeds: SparseVector, seed_mass: float, seed_total: float, reset_mass: float,
                    settle: tuple[float, int] | None = None) -> tuple[SparseVector, float]:
        """``z(seeds)`` and a bound on its L1 error; with ``settle``, stopped once the best ``k`` are certain."""
        if seed_mass <= 0:
            return SparseVector.empty(), 0.0
        damping = self.pagerank.damping
        if self.pagerank.method != "push":
            exact = self.pagerank.run(seeds.to_dense(self.pagerank.n_nodes))
            return SparseVector.from_dense(exact * seed_total), 0.0
        # The same absolute accuracy as a push of the whole reset at the graph's epsilon: the seeds hold a small
        # share of the reset's mass, so their push may stop that much earlier.
        epsilon = self.pagerank.push_epsilon * reset_mass / seed_mass
        start = SparseVector(seeds.nodes, seeds.values / seed_mass)
        factor = seed_mass / (1.0 - damping)
        if settle is None or not self.pagerank.symmetric:
            pushed = self.pagerank.push_from(start, epsilon)
        else:
            uniform, k = settle
            base = uniform * self.uniform_response
            # Undirected, a residual r <= t * degree stays so under the walk: after the push stopped at t, each
            # node's share still to come is at most damping * t * degree (times the seeds' scale).
            slack = (damping * factor) * self.pagerank.out_weight[: self.num_passages]

            def settled(result: SparsePush, threshold: float) -> bool:
                return _top_settled(base, _seed_walk(result, damping, factor), slack * threshold, k)

            coarse = [epsilon * _COARSE_STEP**step for step in range(_COARSE_STEPS, 0, -1)]
            pushed = self.pagerank.push_from(start, coarse[0], finer=[*coarse[1:], epsilon], settled=settled)
        return _seed_walk(pushed, damping, factor), damping * pushed.remainder.total() * factor


def _seed_walk(pushed: SparsePush, damping: float, factor: float) -> SparseVector:
    """``z(seeds)`` from a push scaled to mass 1, plus the remainder's first term ``(1 - d) r``."""
    estimate = pushed.estimate.values + (1.0 - damping) * pushed.remainder.values
    return SparseVector(pushed.estimate.nodes, estimate * factor)


def _top_settled(base: np.ndarray, walked: SparseVector, slack: np.ndarray, k: int) -> bool:
    """Whether the best ``k`` of ``base + z(seeds)`` and their order are certain within ``slack``."""
    passages = base.shape[0]
    walked_passages, _ = walked.split(passages)
    lower = base.copy()
    lower[walked_passages.nodes] += walked_passages.values
    top = best_first(lower, k)
    if top.shape[0] < min(k, passages) or not lower[top[-1]] > 0:
        return False  # scores clip at 0: zeros tie
    upper = lower + slack
    # each of the best must stay above every value that may follow it
    after = np.maximum.accumulate(upper[top][::-1])[::-1]
    if not bool(np.all(lower[top][:-1] > after[1:])):
        return False
    upper[top] = -np.inf
    return top.shape[0] == passages or bool(lower[top[-1]] > upper.max())


def _check_solved(solved: SolvedBasis, n: int, num_passages: int, dims: int | None) -> None:
    want_basis = None if not dims else (num_passages, dims)
    have_basis = None if solved.basis is None else solved.basis.shape
    if (have_basis != want_basis or solved.uniform_response.shape != (num_passages,)
            or solved.node_totals.shape != (n,)):
        raise ValueError(f"the solved basis does not fit this graph: basis {have_basis}, "
                         f"{solved.uniform_response.shape[0]} passages and {solved.node_totals.shape[0]} nodes, for "
                         f"{want_basis}, {num_passages} and {n}")


def _solve(m, damping: float, rhs: np.ndarray, n: int, tol: float) -> tuple[np.ndarray, int]:
    """``(I - damping * m)^-1 R`` by Jacobi iteration, ``R`` being ``rhs`` padded to ``n`` rows."""
    rows = rhs.shape[0]
    x = np.zeros((n, rhs.shape[1]))
    x[:rows] = rhs
    scale = np.abs(x).sum(axis=0)
    scale[scale == 0] = 1.0
    for iteration in range(1, _MAX_ITER + 1):
        y = m @ x
        y *= damping
        y[:rows] += rhs
        np.subtract(y, x, out=x)
        np.abs(x, out=x)
        change = x.sum(axis=0) / scale
        x = y
        if change.max() < tol:
            return x, iteration
    logger.warning("PageRank basis did not converge in %d iterations (largest change %.3g)", _MAX_ITER,
                   float(change.max()))
    return x, _MAX_ITER
