"""Dense scores searched exactly or through Chroma's HNSW index: the nearest records exact, the rest their mean."""

from __future__ import annotations

import chromadb
import numpy as np
import pytest

from llama_index_mhop.graph.state import DenseVectors
from llama_index_mhop.graph.walk.exact import all_products


@pytest.fixture(scope="module")
def vectors():
    """300 random unit vectors in a cosine Chroma collection, and a query."""
    rng = np.random.default_rng(7)
    matrix = rng.normal(size=(300, 16)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    collection = chromadb.EphemeralClient().get_or_create_collection("dense_search_vectors",
                                                                     metadata={"hnsw:space": "cosine"})
    ids = [f"r{i:04d}" for i in range(len(matrix))]  # sorted, as a state's ids are
    collection.add(ids=ids, embeddings=matrix)
    query = rng.normal(size=16).astype(np.float32)
    return ids, matrix, collection, query / np.linalg.norm(query)


def test_below_the_threshold_the_scores_are_the_exact_products(vectors):
    ids, matrix, collection, query = vectors
    dense = DenseVectors(ids, matrix, [collection], hnsw_min_records=301)
    assert dense.method == "exact"
    exact = all_products(matrix, query)
    assert np.allclose(exact, matrix.astype(np.float64) @ query.astype(np.float64), rtol=1e-5, atol=1e-6)
    got = dense.search(query, top_k=7)
    assert np.array_equal(got.scores, exact)
    assert got.low == float(exact.min()) and got.high == float(exact.max())
    assert got.top.tolist() == np.argsort(-exact, kind="stable")[:7].tolist()
    assert np.array_equal(got.top_scores, exact[got.top])


def test_the_top_alone_from_the_int8_estimate_is_the_exact_top(vectors):
    """Asked for the top and the extremes only, an int8-estimated search returns the exact ones, bit for bit."""
    ids, matrix, collection, _ = vectors
    exact_search = DenseVectors(ids, matrix, [collection], hnsw_min_records=301)
    estimated = DenseVectors(ids, matrix, [collection], hnsw_min_records=301, int8_min_records=1)
    assert estimated.products.method == "int8"
    rng = np.random.default_rng(3)
    for query in [*rng.normal(size=(20, 16)), *matrix[:5]]:
        query = (query / np.linalg.norm(query)).astype(np.float32)
        for k in (0, 1, 5, 21):
            want, got = exact_search.search(query, k), estimated.search(query, k, every=False)
            assert got.scores is None
            assert got.top.tolist() == want.top.tolist()
            assert np.array_equal(got.top_scores, want.top_scores)
            assert (got.low, got.high) == (want.low, want.high)


def test_past_the_threshold_the_nearest_are_exact_and_the_rest_keep_their_total(vectors):
    ids, matrix, collection, query = vectors
    exact = matrix.astype(np.float64) @ query
    dense = DenseVectors(ids, matrix, [collection], hnsw_min_records=300, top_n=30)
    assert dense.method == "hnsw" and dense.matrix is None
    got = dense.search(query, top_k=3)
    nearest = np.argsort(-exact)[:30]
    assert got.scores[nearest] == pytest.approx(exact[nearest], abs=1e-5)
    rest = np.setdiff1d(np.arange(300), nearest)
    assert np.all(got.scores[rest] == pytest.approx(exact[rest].mean(), abs=1e-5))
    assert got.scores.sum() == pytest.approx(exact.sum(), abs=1e-3)  # the normalised dense mass is unchanged
    assert got.low == pytest.approx(exact.min(), abs=1e-5)  # the nearest record to -query
    assert got.top.tolist() == nearest[:3].tolist() and got.high == pytest.approx(exact.max(), abs=1e-5)
    assert DenseVectors(ids, matrix, [collection], 300).search(query, top_n=5).scores.max() == pytest.approx(exact.max())


def test_records_spread_over_two_collections_search_as_one(vectors):
    """A graph reading a vector index's passages in place searches its own collection and that one: the merged
    nearest records are those of one collection holding them all, and records of neither graph are skipped."""
    ids, matrix, collection, query = vectors
    client = chromadb.EphemeralClient()
    own = client.get_or_create_collection("dense_search_own", metadata={"hnsw:space": "cosine"})
    source = client.get_or_create_collection("dense_search_source", metadata={"hnsw:space": "cosine"})
    own.add(ids=ids[:100], embeddings=matrix[:100])
    source.add(ids=ids[100:], embeddings=matrix[100:])
    source.add(ids=["not_the_graphs"], embeddings=[query.tolist()])  # the nearest of all, but not a record here
    one = DenseVectors(ids, matrix, [collection], hnsw_min_records=300, top_n=30).search(query, top_k=5)
    two = DenseVectors(ids, matrix, [own, source], hnsw_min_records=300, top_n=30).search(query, top_k=5)
    assert two.top.tolist() == one.top.tolist()
    assert sorted(two.near.tolist()) == sorted(one.near.tolist())
    assert two.scores == pytest.approx(one.scores, abs=1e-5)
    assert two.low == pytest.approx(one.low, abs=1e-5)
