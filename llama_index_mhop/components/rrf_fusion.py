"""``RRFFusionRetriever``: iterative perspective retrieval fused by Reciprocal Rank Fusion (seed 000).

For each of 3 iterations: write 4-5 perspectives of the query (informed by the previous iteration's top
passages), retrieve k=7 passages per perspective, fuse every list accumulated so far, keep the top 30, and hand
the top 10 to the next iteration as context. After the last iteration the same fusion returns the top 21. Every
number is a setting (:class:`~llama_index_mhop.components.rrf_config.RRFFusionConfig`) with the seed's value as
default.

The fusion never dilutes the query's own ranking (:func:`~llama_index_mhop.rules.fusion.anchored_fusion`): the query's
ranking (searched once, ``similarity_top_k`` deep) is the anchor; the passage its top hit leads to through a
bridge entity (:func:`~llama_index_mhop.rules.bridges.link_passages`, chosen among the perspectives' passages in RRF
order) comes right after it, hop after hop; the other perspective passages follow the anchor in RRF order.
"""

from __future__ import annotations

import logging
from typing import Any

from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore

from ..rules.bridges import link_passages
from .flow import AsyncSearchBatch, Flow, Search, SearchBatch, StepRecord
from .flow_module import FlowModule, NodesAndTrace, Shared
from ..rules.fusion import anchored_fusion, reciprocal_rank_fusion
from ..rules.passage_views import PassageView
from ..stores.search import BatchSearcher
from .query_transforms import PERSPECTIVES_STEP, PerspectiveQueryTransform
from .base import ProgramRetriever
from .rrf_config import RRFFusionConfig

__all__ = ["RRFFusionConfig", "RRFFusionModule", "RRFFusionRetriever"]

logger = logging.getLogger(__name__)


