"""The solved dense share of HippoRAG 2's reset: the same PageRank vector as a power iteration of the whole reset."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llama_index_mhop.graph.walk import affine as affine_ppr
from llama_index_mhop.graph.walk.affine import AffineResetPageRank
from llama_index_mhop.graph.walk.exact import PageRankGraph, SparseVector, best_first
from llama_index_mhop.graph.walk.int8_rows import Int8Rows
from tests.graph.walk_reference import push_pagerank


def hippo_shaped(seed: int, passages: int, entities: int, dims: int = 8, directed: bool = False, **kwargs):
    """A random passage/entity graph (passages first), normalised passage vectors and a normalised query."""
    rng = np.random.default_rng(seed)
    n = passages + entities
    edges = np.stack([rng.integers(0, passages, size=3 * passages), rng.integers(passages, n, size=3 * passages)], 1)
    facts = rng.integers(passages, n, size=(entities, 2))
    edges = np.concatenate([edges, facts[facts[:, 0] != facts[:, 1]]])
    weights = rng.choice([1.0, 1.0, 10.0], size=len(edges)) * rng.uniform(0.5, 1.0, size=len(edges))
    graph = PageRankGraph.from_edges(n, edges, weights, directed=directed, tol=1e-14, **kwargs)
    vectors = rng.normal(size=(passages, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = rng.normal(size=dims).astype(np.float32)
    return graph, vectors, query / np.linalg.norm(query)


def hippo_reset(graph, vectors, query, seeds, weight):
    """HippoRAG 2's reset written out in full: seeds plus min-max normalised similarity times the weight."""
    similarity = vectors.astype(np.float64) @ query.astype(np.float64)
    low, high = similarity.min(), similarity.max()
    reset = seeds.copy()
    reset[: len(vectors)] += weight * (similarity - low) / (high - low)
    scale = weight / (high - low)
    return reset, -scale * low, scale


def entity_seeds(graph, passages, rng, count=3):
    seeds = np.zeros(graph.n_nodes)
    seeds[rng.choice(np.arange(passages, graph.n_nodes), size=count, replace=False)] = rng.uniform(0.1, 1.0, count)
    return seeds


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), passages=st.integers(3, 60), entities=st.integers(2, 60),
       weight=st.sampled_from([0.0, 0.05, 1.0]), directed=st.booleans())
def test_exact_seeds_reproduce_the_power_iteration_of_the_whole_reset(seed, passages, entities, weight, directed):
    graph, vectors, query = hippo_shaped(seed, passages, entities, directed=directed, method="exact")
    seeds = entity_seeds(graph, passages, np.random.default_rng(seed), count=min(2, entities))
    reset, uniform, scale = hippo_reset(graph, vectors, query, seeds, weight)
    affine = AffineResetPageRank(graph, passages, vectors)
    result = affine.run(SparseVector.from_dense(seeds), uniform, scale, query)
    exact = graph.run(reset)
    assert result.l1_bound == 0.0
    # float32 vectors and basis: agreement to float32 precision, on a vector that sums to at most 1
    np.testing.assert_allclose(result.passages, exact[:passages], atol=2e-7, rtol=1e-5)
    assert result.passages.sum() == pytest.approx(exact[:passages].sum(), abs=1e-6)


def test_dangling_and_unreachable_nodes_keep_the_power_iterations_convention():
    # passage 0 - entity 3, passage 1 - entity 3; passage 2 is isolated (dangling); entity 4 is isolated too.
    graph = PageRankGraph.from_edges(5, [(0, 3), (1, 3)], [1.0, 2.0], method="exact", tol=1e-15)
    vectors = np.eye(3, 2, dtype=np.float32)
    vectors[2] = [0.6, 0.8]
    query = np.array([1.0, 0.0], dtype=np.float32)
    seeds = np.array([0.0, 0.0, 0.0, 0.5, 0.0])
    reset, uniform, scale = hippo_reset(graph, vectors, query, seeds, 0.3)
    result = AffineResetPageRank(graph, 3, vectors).run(SparseVector.from_dense(seeds), uniform, scale, query)
    np.testing.assert_allclose(result.passages, graph.run(reset)[:3], atol=1e-7)
    assert 1 not in result.seed_entities.nodes  # the isolated entity is never reached


