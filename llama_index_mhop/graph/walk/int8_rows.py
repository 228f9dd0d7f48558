"""A query's product with every row of a matrix, estimated within a bound and exact where a ranking needs it. An
int8 copy of the rows (:class:`Int8Rows`) estimates every product within a bound on each row's error (the row's
rounding, the query's rounding to bfloat16, the float32 sum and the bfloat16 result), checked against the exact
product at construction; only the rows whose bounds can reach the top or the bottom are multiplied exactly, so every
result is the exact product's. Without torch's kernel, or if its check fails, products stay exact."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...adapters.torch import has_int8_matmul, int8_matmul
from ..state_files import VectorMatrix
from .exact import all_products

__all__ = ["Estimate", "ExactRows", "Int8Rows", "largest_magnitude", "lowest_candidates",
           "row_products", "top_candidates"]

logger = logging.getLogger(__name__)

_BLOCK_ROWS = 1 << 13  # rows quantised at once: their temporaries (about 11 KB a row) stay near 90 MB
_OUTPUT_ROUNDING = 2.0**-8  # a bfloat16 result is within 2^-9 of its value: 2^-8 of itself covers it
_SUM_ROUNDING = 2.0**-23  # float32 sums: per product, twice the unit roundoff
_CHECK_QUERIES = 4
_KERNEL_COLUMNS = 16  # the kernel reads columns in blocks of 16: other widths give wrong results or crash it
# Rows sampled per row of the top asked for: the sample's best k rank near 1/64 of the rows.
_SAMPLE_PER_K = 64


def largest_magnitude(values: np.ndarray) -> float:
    """``max |values|`` (0 for none), without writing an array of absolute values."""
    return max(float(values.max()), -float(values.min())) if values.size else 0.0


@dataclass(frozen=True)
class Estimate:
    """Every row's product with one query: ``|exact - values| <= bounds(rows) <= max_bound`` (0: exact)."""

    values: np.ndarray
    max_bound: float = 0.0
    row_bounds: Callable[[np.ndarray], np.ndarray] | None = None

    def bounds(self, rows: np.ndarray) -> np.ndarray:
        """The bounds of ``rows`` (indices)."""
        return np.full(rows.shape[0], self.max_bound) if self.row_bounds is None else self.row_bounds(rows)


