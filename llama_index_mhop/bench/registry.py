"""The one registry of named retrievers (``mhop query``, ``mhop demo``, ``mhop bench``; seed 002), and the
compositions they are built of. A factory takes a :class:`RetrieverContext` and returns a retriever::

    @register_retriever("my_retriever", "one line on what it does", needs_index="vector")
    def _my_retriever(ctx: RetrieverContext) -> BaseRetriever: ..."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.llms.types import CompletionResponse, CompletionResponseGen, LLMMetadata
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.llms import CustomLLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..rules.text import check_query

__all__ = ["BENCH_EXTRA", "SHARED_INDEXES", "PostprocessedRetriever", "RetrieverContext", "RetrieverFactory",
           "RetrieverSpec", "Searcher", "get_retriever_spec", "pool_rankings", "register_retriever",
           "registered_retrievers"]

#: The error of a benchmark-only dependency that is not installed.
BENCH_EXTRA = "{what} needs the bench extra: pip install 'llama-index-mhop[bench]'"
#: Shared indexes a factory can declare it reads.
SHARED_INDEXES = ("vector",)


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
    """The seed's Searcher: an optional query transform's sub-queries asked of every retriever, pooled by node id
    (best score kept), optionally reranked, then the first ``k``."""

    def __init__(self, retrievers: BaseRetriever | Sequence[BaseRetriever],
                 query_transform: BaseQueryTransform | None = None, reranker: BaseNodePostprocessor | None = None,
                 include_original_query: bool = False) -> None:
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
        pooled = pool_rankings([retriever.retrieve(bundle) for bundle in self.sub_queries(query)
                                for retriever in self.retrievers])
        if self.reranker is not None:
            pooled = self.reranker.postprocess_nodes(pooled, query_bundle=QueryBundle(query_str=query))
        return pooled[:k]

    async def asearch(self, query: str, k: int) -> list[NodeWithScore]:
        """Async :meth:`search`: all (sub-query, retriever) retrievals run concurrently."""
        k = _check_k(k)
        bundles = await self.asub_queries(query)
        pooled = pool_rankings(await asyncio.gather(*(retriever.aretrieve(bundle) for bundle in bundles
                                                      for retriever in self.retrievers)))
        if self.reranker is not None:
            pooled = await self.reranker.apostprocess_nodes(pooled, query_bundle=QueryBundle(query_str=query))
        return pooled[:k]

    def __repr__(self) -> str:
        parts = [type(r).__name__ for r in self.retrievers]
        transform = type(self.query_transform).__name__ if self.query_transform else None
        reranker = type(self.reranker).__name__ if self.reranker else None
        return f"Searcher(retrievers={parts}, query_transform={transform}, reranker={reranker})"


class PostprocessedRetriever(BaseRetriever):
    """``retriever``'s nodes passed through ``postprocessors`` in order (what ``RetrieverQueryEngine`` retrieves)."""

    def __init__(self, retriever: BaseRetriever, postprocessors: Sequence[BaseNodePostprocessor]) -> None:
        super().__init__()
        self.retriever = retriever
        self.postprocessors = list(postprocessors)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = self.retriever.retrieve(query_bundle)
        for postprocessor in self.postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = await self.retriever.aretrieve(query_bundle)
        for postprocessor in self.postprocessors:
            nodes = await postprocessor.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes


class _NoLLM(CustomLLM):
    """An LLM that refuses to be called: proves a component runs without one."""

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(model_name="no-llm")

    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        raise RuntimeError("this retriever is configured to run without an LLM, yet an LLM call was made")

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise RuntimeError("this retriever is configured to run without an LLM, yet an LLM call was made")


class RetrieverContext(Protocol):
    """What a factory reads: the indexes and nodes (each made on first use), the depth and the LM."""

    top_k: int
    lm: Any
    program: str | None

    @property
    def vector_index(self) -> Any: ...
    @property
    def nodes(self) -> list[Any]: ...
    @property
    def graph_index(self) -> Any: ...


RetrieverFactory = Callable[[RetrieverContext], BaseRetriever | Searcher]


@dataclass(frozen=True)
class RetrieverSpec:
    """A registered retriever: its name, a one-line description, its factory and the shared index it reads."""

    name: str
    description: str
    factory: RetrieverFactory
    needs_index: str | None = None


_REGISTRY: dict[str, RetrieverSpec] = {}


def register_retriever(name: str, description: str,
                       needs_index: str | None = None) -> Callable[[RetrieverFactory], RetrieverFactory]:
    """Decorator registering ``factory(ctx) -> BaseRetriever`` under ``name`` (letters, digits, ``_``, ``-``, and
    ``+`` for a flow composed over another retriever); ``needs_index="vector"`` when it reads the shared index."""
    if not name or not all(ch.isalnum() or ch in "_-+" for ch in name):
        raise ValueError(f"retriever name must be letters, digits, '_', '-' or '+', got {name!r}")
    if needs_index is not None and needs_index not in SHARED_INDEXES:
        raise ValueError(f"needs_index must be None or one of {SHARED_INDEXES}, got {needs_index!r}")
    def decorate(factory: RetrieverFactory) -> RetrieverFactory:
        if name in _REGISTRY:
            raise ValueError(f"a retriever named {name!r} is already registered")
        _REGISTRY[name] = RetrieverSpec(name, description, factory, needs_index)
        return factory
    return decorate