class RRFFusionModule(FlowModule[PerspectiveQueryTransform]):
    """Seed 000's flow as a DSPy program: its predictor is the perspective transform's (``perspectives``).

    ``forward(query)`` returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace``. The numbers are
    the retriever's settings (:class:`~llama_index_mhop.components.rrf_config.RRFFusionConfig`).
    """

    searched_by = "RRFFusionRetriever"

    def __init__(
        self,
        transform: PerspectiveQueryTransform,
        search: SearchBatch | None = None,
        asearch: AsyncSearchBatch | None = None,
        config: RRFFusionConfig | None = None,
    ) -> None:
        super().__init__(Shared(transform, transform.runner, search, asearch))
        self.perspectives = transform.program
        self.config = config or RRFFusionConfig()

    def flow(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        """The seed's loop, top to bottom; yields LM steps and searches (see :mod:`llama_index_mhop.components.flow`)."""
        nodes: dict[str, NodeWithScore] = {}
        views: dict[str, PassageView] = {}  # each passage read once a query, whichever lists it is in
        lists: list[list[str]] = []
        context: list[NodeWithScore] = []
        trace: dict[str, Any] = {"query": query, "iterations": []}
        settings = self.config
        anchor: list[str] = []
        for iteration in range(settings.num_iterations):
            # Perspectives informed by the previous iteration's top passages, k passages for each.
            perspectives = yield self._shared.parts.step(query, context, program=self.perspectives)
            if iteration == 0:
                # The query's own ranking, the anchor no perspective may dilute: one batch with the first
                # perspectives (which see no passage yet).
                anchor_results, *results = yield Search([query, *perspectives], settings.search_depth)
                anchor = self._anchor(anchor_results, nodes, trace)
            else:
                results = yield Search(perspectives, settings.perspective_top_k)
            rankings = [self._ranking(r, nodes) for r in results]  # perspective order: ties resolve alike
            # Fuse every list so far; carry the top passages over, the best of them as the next context.
            lists.extend(rankings)
            pool, links = self._fuse(query, anchor, lists, nodes, views, settings.carry_over_top_n)
            context = [nodes[node_id] for node_id in pool[: settings.context_top_n]]
            trace["iterations"].append(
                {"perspectives": perspectives, "rankings": rankings, "links": links, "pool": pool,
                 "context": pool[: settings.context_top_n], "step": record.steps[PERSPECTIVES_STEP],
                 "reason": record.reasons[PERSPECTIVES_STEP]}
            )
        fused, _ = self._fuse(query, anchor, lists, nodes, views, settings.similarity_top_k)
        # Reciprocal-rank scores: monotone in the fused order.
        trace["final"] = [[node_id, 1.0 / rank] for rank, node_id in enumerate(fused, start=1)]
        return [NodeWithScore(node=nodes[node_id].node, score=score) for node_id, score in trace["final"]], trace

    def _anchor(self, results: list[NodeWithScore], nodes: dict[str, NodeWithScore], trace: dict) -> list[str]:
        anchor = []
        for result in results[: self.config.similarity_top_k]:
            nodes.setdefault(result.node.node_id, result)
            anchor.append(result.node.node_id)
        trace["anchor"] = anchor
        return list(dict.fromkeys(anchor))

    def _fuse(
        self, query: str, anchor: list[str], lists: list[list[str]], nodes: dict[str, NodeWithScore],
        views: dict[str, PassageView], top_n: int,
    ) -> tuple[list[str], dict[str, list[str]]]:
        """The anchored fusion: the query's ranking, the bridge hops after their sources, then RRF."""
        by_rrf = [node_id for node_id, _ in reciprocal_rank_fusion(lists, k=self.config.rrf_k)]
        links: dict[str, list[str]] = {}
        if anchor:
            for node_id in [*anchor, *by_rrf]:
                if node_id not in views:
                    views[node_id] = PassageView.from_node(nodes[node_id].node)
            links = link_passages(query, [views[anchor[0]]], [views[i] for i in by_rrf])
        return anchored_fusion(anchor, links, by_rrf, top_n=top_n), links

    def _ranking(self, results: list[NodeWithScore], nodes: dict[str, NodeWithScore]) -> list[str]:
        ranking: list[str] = []
        for result in results[: self.config.perspective_top_k]:
            nodes.setdefault(result.node.node_id, result)
            ranking.append(result.node.node_id)
        return ranking


class RRFFusionRetriever(ProgramRetriever):
    """Iterative multi-perspective retrieval with Reciprocal Rank Fusion (seed 000).

    Args:
        base_retriever: any LlamaIndex retriever (a vector index's, or a graph's such as
            ``HippoGraphIndex.as_retriever()``); each perspective's ranking is its first ``perspective_top_k``
            results and the query's own ranking its first ``similarity_top_k`` (so it should return that many).
        query_transform: writes the perspectives; default a :class:`PerspectiveQueryTransform` using the LM.
        **kwargs: ``config`` or its settings one by one (:class:`RRFFusionConfig`: ``num_iterations=3``,
            ``perspective_top_k=7``, ``carry_over_top_n=30``, ``context_top_n=10``, ``similarity_top_k=21``,
            ``rrf_k=60``); ``lm``, ``llm``, ``program`` (a compiled :class:`RRFFusionModule` or its saved JSON),
            ``callback_manager`` and ``verbose``, as for every
            :class:`~llama_index_mhop.components.base.ProgramRetriever`.

    After each query, ``last_trace`` holds the query's own ranking (``anchor``), the perspectives, rankings,
    bridge links, carried-over pool and context of every iteration (node ids) and whether its perspectives came
    from the LM (``step``: ``"lm"``, ``"llm_free"`` or ``"fallback"``, with the ``reason``), for inspection and
    ``mhop query --explain``. The DSPy program is :attr:`program`: its predictor runs in the caller's DSPy
    context, so traces and optimizers see each call.
    """

    config_type = RRFFusionConfig
    config: RRFFusionConfig

    def __init__(
        self, base_retriever: BaseRetriever, query_transform: PerspectiveQueryTransform | None = None, **kwargs: Any
    ) -> None:
        self.base_retriever = base_retriever
        self.query_transform = query_transform  # the default one is built once the LM is resolved
        self._searcher = BatchSearcher(lambda k: self.base_retriever)  # one depth: the flow cuts each list
        super().__init__(**kwargs)

    @classmethod
    def from_defaults(
        cls, index: VectorStoreIndex, config: RRFFusionConfig | None = None, **kwargs: Any
    ) -> RRFFusionRetriever:
        """Fuse perspectives over a retriever of ``index`` (a Chroma-backed ``VectorStoreIndex``, a
        ``HippoGraphIndex``...), deep enough for the query's own ranking (:attr:`RRFFusionConfig.search_depth`)."""
        settings = {name: kwargs.pop(name) for name in RRFFusionConfig.model_fields if name in kwargs}
        config = cls.settings(config, settings)
        return cls(index.as_retriever(similarity_top_k=config.search_depth), config=config, **kwargs)

    def _build_program(self) -> RRFFusionModule:
        self.query_transform = self.query_transform or PerspectiveQueryTransform(lm=self.lm)
        return RRFFusionModule(self.query_transform, self._searcher.search, self._searcher.asearch, self.config)

    def _step_predictors(self) -> dict[str, Any]:
        return {PERSPECTIVES_STEP: self.program.perspectives.generate}

    @property
    def fallback_counts(self) -> Any:
        """How often the perspective LM step fell back to the LLM-free strategy."""
        return self.query_transform.fallback_counts
