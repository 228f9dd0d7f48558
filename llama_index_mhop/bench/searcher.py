"""The seed's ``Searcher`` on LlamaIndex parts (seed 002): an optional ``BaseQueryTransform`` whose
``custom_embedding_strs`` become sub-queries, one or more retrievers asked every sub-query, pooling by node id
(best score kept), an optional ``BaseNodePostprocessor`` reranker, then the first ``k``. Scores of different
retrievers are not on one scale: without a reranker a hybrid pool is ordered by raw best score, as in the seed.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..rules.text import check_query

__all__ = ["Searcher", "pool_rankings"]


def _check_k(k: object) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    return k


def _score(node: NodeWithScore) -> float:
    return float("-inf") if node.score is None else float(node.score)


def pool_rankings(rankings: Sequence[Sequence[NodeWithScore]]) -> list[NodeWithScore]:
    """Pool rankings into new ``NodeWithScore`` objects, one per node id with its best score. One ranking keeps its
    order; several are merged by best score, highest first, ties and missing scores in first-seen order."""
    best: dict[str, NodeWithScore] = {}
    for ranking in rankings:
        for candidate in ranking:
            node_id = candidate.node.node_id
            held = best.get(node_id)
            if held is None:
                best[node_id] = NodeWithScore(node=candidate.node, score=candidate.score)
            elif _score(candidate) > _score(held):
                held.score = candidate.score
    pooled = list(best.values())  # dicts keep insertion order: first-seen order
    if len(rankings) > 1:
        pooled.sort(key=_score, reverse=True)  # stable: ties stay in first-seen order
    return pooled


class Searcher:
    """Query transform + built retrievers (several: hybrid search) + pooling + reranker (seed 002's Searcher);
    ``include_original_query`` also searches the query when the transform's sub-queries omit it."""

    def __init__(
        self,
        retrievers: BaseRetriever | Sequence[BaseRetriever],
        query_transform: BaseQueryTransform | None = None,
        reranker: BaseNodePostprocessor | None = None,
        include_original_query: bool = False,
    ) -> None:
        retriever_list = [retrievers] if isinstance(retrievers, BaseRetriever) else list(retrievers)
        if not retriever_list:
            raise ValueError("a Searcher needs at least one retriever")
        for retriever in retriever_list:
            if not isinstance(retriever, BaseRetriever):
                raise ValueError(f"retrievers must be LlamaIndex BaseRetriever objects, got {type(retriever).__name__}")
        if query_transform is not None and not isinstance(query_transform, BaseQueryTransform):
            raise ValueError(f"query_transform must be a BaseQueryTransform, got {type(query_transform).__name__}")
        if reranker is not None and not isinstance(reranker, BaseNodePostprocessor):
            raise ValueError(f"reranker must be a BaseNodePostprocessor, got {type(reranker).__name__}")
        self.retrievers = retriever_list
        self.query_transform = query_transform
        self.reranker = reranker
        self.include_original_query = include_original_query

    def _bundles(self, query: str, transformed: QueryBundle | None) -> list[QueryBundle]:
        if transformed is None:
            return [QueryBundle(query_str=query)]
        texts = [s for s in (transformed.custom_embedding_strs or [transformed.query_str]) if s and s.strip()]
        if self.include_original_query and query not in texts:
            texts.insert(0, query)
        texts = list(dict.fromkeys(texts)) or [query]
        # Each sub-query is a query of its own: BM25 reads query_str, dense retrievers embed it.
        return [QueryBundle(query_str=text, custom_embedding_strs=[text]) for text in texts]

    def sub_queries(self, query: str) -> list[QueryBundle]:
        """The bundles searched for ``query`` (just the query itself without a transform)."""
        query = check_query(query)
        transformed = self.query_transform.run(query) if self.query_transform is not None else None
        return self._bundles(query, transformed)

    async def asub_queries(self, query: str) -> list[QueryBundle]:
        """Async :meth:`sub_queries`: an ``arun`` coroutine when the transform has one, else a worker thread."""
        query = check_query(query)
        transformed = None
        if self.query_transform is not None:
            arun = getattr(self.query_transform, "arun", None)
            if arun is not None and inspect.iscoroutinefunction(arun):
                transformed = await arun(query)
            else:  # BaseQueryTransform.run is synchronous and may call an LLM: keep it off the event loop
                transformed = await asyncio.to_thread(self.query_transform.run, query)
        return self._bundles(query, transformed)

    def search(self, query: str, k: int) -> list[NodeWithScore]:
        """The best ``k`` nodes for ``query``; ValueError for an empty query or ``k`` < 1."""
        k = _check_k(k)
        bundles = self.sub_queries(query)
        rankings = [retriever.retrieve(bundle) for bundle in bundles for retriever in self.retrievers]
        pooled = pool_rankings(rankings)
        if self.reranker is not None:
            pooled = self.reranker.postprocess_nodes(pooled, query_bundle=QueryBundle(query_str=query))
        return pooled[:k]

    async def asearch(self, query: str, k: int) -> list[NodeWithScore]:
        """Async :meth:`search`: all (sub-query, retriever) retrievals run concurrently."""
        k = _check_k(k)
        bundles = await self.asub_queries(query)
        rankings = await asyncio.gather(
            *(retriever.aretrieve(bundle) for bundle in bundles for retriever in self.retrievers)
        )
        pooled = pool_rankings(rankings)
        if self.reranker is not None:
            pooled = await self.reranker.apostprocess_nodes(pooled, query_bundle=QueryBundle(query_str=query))
        return pooled[:k]

    def __repr__(self) -> str:
        parts = [type(r).__name__ for r in self.retrievers]
        transform = type(self.query_transform).__name__ if self.query_transform else None
        reranker = type(self.reranker).__name__ if self.reranker else None
        return f"Searcher(retrievers={parts}, query_transform={transform}, reranker={reranker})"