def registered_retrievers() -> dict[str, RetrieverSpec]:
    """Every registered retriever by name, in registration order."""
    return dict(_REGISTRY)


def get_retriever_spec(name: str) -> RetrieverSpec:
    """The registered retriever ``name``; ValueError listing the registered ones when there is none."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(_REGISTRY) or "none"
        raise ValueError(f"unknown retriever {name!r}; registered: {known}") from None


# Peers: LlamaIndex's own retrievers.
@register_retriever("vector", "dense top-k over the shared Chroma index (LlamaIndex VectorIndexRetriever)",
                    needs_index="vector")
def _vector(ctx: RetrieverContext) -> BaseRetriever:
    return ctx.vector_index.as_retriever(similarity_top_k=ctx.top_k)


@register_retriever("bm25", "BM25 over the same passages (llama-index-retrievers-bm25, English stemming)")
def _bm25(ctx: RetrieverContext) -> BaseRetriever:
    try:
        from llama_index.retrievers.bm25 import BM25Retriever
    except ImportError as exc:
        raise ImportError(BENCH_EXTRA.format(what="the bm25 retriever")) from exc
    return BM25Retriever.from_defaults(nodes=ctx.nodes, similarity_top_k=ctx.top_k)


@register_retriever("query_fusion", "LlamaIndex QueryFusionRetriever: reciprocal rerank of the vector retriever, "
                    "no generated queries (num_queries=1, no LLM)", needs_index="vector")
def _query_fusion(ctx: RetrieverContext) -> BaseRetriever:
    from llama_index.core.retrievers import QueryFusionRetriever
    # With num_queries=1 no query is generated; QueryFusionRetriever still resolves an LLM when built, so hand it
    # one that raises if it were ever called.
    return QueryFusionRetriever([ctx.vector_index.as_retriever(similarity_top_k=ctx.top_k)], llm=_NoLLM(),
                                mode="reciprocal_rerank", num_queries=1, use_async=False, similarity_top_k=ctx.top_k)


# The project's retrievers: each imports its module inside the factory, so a broken one fails only its own run.
@register_retriever("rrf_fusion", "3 rounds of 4-5 perspective queries, k=7 each, fused by RRF (seed 000)",
                    needs_index="vector")
def _rrf_fusion(ctx: RetrieverContext) -> BaseRetriever:
    from ..components.rrf_fusion import RRFFusionRetriever
    return RRFFusionRetriever.from_defaults(ctx.vector_index, similarity_top_k=ctx.top_k, lm=ctx.lm,
                                            program=ctx.program)


@register_retriever("confidence_loop", "entity-chain queries (k=23), confidence check, gap queries (k=15), "
                    "listwise rerank (seed 001)", needs_index="vector")
def _confidence_loop(ctx: RetrieverContext) -> BaseRetriever:
    from ..components.confidence_loop import ConfidenceLoopRetriever
    return ConfidenceLoopRetriever.from_defaults(ctx.vector_index, similarity_top_k=ctx.top_k, lm=ctx.lm,
                                                 program=ctx.program)


@register_retriever("hippo_graph", "HippoRAG 2 memory: facts, recognition memory, Personalized PageRank over an "
                    "entity/fact/passage graph built at indexing time over the shared index's passages (seeds 003, "
                    "004)", needs_index="vector")
def _hippo_graph(ctx: RetrieverContext) -> BaseRetriever:
    return ctx.graph_index.as_retriever(similarity_top_k=ctx.top_k, lm=ctx.lm, program=ctx.program)


@register_retriever("rrf_fusion+hippo", "rrf_fusion's flow with hippo_graph as the base retriever of every query "
                    "(the run's graph index, built once)", needs_index="vector")
def _rrf_fusion_hippo(ctx: RetrieverContext) -> BaseRetriever:
    from ..components.rrf_fusion import RRFFusionConfig, RRFFusionRetriever
    config = RRFFusionConfig(similarity_top_k=ctx.top_k)
    base = ctx.graph_index.as_retriever(similarity_top_k=config.search_depth, lm=ctx.lm)
    return RRFFusionRetriever(base_retriever=base, config=config, lm=ctx.lm)


@register_retriever("confidence_loop+hippo", "confidence_loop's flow with hippo_graph as the base retriever of "
                    "every query (the run's graph index, built once)")
def _confidence_loop_hippo(ctx: RetrieverContext) -> BaseRetriever:
    from ..components.confidence_loop import ConfidenceLoopRetriever
    return ConfidenceLoopRetriever.from_defaults(ctx.graph_index, similarity_top_k=ctx.top_k, lm=ctx.lm,
                                                 retriever_kwargs={"lm": ctx.lm})


@register_retriever("vector_fact_filter", "vector, then DSPyFactFilter on its passages: those stating the facts "
                    "the query needs first (LLM-free without an LM)", needs_index="vector")
def _vector_fact_filter(ctx: RetrieverContext) -> BaseRetriever:
    from ..components.fact_filter import DSPyFactFilter
    return PostprocessedRetriever(ctx.vector_index.as_retriever(similarity_top_k=ctx.top_k),
                                  [DSPyFactFilter(lm=ctx.lm)])
