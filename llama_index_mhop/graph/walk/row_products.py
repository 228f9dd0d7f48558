"""A query's product with every row of a matrix, estimated within a bound, and exact where a ranking needs it.

A query scores every fact, every passage and every row of the PageRank basis (:mod:`.affine_ppr`), but it uses
only a few of those products exactly: the best ``k``, and the lowest (the minimum of a min-max normalisation).
Reading float32 rows is what such a product costs (memory bandwidth, not arithmetic), so an estimate from a
quarter of the bytes, with a bound on each row's error, tells which rows can matter: a row whose upper bound is
below the ``k``-th best lower bound cannot be in the top ``k``. Only the rows that can are multiplied exactly, so
every result is the one the exact product gives.

:class:`ExactRows` is the plain product (no estimate); :class:`~.int8_rows.Int8Rows` estimates from an int8 copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

__all__ = ["Estimate", "ExactRows", "RowProducts", "all_products", "best_first", "largest_magnitude",
           "lowest_candidates", "top_candidates"]


def all_products(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix @ query``, one float per row, in the rows' precision."""
    # einsum, not BLAS: a threaded BLAS call leaves its threads spinning, and on a small machine they slow the
    # next query embedding several times over (measured p50 340 ms against 48 ms on 2 cores).
    return np.einsum("ij,j->i", matrix, query)


def largest_magnitude(values: np.ndarray) -> float:
    """``max |values|`` (0 for none), without writing an array of absolute values."""
    return max(float(values.max()), -float(values.min())) if values.size else 0.0


def best_first(values: np.ndarray, k: int) -> np.ndarray:
    """The indices of the ``k`` largest values, largest first; equal values in increasing index order."""
    k = min(k, values.shape[0])
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    best = np.argpartition(-values, k - 1)[:k]
    return best[np.lexsort((best, -values[best]))]


@dataclass(frozen=True)
class Estimate:
    """Every row's product with one query, each within its bound: ``|exact_i - values_i| <= bounds(rows)_i
    <= max_bound`` (``max_bound`` 0: the values are the exact products)."""

    values: np.ndarray
    max_bound: float = 0.0
    row_bounds: Callable[[np.ndarray], np.ndarray] | None = None

    def bounds(self, rows: np.ndarray) -> np.ndarray:
        """The bounds of ``rows`` (indices)."""
        if self.row_bounds is None:
            return np.full(rows.shape[0], self.max_bound)
        return self.row_bounds(rows)


class RowProducts(Protocol):
    """Products of a query with the rows of one float32 matrix."""

    #: ``"exact"`` or the name of the estimate (``"int8"``).
    method: str
    #: The float32 rows.
    matrix: np.ndarray

    def estimate(self, query: np.ndarray) -> Estimate:
        """Every row's product with ``query`` within a bound."""
        ...

    def exact(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The exact products of ``rows`` (indices) with ``query``: the same floats as the whole product gives."""
        ...


class ExactRows:
    """The exact product with every row.

    Args:
        matrix: the rows (float32), kept by reference.
    """

    method = "exact"

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix

    def estimate(self, query: np.ndarray) -> Estimate:
        return Estimate(all_products(self.matrix, query))

    def exact(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return all_products(self.matrix[rows], query)


# Every selection below reads the whole array only in comparisons with one number; bounds are computed, and
# partitions run, over the few rows near the top or the bottom.
_SAMPLE_PER_K = 64  # rows sampled per row of the top asked for: the sample's best k rank near 1/64 of the rows


def top_candidates(center: np.ndarray, radius: Callable[[np.ndarray], np.ndarray], max_radius: float,
                   k: int) -> tuple[np.ndarray, float]:
    """The rows that can be among the ``k`` largest values, given each value within ``radius(rows)`` (at most
    ``max_radius``) of ``center``: those whose upper bound reaches the ``k``-th largest lower bound (ties
    included), in increasing order, and that ``k``-th largest lower bound."""
    size = center.shape[0]
    if k <= 0 or size == 0:
        return np.zeros(0, dtype=np.int64), float("inf")
    if k >= size:
        return np.arange(size), float("-inf")
    # Any k rows' lower bounds have their least below the k-th largest: take the best k of every stride-th row,
    # so that only the rows whose center reaches that least can hold the k largest lower bounds.
    stride = max(1, size // (_SAMPLE_PER_K * k))
    sampled = np.argpartition(-center[::stride], k - 1)[:k] * stride
    floor = float(np.min(center[sampled] - radius(sampled)))
    near = np.flatnonzero(center >= floor)
    lower = center[near] - radius(near)
    threshold = float(np.partition(lower, lower.shape[0] - k)[lower.shape[0] - k])
    reach = np.flatnonzero(center >= threshold - max_radius)
    return reach[center[reach] + radius(reach) >= threshold], threshold


def lowest_candidates(center: np.ndarray, radius: Callable[[np.ndarray], np.ndarray],
                      max_radius: float) -> np.ndarray:
    """The rows that can hold the smallest value, given each value within ``radius(rows)`` (at most
    ``max_radius``) of ``center``, in increasing order."""
    if center.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    low = float(center.min())
    near = np.flatnonzero(center <= low + max_radius)  # the least upper bound is among these
    least_upper = float(np.min(center[near] + radius(near)))
    reach = np.flatnonzero(center <= least_upper + max_radius)
    return reach[center[reach] - radius(reach) <= least_upper]