def test_push_seeds_stay_within_the_bound_and_keep_the_top_21():
    graph, vectors, query = hippo_shaped(7, 3000, 3000, dims=16, method="push")
    affine = AffineResetPageRank(graph, 3000, vectors)
    rng = np.random.default_rng(8)
    for _ in range(5):
        seeds = entity_seeds(graph, 3000, rng)
        reset, uniform, scale = hippo_reset(graph, vectors, query, seeds, 0.05)
        result = affine.run(SparseVector.from_dense(seeds), uniform, scale, query)
        exact = graph.run(reset)[:3000]
        assert np.abs(result.passages - exact).sum() <= result.l1_bound + 1e-6
        top = np.argsort(-exact)[:21]
        assert set(np.argsort(-result.passages)[:21]) == set(top)


@pytest.mark.parametrize("method", ["exact", "push"])
def test_the_top_k_from_the_int8_basis_is_the_exact_walks_bit_for_bit(method):
    """Asked for its top 21, a walk over an int8-estimated basis multiplies only the rows that can reach them, and
    those 21 passages and their scores are the floats of the whole product."""
    graph, vectors, query = hippo_shaped(11, 2000, 1500, dims=16, method=method)
    whole = AffineResetPageRank(graph, 2000, vectors)
    estimated = AffineResetPageRank(graph, 2000, vectors, row_products=Int8Rows)
    assert estimated.basis_products.method == "int8"
    rng = np.random.default_rng(12)
    for weight, count in [(0.05, 3), (0.05, 0), (1.0, 1), (20.0, 2)]:  # weak seeds to none: the dense share decides
        seeds = entity_seeds(graph, 2000, rng, count=count)
        _, uniform, scale = hippo_reset(graph, vectors, query, seeds, weight)
        want = whole.run(SparseVector.from_dense(seeds), uniform, scale, query)
        got = estimated.run(SparseVector.from_dense(seeds), uniform, scale, query, top_k=21)
        assert want.exact_rows is None and 21 <= len(got.exact_rows) < 2000
        best = got.exact_rows[best_first(got.passages[got.exact_rows], 21)]
        assert best.tolist() == best_first(want.passages, 21).tolist()
        assert np.array_equal(got.passages[best], want.passages[best])
        assert np.array_equal(got.seed_entities.nodes, want.seed_entities.nodes)
        assert np.array_equal(got.seed_entities.values, want.seed_entities.values)


def test_without_vectors_only_the_uniform_share_and_seeds_are_solved():
    graph, vectors, _ = hippo_shaped(3, 40, 30, method="exact")
    affine = AffineResetPageRank(graph, 40)
    seeds = entity_seeds(graph, 40, np.random.default_rng(4))
    seeds[5] = 0.2  # a near passage's share above the far passages' common one
    reset = seeds.copy()
    reset[:40] += 0.01
    np.testing.assert_allclose(affine.run(SparseVector.from_dense(seeds), 0.01).passages, graph.run(reset)[:40], atol=1e-9)
    assert affine.basis is None
    with pytest.raises(ValueError, match="without passage vectors"):
        affine.run(SparseVector.from_dense(seeds), 0.01, 0.5, np.ones(8, dtype=np.float32))


def test_a_zero_or_negative_reset_is_refused():
    graph, vectors, query = hippo_shaped(1, 10, 10, method="exact")
    affine = AffineResetPageRank(graph, 10, vectors)
    with pytest.raises(ValueError, match="all zero"):
        affine.run(SparseVector.empty())
    seeds = np.zeros(20)
    seeds[12] = -1.0
    with pytest.raises(ValueError, match="non-negative"):
        affine.run(SparseVector.from_dense(seeds), 1.0)
    with pytest.raises(ValueError, match="num_passages"):
        AffineResetPageRank(graph, 0)
    with pytest.raises(ValueError, match="rows"):
        AffineResetPageRank(graph, 9, vectors)


