"""Searcher: sub-queries from a query transform, pooling across retrievers, reranking, sync and async alike."""

from __future__ import annotations

import pytest
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from llama_index_mhop.bench.registry import Searcher, pool_rankings


def _node(node_id: str, score: float | None) -> NodeWithScore:
    return NodeWithScore(node=TextNode(id_=node_id, text=f"text of {node_id}"), score=score)


class FixedRetriever(BaseRetriever):
    """Answers every query with the same ranking, recording the query strings it was asked."""

    def __init__(self, ranking: list[tuple[str, float | None]]) -> None:
        self.ranking = ranking
        self.asked: list[str] = []
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        self.asked.append(query_bundle.query_str)
        return [_node(i, s) for i, s in self.ranking]


class PerQueryRetriever(BaseRetriever):
    """A ranking per query string."""

    def __init__(self, rankings: dict[str, list[tuple[str, float]]]) -> None:
        self.rankings = rankings
        super().__init__()

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [_node(i, s) for i, s in self.rankings.get(query_bundle.query_str, [])]


class SplitTransform(BaseQueryTransform):
    """Sub-queries: the words of the query joined in pairs (no LLM)."""

    def _get_prompts(self) -> dict:
        return {}

    def _update_prompts(self, prompts: dict) -> None:
        pass

    def _run(self, query_bundle: QueryBundle, metadata: dict) -> QueryBundle:
        words = query_bundle.query_str.split()
        return QueryBundle(query_str=query_bundle.query_str,
                           custom_embedding_strs=[" ".join(words[i:i + 2]) for i in range(0, len(words), 2)])


RERANK_QUERIES: list[str] = []


class ReverseReranker(BaseNodePostprocessor):
    """Reverses the pool and records the query it was given."""

    def _postprocess_nodes(self, nodes, query_bundle=None):
        RERANK_QUERIES.append(query_bundle.query_str)
        return list(reversed(nodes))


def test_single_retriever_keeps_its_order_dedupes_and_cuts_at_k():
    retriever = FixedRetriever([("a", 0.2), ("b", 0.9), ("a", 0.5), ("c", None), ("d", 0.1)])
    searcher = Searcher(retriever)
    assert [n.node.node_id for n in searcher.search("q", 3)] == ["a", "b", "c"]
    assert [n.node.node_id for n in searcher.search("q", 10)] == ["a", "b", "c", "d"]
    assert retriever.asked == ["q", "q"]
    # (LlamaIndex's retrieve() already drops repeated nodes; the pool itself keeps the first position and the
    # best score.)
    pooled = pool_rankings([[_node("a", 0.2), _node("b", 0.9), _node("a", 0.5)]])
    assert [(n.node.node_id, n.score) for n in pooled] == [("a", 0.5), ("b", 0.9)]


def test_hybrid_pool_keeps_the_best_score_and_sorts_by_it():
    dense = FixedRetriever([("a", 0.9), ("b", 0.5), ("c", 0.3)])
    sparse = FixedRetriever([("c", 0.95), ("d", 0.5), ("a", 0.1)])
    result = Searcher([dense, sparse]).search("q", 10)
    # c 0.95, a 0.9, then b and d tie at 0.5 and keep first-seen order (b from the first retriever).
    assert [(n.node.node_id, n.score) for n in result] == [("c", 0.95), ("a", 0.9), ("b", 0.5), ("d", 0.5)]
    assert [n.node.node_id for n in Searcher([dense, sparse]).search("q", 2)] == ["c", "a"]


def test_pooling_never_mutates_the_retrievers_results():
    held = [_node("a", 0.1)]
    better = [_node("a", 0.7)]
    pooled = pool_rankings([held, better])
    assert pooled[0].score == 0.7 and held[0].score == 0.1 and pooled[0] is not held[0]
    assert pool_rankings([]) == []


def test_query_transform_sub_queries_each_go_to_every_retriever():
    first = FixedRetriever([("a", 0.5)])
    second = FixedRetriever([("b", 0.4)])
    searcher = Searcher([first, second], query_transform=SplitTransform())
    assert [b.query_str for b in searcher.sub_queries("who founded the observatory")] == [
        "who founded", "the observatory"]
    searcher.search("who founded the observatory", 5)
    assert first.asked == second.asked == ["who founded", "the observatory"]

    with_original = Searcher(first, query_transform=SplitTransform(), include_original_query=True)
    assert [b.query_str for b in with_original.sub_queries("who founded the observatory")] == [
        "who founded the observatory", "who founded", "the observatory"]


def test_sub_query_rankings_are_pooled():
    retriever = PerQueryRetriever({"alpha beta": [("x", 0.3), ("y", 0.2)], "gamma": [("y", 0.8), ("z", 0.1)]})
    result = Searcher(retriever, query_transform=SplitTransform()).search("alpha beta gamma", 5)
    assert [(n.node.node_id, n.score) for n in result] == [("y", 0.8), ("x", 0.3), ("z", 0.1)]


def test_reranker_sees_the_original_query_and_the_cut_comes_after_it():
    RERANK_QUERIES.clear()
    searcher = Searcher(FixedRetriever([("a", 0.9), ("b", 0.5), ("c", 0.1)]),
                        query_transform=SplitTransform(), reranker=ReverseReranker())
    assert [n.node.node_id for n in searcher.search("one two three", 2)] == ["c", "b"]
    assert RERANK_QUERIES == ["one two three"]


async def test_asearch_matches_search():
    RERANK_QUERIES.clear()
    dense = FixedRetriever([("a", 0.9), ("b", 0.5), ("c", 0.3)])
    sparse = FixedRetriever([("c", 0.95), ("d", 0.5)])
    searcher = Searcher([dense, sparse], query_transform=SplitTransform(), reranker=ReverseReranker())
    sync = [(n.node.node_id, n.score) for n in searcher.search("alpha beta gamma", 3)]
    asynchronous = [(n.node.node_id, n.score) for n in await searcher.asearch("alpha beta gamma", 3)]
    assert sync == asynchronous == [("d", 0.5), ("b", 0.5), ("a", 0.9)]
    assert RERANK_QUERIES == ["alpha beta gamma", "alpha beta gamma"]


@pytest.mark.parametrize("query, error", [("", ValueError), (None, TypeError)])
def test_bad_queries(query, error):
    searcher = Searcher(FixedRetriever([("a", 1.0)]))
    with pytest.raises(error, match="query"):
        searcher.search(query, 2)


async def test_bad_k_and_components():
    searcher = Searcher(FixedRetriever([("a", 1.0)]))
    for k in (0, -3, 1.5, True):
        with pytest.raises(ValueError, match="k must be"):
            searcher.search("q", k)
        with pytest.raises(ValueError, match="k must be"):
            await searcher.asearch("q", k)
    with pytest.raises(ValueError, match="at least one retriever"):
        Searcher([])
    with pytest.raises(ValueError, match="BaseRetriever"):
        Searcher(["not a retriever"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="BaseQueryTransform"):
        Searcher(FixedRetriever([]), query_transform=lambda q: q)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="BaseNodePostprocessor"):
        Searcher(FixedRetriever([]), reranker=object())  # type: ignore[arg-type]