class ExactRows:
    """The exact product with every row of ``matrix`` (float32, by reference); :attr:`method` names the estimate."""

    method = "exact"

    def __init__(self, matrix: np.ndarray) -> None:
        self.matrix = matrix

    def estimate(self, query: np.ndarray) -> Estimate:
        """Every row's product with ``query`` within a bound."""
        return Estimate(all_products(self.matrix, query))

    def exact(self, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """The exact products of ``rows`` with ``query``: the same floats as the whole product gives."""
        return all_products(self.matrix[rows], query)


def top_candidates(center: np.ndarray, radius: Callable[[np.ndarray], np.ndarray], max_radius: float,
                   k: int) -> tuple[np.ndarray, float]:
    """The rows that can be among the ``k`` largest values, each within ``radius(rows)`` (at most ``max_radius``) of
    ``center``: those whose upper bound reaches the ``k``-th largest lower bound, in increasing order, and it."""
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
    """The rows that can hold the smallest value, each within ``radius(rows)`` of ``center``, in increasing order."""
    if center.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    low = float(center.min())
    near = np.flatnonzero(center <= low + max_radius)  # the least upper bound is among these
    least_upper = float(np.min(center[near] + radius(near)))
    reach = np.flatnonzero(center <= least_upper + max_radius)
    return reach[center[reach] - radius(reach) <= least_upper]


def _bfloat16_upward(values: np.ndarray) -> np.ndarray:
    """The smallest bfloat16-representable float32 at or above each (non-negative) value."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounded = np.where(bits & 0xFFFF, (bits + 0x10000) & 0xFFFF0000, bits).astype(np.uint32)
    return rounded.view(np.float32)


class Int8Rows(ExactRows):
    """Products with a float32 matrix estimated from its int8 copy, shared through ``codes_folder``
    (:class:`~..state_files.VectorMatrix`; None: held in the heap); a ``RuntimeError`` when torch's int8 kernel is
    missing or broke the bound in the self-check."""

    method = "int8"

    def __init__(self, matrix: np.ndarray, codes_folder: Path | None = None, codes_kind: str = "int8") -> None:
        import torch
        if not has_int8_matmul():
            raise RuntimeError("this torch has no int8 matrix product")
        super().__init__(matrix)
        self._torch = torch
        rows, dims = matrix.shape
        # The scale is bfloat16 in the kernel: rounding it up first keeps every |x / scale| within 127.
        largest = np.abs(matrix).max(axis=1) if rows else np.zeros(0, np.float32)
        scales = _bfloat16_upward(np.where(largest > 0, largest / 127.0, 1.0))
        self._padding = -dims % _KERNEL_COLUMNS
        shared = VectorMatrix(rows, dims + self._padding, codes_folder, codes_kind, dtype=np.int8)
        codes = shared.rows
        self.row_errors = np.empty(rows)
        self.row_norms = np.empty(rows)
        for start in range(0, rows, _BLOCK_ROWS):
            block, scale = matrix[start : start + _BLOCK_ROWS], scales[start : start + _BLOCK_ROWS, None]
            quantised = np.clip(np.rint(block / scale), -127, 127)
            codes[start : start + len(block), :dims] = quantised
            stored = quantised.astype(np.float64) * scale
            self.row_errors[start : start + len(block)] = np.linalg.norm(block - stored, axis=1)
            self.row_norms[start : start + len(block)] = np.linalg.norm(stored, axis=1)
        with warnings.catch_warnings():  # a shared copy is read-only, and the kernel only reads it
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            self._codes = torch.from_numpy(shared.finish(rows))
        self._scales = torch.from_numpy(scales).to(torch.bfloat16)
        self._sum_factor = dims * _SUM_ROUNDING
        self._largest_error = float(self.row_errors.max()) if rows else 0.0
        self._largest_norm = float(self.row_norms.max()) if rows else 0.0
        self._check()

    @property
    def nbytes(self) -> int:
        """Memory of the int8 copy and its per-row numbers (the float32 matrix is the caller's)."""
        return int(self._codes.numel() + 2 * self._scales.numel() + self.row_errors.nbytes + self.row_norms.nbytes)

    def estimate(self, query: np.ndarray) -> Estimate:
        torch = self._torch
        q = np.asarray(query, dtype=np.float32)
        rounded = torch.from_numpy(np.pad(q, (0, self._padding))).to(torch.bfloat16)
        rounded_q = rounded.float().numpy()[: q.shape[0]].astype(np.float64)
        values = int8_matmul(rounded.reshape(1, -1), self._codes, self._scales)[0]
        values = values.to(torch.float64).numpy()  # bfloat16 to float64 is exact
        exact_q = q.astype(np.float64)
        per_error = float(np.linalg.norm(exact_q))
        per_norm = float(np.linalg.norm(exact_q - rounded_q)) + \
            self._sum_factor * float(np.linalg.norm(rounded_q))
        largest = largest_magnitude(values)

        def row_bounds(rows: np.ndarray) -> np.ndarray:
            return (self.row_errors[rows] * per_error + self.row_norms[rows] * per_norm
                    + np.abs(values[rows]) * _OUTPUT_ROUNDING)

        largest_bound = self._largest_error * per_error + self._largest_norm * per_norm + largest * _OUTPUT_ROUNDING
        return Estimate(values, largest_bound, row_bounds)

    def _check(self) -> None:
        """Hold the bound against the exact product: random queries, and rows of the matrix as queries."""
        rows = self.matrix.shape[0]
        if rows == 0:
            return
        rng = np.random.default_rng(0)
        queries: list[Any] = list(rng.standard_normal((_CHECK_QUERIES // 2, self.matrix.shape[1])))
        queries += [self.matrix[i] for i in rng.integers(0, rows, _CHECK_QUERIES - len(queries))]
        for query in queries:
            query = np.asarray(query / (np.linalg.norm(query) or 1.0), dtype=np.float32)
            estimate = self.estimate(query)
            bounds = estimate.bounds(np.arange(rows))
            exact = all_products(self.matrix, query).astype(np.float64)
            worst = float(np.max(np.abs(exact - estimate.values) - bounds))
            if bounds.max() > estimate.max_bound:
                raise RuntimeError("a row's bound exceeds the largest bound")
            if worst > 0:
                raise RuntimeError(f"the int8 estimate broke its bound by {worst:.3g}")


def row_products(matrix: np.ndarray, int8_min_rows: int, codes_folder: Path | None = None,
                 codes_kind: str = "int8") -> ExactRows:
    """:class:`Int8Rows` from ``int8_min_rows`` rows where torch's kernel holds its bound, else exact."""
    if matrix.shape[0] >= max(1, int8_min_rows):
        try:
            return Int8Rows(matrix, codes_folder, codes_kind)
        except (ImportError, RuntimeError) as exc:
            logger.warning("row products stay exact (float32): %s", exc)
    return ExactRows(matrix)
