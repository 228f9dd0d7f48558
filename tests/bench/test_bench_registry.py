"""The retriever registry and the peers it ships, over the real 20-question HotpotQA slice index."""

from __future__ import annotations

import pytest
from llama_index.core.base.base_retriever import BaseRetriever

from llama_index_mhop.bench import registry
from llama_index_mhop.bench.benchmarker import passage_ids
from llama_index_mhop.bench.context import BenchContext
from llama_index_mhop.bench.registry import (
    RetrieverSpec,
    get_retriever_spec,
    register_retriever,
    registered_retrievers,
)
from llama_index_mhop.stores.vector_index import all_passages


@pytest.fixture
def slice_context(hotpotqa_slice, hotpotqa_slice_index, embed_model, tmp_path):
    _, docs = hotpotqa_slice
    return BenchContext(docs, embed_model=embed_model, chroma_client=None, work_dir=tmp_path, top_k=21,
                        vector_index=hotpotqa_slice_index)


@pytest.fixture
def isolated_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_peers_are_registered_with_the_index_they_read():
    specs = registered_retrievers()
    assert list(specs)[:3] == ["vector", "bm25", "query_fusion"]
    assert [specs[name].needs_index for name in ("vector", "bm25", "query_fusion")] == ["vector", None, "vector"]
    assert all(spec.description for spec in specs.values())


def test_registering(isolated_registry):
    @register_retriever("fake_peer", "a test entry", needs_index="vector")
    def factory(ctx: BenchContext) -> BaseRetriever:
        return ctx.vector_index.as_retriever(similarity_top_k=ctx.top_k)

    assert get_retriever_spec("fake_peer") == RetrieverSpec("fake_peer", "a test entry", factory, "vector")
    with pytest.raises(ValueError, match="already registered"):
        register_retriever("fake_peer", "again")(factory)
    with pytest.raises(ValueError, match="needs_index"):
        register_retriever("other", "x", needs_index="graph")
    with pytest.raises(ValueError, match="retriever name"):
        register_retriever("has space", "x")
    register_retriever("fake_peer+graph", "a flow composed over another retriever")(factory)
    with pytest.raises(ValueError, match="unknown retriever 'nope'; registered: vector, bm25"):
        get_retriever_spec("nope")


def test_context_nodes_are_the_shared_index_passages(slice_context, hotpotqa_slice_index):
    stored = {node.node_id for node in all_passages(hotpotqa_slice_index)}
    assert {node.node_id for node in slice_context.nodes} == stored
    assert slice_context.vector_index_seconds == 0.0  # given, not built


def test_peers_return_top_k_passages(slice_context, hotpotqa_slice):
    questions, docs = hotpotqa_slice
    titles = {d.metadata["title"] for d in docs}
    for name in ("vector", "bm25", "query_fusion"):
        retriever = get_retriever_spec(name).factory(slice_context)
        nodes = retriever.retrieve(questions[0]["question"])
        assert len(nodes) == 21, name
        assert set(passage_ids(nodes)) <= titles, name


def test_query_fusion_with_one_query_is_the_vector_ranking_and_calls_no_llm(slice_context, hotpotqa_slice):
    questions, _ = hotpotqa_slice
    vector = get_retriever_spec("vector").factory(slice_context)
    fusion = get_retriever_spec("query_fusion").factory(slice_context)  # its LLM raises if it is ever called
    for question in questions[:3]:
        expected = [n.node.node_id for n in vector.retrieve(question["question"])]
        assert [n.node.node_id for n in fusion.retrieve(question["question"])] == expected


def test_bm25_finds_a_title_named_in_the_question(slice_context, hotpotqa_slice):
    questions, _ = hotpotqa_slice
    bm25 = get_retriever_spec("bm25").factory(slice_context)
    question = next(q for q in questions if any(t in q["question"] for t, _ in q["supporting_facts"]))
    named = next(t for t, _ in question["supporting_facts"] if t in question["question"])
    assert named in passage_ids(bm25.retrieve(question["question"]))[:5]


def test_composed_flows_run_over_the_run_graph_index(slice_context, hotpotqa_slice_index, monkeypatch):
    from llama_index_mhop.components.confidence_loop import ConfidenceLoopRetriever
    from llama_index_mhop.components.rrf_fusion import RRFFusionRetriever

    class GraphStandIn:
        """Stands in for the run's HippoGraphIndex: records the retrievers asked of it."""

        def __init__(self):
            self.asked = []

        def as_retriever(self, **kwargs):
            self.asked.append(kwargs)
            return hotpotqa_slice_index.as_retriever(similarity_top_k=kwargs["similarity_top_k"])

    graph = GraphStandIn()
    monkeypatch.setitem(slice_context.__dict__, "graph_index", graph)  # the run's graph index, as if already built
    rrf = get_retriever_spec("rrf_fusion+hippo").factory(slice_context)
    loop = get_retriever_spec("confidence_loop+hippo").factory(slice_context)
    assert isinstance(rrf, RRFFusionRetriever) and isinstance(loop, ConfidenceLoopRetriever)
    assert len(loop.retrieve("Who directed the film shot in Leland?")) == 21
    # rrf_fusion's base is deep enough for the query's own ranking; the loop asks a retriever for round 1's k
    # (and for round 2's, when round 2 runs).
    assert graph.asked[:2] == [{"similarity_top_k": 21, "lm": None}, {"similarity_top_k": 23, "lm": None}]
    assert graph.asked[2:] in ([], [{"similarity_top_k": 15, "lm": None}])