def test_column_blocks_solve_to_the_same_basis(monkeypatch):
    from llama_index_mhop.graph.walk import affine as affine_ppr

    graph, vectors, query = hippo_shaped(5, 50, 40, dims=8, method="exact")
    whole = AffineResetPageRank(graph, 50, vectors)
    monkeypatch.setattr(affine_ppr, "_SOLVE_BYTES", 8 * graph.n_nodes * 3)  # three columns a block
    blocks = AffineResetPageRank(graph, 50, vectors)
    # each block stops when its own columns converge: the same basis to the solve's tolerance
    np.testing.assert_allclose(blocks.basis, whole.basis, rtol=1e-6, atol=1e-9)
    seeds = entity_seeds(graph, 50, np.random.default_rng(6))
    np.testing.assert_allclose(blocks.run(SparseVector.from_dense(seeds), 0.01, 0.2, query).passages,
                               whole.run(SparseVector.from_dense(seeds), 0.01, 0.2, query).passages, rtol=1e-6)


def test_blocks_solved_on_several_threads_are_the_one_thread_floats(monkeypatch):
    from llama_index_mhop.graph.walk import affine as affine_ppr

    graph, vectors, _ = hippo_shaped(7, 60, 50, dims=10, method="exact")
    monkeypatch.setattr(affine_ppr, "_SOLVE_BYTES", 8 * graph.n_nodes * 3)  # four blocks
    solved = {}
    for threads in (1, 4):
        monkeypatch.setattr(affine_ppr, "_solver_threads", lambda threads=threads: threads)
        solved[threads] = affine_ppr.solve_basis(graph, 60, vectors)
    for name in ("basis", "uniform_response", "node_totals"):
        np.testing.assert_array_equal(getattr(solved[4], name), getattr(solved[1], name))
    assert solved[4].iterations == solved[1].iterations > 1


def test_a_hub_seed_too_light_to_push_still_counts():
    """A seed entity in many passages gets a tiny weight: under the push's threshold it is not pushed, and its
    first step (kept where it is) still joins the result, within the bound."""
    passages = 400
    hub = passages  # one entity in every passage
    edges = [(p, hub) for p in range(passages)] + [(p, passages + 1 + p % 10) for p in range(passages)]
    weights = [10.0] * passages + [1.0] * passages
    graph = PageRankGraph.from_edges(passages + 11, edges, weights, method="push", tol=1e-14)
    rng = np.random.default_rng(2)
    vectors = rng.normal(size=(passages, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    query = vectors[0]
    seeds = np.zeros(graph.n_nodes)
    seeds[hub] = 1.0 / passages
    reset, uniform, scale = hippo_reset(graph, vectors, query, seeds, 0.05)
    affine = AffineResetPageRank(graph, passages, vectors)
    result = affine.run(SparseVector.from_dense(seeds), uniform, scale, query)
    exact = graph.run(reset)
    seed_share = seeds / seeds.sum()
    epsilon = graph.push_epsilon * reset.sum() / seeds.sum()
    assert push_pagerank(graph, seed_share, epsilon=epsilon).pushes == 0  # under the threshold: never pushed
    assert result.seed_entities.to_dense(11)[0] > 0  # the hub keeps its own first step
    assert np.abs(result.passages - exact[:passages]).sum() <= result.l1_bound + 1e-6


def test_similarities_all_positive_make_a_negative_uniform_share():
    graph, vectors, _ = hippo_shaped(11, 30, 20, dims=4, method="exact")
    vectors = np.abs(vectors)  # every similarity to a positive query is positive, so low > 0
    query = np.full(4, 0.5, dtype=np.float32)
    seeds = entity_seeds(graph, 30, np.random.default_rng(12))
    reset, uniform, scale = hippo_reset(graph, vectors, query, seeds, 0.05)
    assert uniform < 0
    result = AffineResetPageRank(graph, 30, vectors).run(SparseVector.from_dense(seeds), uniform, scale, query)
    np.testing.assert_allclose(result.passages, graph.run(reset)[:30], atol=1e-7, rtol=1e-5)
    with pytest.raises(ValueError, match="query embedding"):
        AffineResetPageRank(graph, 30, vectors).run(SparseVector.from_dense(seeds), uniform, scale)


def test_a_push_with_nothing_over_its_threshold_says_so():
    graph, _, _ = hippo_shaped(13, 10, 10, method="push")
    reset = np.zeros(graph.n_nodes)
    reset[12] = 1.0
    result = push_pagerank(graph, reset, epsilon=1e6, keep_remainder=True)
    assert result.mass == 0.0 and result.l1_bound == float("inf") and not result.scores.any()
    assert result.remainder[12] == 1.0


def _ordered_top(values, k):
    return best_first(values, k).tolist()


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), passages=st.integers(30, 300), k=st.sampled_from([1, 5, 21]),
       step=st.sampled_from([8.0, 1e3, 1e5]))
