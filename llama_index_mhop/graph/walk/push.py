"""Personalized PageRank by forward push (Andersen, Chung and Lang, 2006): work that follows the walk's mass. A
round at a time, every node whose residual ``r[u]`` is over ``epsilon * d(u)`` (``d``: out-weight, 1 when dangling)
is pushed: ``p[u] += (1 - damping) * r[u]``, the rest spread over its out-edges. At the end the seeds' PPR ``y`` has
``0 <= y - p``, ``|y - p|_1 <= |r|_1``, and on an undirected graph ``y[u] - p[u] <= epsilon * d(u)``."""

from __future__ import annotations

import queue
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from .exact import SparseVector

__all__ = ["PushScratch", "SparsePush", "push_sparse", "threshold_weights"]

_DENSE_ROUND_SHARE = 1 / 16  # a round pushing more than this share of the nodes is one full sparse product


@dataclass(frozen=True)
class SparsePush:
    """A push's unnormalised estimate ``p`` and residual ``r`` (the nodes it reached), and its work."""

    estimate: SparseVector
    remainder: SparseVector
    rounds: int
    pushes: int


class PushScratch:
    """Zeroed arrays lent to one push at a time (fresh ones cost a page fault per 4 KB per query)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._free: queue.SimpleQueue[tuple[np.ndarray, np.ndarray]] = queue.SimpleQueue()

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        try:
            return self._free.get_nowait()
        except queue.Empty:
            return np.zeros(self.size), np.zeros(self.size)

    def give_back(self, pair: tuple[np.ndarray, np.ndarray]) -> None:
        """Return a pair whose every entry is zero again."""
        self._free.put(pair)


def threshold_weights(out_weight: np.ndarray) -> np.ndarray:
    """Each node's share of a push threshold: its weighted out-degree, or 1 for a dangling node."""
    return np.where(out_weight > 0, out_weight, 1.0)


def push_sparse(transition: sparse.csr_matrix, walk: sparse.csr_matrix, threshold_weight: np.ndarray,
                seeds: SparseVector, damping: float, epsilon: float, scratch: PushScratch | None = None,
                finer: Sequence[float] = (), settled: Callable[[SparsePush, float], bool] | None = None) -> SparsePush:
    """Forward push from ``seeds`` (non-negative) over ``transition`` (``M``) and ``walk`` (``M.T``, CSR) while some
    ``r[u] > epsilon * threshold_weight[u]``, then on to each of the ``finer`` thresholds until ``settled(result,
    threshold)``; a ``ValueError`` for a threshold that is not positive."""
    thresholds = [epsilon, *finer]
    if not all(t > 0 for t in thresholds):
        raise ValueError(f"epsilon must be > 0, got {thresholds!r}")
    n = transition.shape[0]
    pool = scratch or PushScratch(n)
    pair = pool.take()
    estimate, residual = pair
    residual[seeds.nodes] = seeds.values
    reached = seeds.nodes
    rounds = pushes = 0
    for stage, threshold in enumerate(thresholds):
        active = reached[residual[reached] > threshold * threshold_weight[reached]]
        while active.size:
            rounds += 1
            pushes += active.size
            mass = residual[active]
            residual[active] = 0.0
            estimate[active] += (1.0 - damping) * mass
            if active.size > n * _DENSE_ROUND_SHARE:
                spread = np.zeros(n)
                spread[active] = mass
                residual += damping * (transition @ spread)
                active = np.flatnonzero(residual > threshold * threshold_weight)
            else:
                targets, weights, counts = _rows_of(walk, active)
                np.add.at(residual, targets, damping * weights * np.repeat(mass, counts))
                active = np.unique(targets[residual[targets] > threshold * threshold_weight[targets]])
        # The estimate is non-zero where pushed, the residual where mass arrived and was not pushed on; one pass
        # over both, in byte-sized flags, costs less than sorting the two sets together.
        reached = np.flatnonzero((estimate != 0) | (residual != 0))
        result = SparsePush(SparseVector(reached, estimate[reached]), SparseVector(reached, residual[reached]),
                            rounds, pushes)
        if stage == len(thresholds) - 1 or (settled is not None and settled(result, threshold)):
            break
    estimate[reached] = 0.0
    residual[reached] = 0.0
    pool.give_back(pair)
    return result


def _rows_of(matrix: sparse.csr_matrix, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The column indices, values and entry counts of ``rows`` of a CSR matrix, without building one."""
    starts = matrix.indptr[rows]
    counts = matrix.indptr[rows + 1] - starts
    # position k of row j's run is starts[j] + k: one arange, shifted per run
    offsets = np.repeat(starts - (np.cumsum(counts) - counts), counts)
    positions = np.arange(offsets.shape[0]) + offsets
    return matrix.indices[positions], matrix.data[positions], counts
