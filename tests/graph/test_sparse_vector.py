"""A vector held as its few non-zero nodes: the same values as the whole array, and refused when malformed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.walk.exact import SparseVector


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10_000), size=st.integers(1, 50), added=st.integers(0, 12))
def test_adding_at_nodes_gives_the_floats_of_the_whole_array(seed, size, added):
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(size) < 0.3, rng.uniform(0.01, 3.0, size), 0.0)
    nodes = rng.integers(0, size, added)  # repeats allowed, added in order
    values = rng.uniform(0.01, 3.0, added)
    want = dense.copy()
    np.add.at(want, nodes, values)
    got = SparseVector.from_dense(dense).plus(nodes, values)
    assert np.array_equal(got.to_dense(size), want)
    assert got.nodes.tolist() == np.flatnonzero(want).tolist()
    low, high = got.split(size // 2)
    assert np.array_equal(np.concatenate([low.to_dense(size // 2), high.to_dense(size - size // 2)]), want)


def test_a_mapping_drops_zeros_and_sorts_its_nodes():
    vector = SparseVector.from_mapping({9: 0.5, 2: 0.0, 4: 1.5})
    assert vector.nodes.tolist() == [4, 9] and vector.values.tolist() == [1.5, 0.5]
    assert vector.total() == 2.0
    assert SparseVector.empty().total() == 0.0 and SparseVector.from_mapping({}).nodes.size == 0


def test_malformed_vectors_are_refused():
    with pytest.raises(ValueError, match="equal"):
        SparseVector(np.array([1, 2]), np.array([1.0]))
    with pytest.raises(ValueError, match="increasing"):
        SparseVector(np.array([3, 1]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="increasing"):
        SparseVector(np.array([1, 1]), np.array([1.0, 1.0]))