def test_a_push_stopped_by_the_certificate_has_the_exact_top_k(seed, passages, k, step):
    """Without a query product the seeds' push may stop early; whenever its bounds settle the top k, that top k
    and its order are the power iteration's of the whole reset, however coarse the first threshold."""
    graph, _, _ = hippo_shaped(seed, passages, passages // 2, method="push")
    affine = AffineResetPageRank(graph, passages)
    seeds = entity_seeds(graph, passages, np.random.default_rng(seed), count=3)
    uniform = 0.002
    reset = seeds.copy()
    reset[:passages] += uniform
    verdicts = []
    settled = affine_ppr._top_settled
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(affine_ppr, "_COARSE_STEP", step)
        patch.setattr(affine_ppr, "_top_settled", lambda *a: verdicts.append(settled(*a)) or verdicts[-1])
        result = affine.run(SparseVector.from_dense(seeds), uniform, top_k=k)
    assert graph.symmetric and verdicts  # undirected: the certificate was asked
    if verdicts[-1]:
        assert _ordered_top(result.passages, k) == _ordered_top(graph.run(reset)[:passages], k)


def test_the_certificate_stops_a_wide_push_early_with_the_exact_top_21():
    graph, _, _ = hippo_shaped(7, 3000, 3000, method="push")
    affine = AffineResetPageRank(graph, 3000)
    seeds = entity_seeds(graph, 3000, np.random.default_rng(9))
    reset = seeds.copy()
    reset[:3000] += 1e-4
    pushes = []
    push_from = graph.push_from
    graph.push_from = lambda *a, **kw: pushes.append(push_from(*a, **kw)) or pushes[-1]
    early = affine.run(SparseVector.from_dense(seeds), 1e-4, top_k=21)
    full = affine.run(SparseVector.from_dense(seeds), 1e-4)
    assert pushes[0].pushes < pushes[1].pushes  # stopped at a coarser threshold
    assert _ordered_top(early.passages, 21) == _ordered_top(graph.run(reset)[:3000], 21)
    assert _ordered_top(full.passages, 21) == _ordered_top(early.passages, 21)


def test_a_directed_graph_is_never_stopped_early(monkeypatch):
    graph, _, _ = hippo_shaped(3, 200, 100, directed=True, method="push")
    assert not graph.symmetric
    monkeypatch.setattr(affine_ppr, "_top_settled", lambda *a: pytest.fail("a certificate on a directed graph"))
    AffineResetPageRank(graph, 200).run(SparseVector.from_dense(entity_seeds(graph, 200, np.random.default_rng(4))),
                                        0.001, top_k=5)
