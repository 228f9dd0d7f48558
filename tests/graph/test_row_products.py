"""Row products estimated from int8 rows within a bound, and the candidates those bounds leave for the top."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.walk import int8_rows
from llama_index_mhop.graph.walk.exact import all_products, best_first
from llama_index_mhop.graph.walk.int8_rows import (
    ExactRows,
    Int8Rows,
    lowest_candidates,
    row_products,
    top_candidates,
)


def unit_rows(seed: int, rows: int, dims: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    matrix = rng.normal(size=(rows, dims)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


@pytest.mark.parametrize("dims", [10, 16, 33, 384])
def test_every_estimate_is_within_its_bound(dims):
    """Widths that are and are not multiples of the kernel's 16 columns; rows of unequal norm and one all zero."""
    matrix = unit_rows(dims, 2000, dims) * np.random.default_rng(1).uniform(0.1, 3.0, size=(2000, 1))
    matrix[7] = 0.0
    matrix = matrix.astype(np.float32)
    estimate = Int8Rows(matrix)
    rng = np.random.default_rng(2)
    for query in [*rng.normal(size=(10, dims)), *matrix[:5]]:
        query = (query / (np.linalg.norm(query) or 1.0)).astype(np.float32)
        got = estimate.estimate(query)
        bounds = got.bounds(np.arange(len(matrix)))
        exact = all_products(matrix, query).astype(np.float64)
        assert np.all(np.abs(exact - got.values) <= bounds) and bounds.max() <= got.max_bound
        assert got.max_bound < 0.05 * np.linalg.norm(matrix, axis=1).max()  # tight enough to leave few candidates
        assert got.values[7] == 0.0


def test_exact_rows_are_the_same_floats_as_the_whole_product():
    matrix = unit_rows(3, 5000, 384)
    query = matrix[11]
    rows = np.array([0, 11, 17, 4999])
    whole = all_products(matrix, query)
    assert np.array_equal(Int8Rows(matrix).exact(query, rows), whole[rows])
    assert np.array_equal(ExactRows(matrix).exact(query, rows), whole[rows])


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 300), st.integers(0, 320), st.floats(0.0, 0.5))
def test_the_candidates_hold_the_true_top_and_minimum(seed, size, k, spread):
    """The windowed selection returns exactly the rows the definition names, computed over every row."""
    rng = np.random.default_rng(seed)
    truth = np.round(rng.normal(size=size), 2)  # rounded: ties happen
    radius = rng.uniform(0, spread, size)
    center = truth + rng.uniform(-1, 1, size) * radius
    lower, upper = center - radius, center + radius
    top, threshold = top_candidates(center, lambda rows: radius[rows], float(radius.max()), k)
    if 0 < k < size:
        kth_lower = np.sort(lower)[::-1][k - 1]
        assert threshold == kth_lower
        assert top.tolist() == np.flatnonzero(upper >= kth_lower).tolist()
        kth = np.sort(truth)[::-1][k - 1]  # ties at the k-th value: every row equal to it is a candidate too
        assert set(np.flatnonzero(truth >= kth).tolist()) <= set(top.tolist())
    else:
        assert top.tolist() == ([] if k <= 0 else list(range(size)))
    low = lowest_candidates(center, lambda rows: radius[rows], float(radius.max()))
    assert low.tolist() == np.flatnonzero(lower <= upper.min()).tolist()
    assert set(np.flatnonzero(truth == truth.min()).tolist()) <= set(low.tolist())


@pytest.mark.parametrize("k", [1, 5, 21])
def test_the_candidates_of_a_large_array_are_those_of_the_definition(k):
    """At 100k rows the selection starts from a sample of every stride-th row; the result is still exact."""
    rng = np.random.default_rng(k)
    center = rng.normal(size=100_000) * 0.1
    center[rng.integers(0, 100_000, 50)] += 0.3  # a few clear winners, as a query's top looks
    radius = rng.uniform(0.0, 0.02, size=center.shape[0])
    lower, upper = center - radius, center + radius
    top, threshold = top_candidates(center, lambda rows: radius[rows], float(radius.max()), k)
    assert threshold == np.sort(lower)[::-1][k - 1]
    assert top.tolist() == np.flatnonzero(upper >= threshold).tolist()
    assert len(top) < 1000  # a few rows to multiply exactly, not the whole array


def test_best_first_orders_by_value_then_index():
    values = np.array([0.5, 0.9, 0.5, 0.9, 0.1])
    assert best_first(values, 3).tolist() == [1, 3, 0]
    assert best_first(values, 0).tolist() == [] and best_first(values, 9).tolist() == [1, 3, 0, 2, 4]


def test_small_matrices_and_a_broken_kernel_stay_exact(monkeypatch, caplog):
    matrix = unit_rows(4, 300, 16)
    assert row_products(matrix, int8_min_rows=301).method == "exact"
    assert row_products(matrix, int8_min_rows=300).method == "int8"
    import torch

    real = torch._weight_int8pack_mm
    monkeypatch.setattr(torch, "_weight_int8pack_mm", lambda *a: real(*a) * 1.05)  # a kernel off by 5%
    with caplog.at_level(logging.WARNING, logger=int8_rows.__name__):
        chosen = row_products(matrix, int8_min_rows=1)
    assert chosen.method == "exact" and "broke its bound" in caplog.text
