"""Seed 000: ``PerspectiveQueryTransform`` writes 4-5 perspectives of a query; ``RRFFusionRetriever`` searches them
iteratively and fuses the rankings by Reciprocal Rank Fusion.

For each of 3 iterations: write 4-5 perspectives (informed by the previous iteration's top passages), retrieve
k=7 passages each, fuse every list so far, keep the top 30 and hand the top 10 on as context; the last fusion
returns the top 21 (every number a setting of :class:`RRFFusionConfig`). The fusion never dilutes the query's own
ranking (:func:`~llama_index_mhop.rules.ranking.anchored_fusion`): bridge hops follow their source passages, the
other perspective passages follow in RRF order. When the LM fails, the perspectives come from
:func:`~llama_index_mhop.rules.perspectives.heuristic_perspectives`.

Without an LM, over a vector retriever of a Chroma index or a graph retriever, the run embeds only the query: its
ranking is searched once by its vector, and each perspective is the passage of an entity the angles name
(:func:`~llama_index_mhop.rules.perspectives.lookup_perspectives`), found by title in the collection's table
(:mod:`~llama_index_mhop.stores.passage_table`) and ordered by closeness to the query moved towards the passage
that named it. Over any other retriever, or with a transform whose ``step`` is its own, the LLM-free perspectives
are text, embedded and searched.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import dspy
from llama_index.core import VectorStoreIndex
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.indices.query.query_transform.base import BaseQueryTransform
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..lm.programs import ProgramSource, load_program, save_program, step_prompts, update_step_prompts
from ..lm.steps import (
    DEFAULT_LM_TIMEOUT,
    FallbackCounter,
    LMStep,
    QueryPerspectiveGenerator,
    current_lm,
    resolve_lm,
)
from ..rules.parsing import LMOutputError
from ..rules.perspectives import (
    MAX_PERSPECTIVES,
    ContextPassage,
    heuristic_perspectives,
    lookup_perspectives,
    repair_perspectives,
)
from ..rules.ranking import DEFAULT_RRF_K, PassageView, anchored_fusion, link_passages, reciprocal_rank_fusion
from ..rules.text import check_query
from ..stores.passage_table import FoundQuestion, PassageSearch, closest, towards
from .base import (
    AsyncSearchBatch,
    BatchSearcher,
    Call,
    Flow,
    FlowModule,
    LMRequest,
    NodesAndTrace,
    ProgramRetriever,
    Search,
    SearchBatch,
    StepRecord,
    StepRunner,
    again_if_table_moved,
    still_in_table,
)

__all__ = ["PERSPECTIVES_STEP", "PerspectiveModule", "PerspectiveQueryTransform", "RRFFusionConfig", "RRFFusionModule",
           "RRFFusionRetriever", "to_context"]

logger = logging.getLogger(__name__)

class RRFFusionConfig(BaseModel):
    """Every number of :class:`~llama_index_mhop.components.rrf_fusion.RRFFusionRetriever`, with seed 000's value
    as default; pydantic's ``ValidationError`` (a ``ValueError``) names a field out of range.

    Attributes:
        num_iterations: rounds of perspective retrieval (3).
        perspective_top_k: passages kept per perspective (k=7).
        carry_over_top_n: passages kept by RRF after each iteration (30).
        context_top_n: top passages given to the next iteration's perspectives (10; at most ``carry_over_top_n``).
        similarity_top_k: passages returned after the final fusion (21), and the depth of the query's own ranking.
        rrf_k: the RRF constant of the perspective lists (60).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_iterations: int = Field(3, ge=1)
    perspective_top_k: int = Field(7, ge=1)
    carry_over_top_n: int = Field(30, ge=1)
    context_top_n: int = Field(10, ge=0)
    similarity_top_k: int = Field(21, ge=1)
    rrf_k: int = Field(DEFAULT_RRF_K, ge=0)

    @model_validator(mode="after")
    def _context_within_pool(self) -> RRFFusionConfig:
        if self.context_top_n > self.carry_over_top_n:
            raise ValueError(f"context_top_n must be at most carry_over_top_n ({self.carry_over_top_n}), "
                             f"got {self.context_top_n}")
        return self

    @property
    def search_depth(self) -> int:
        """How many results each search must return: the deeper of a perspective's list and the query's own."""
        return max(self.perspective_top_k, self.similarity_top_k)


ContextLike = str | BaseNode | NodeWithScore | ContextPassage
PERSPECTIVES_STEP = "perspectives"
_CONTEXT_CHARS = 600  # per passage shown to the LM: enough for the first sentences, where bridges are named


def to_context(passages: Sequence[ContextLike]) -> list[ContextPassage]:
    """Normalise context passages (strings, nodes, scored nodes) to :class:`ContextPassage`."""
    out = []
    for passage in passages:
        if isinstance(passage, ContextPassage):
            out.append(passage)
        elif isinstance(passage, str):
            out.append(ContextPassage("", passage))
        else:
            node = passage.node if isinstance(passage, NodeWithScore) else passage
            out.append(ContextPassage(str(node.metadata.get("title", "")), node.get_content()))
    return out


class PerspectiveModule(dspy.Module):
    """The DSPy program behind the transform: one ``QueryPerspectiveGenerator`` predictor."""

    def __init__(self) -> None:
        super().__init__()
        self.generate = dspy.Predict(QueryPerspectiveGenerator)

    def forward(self, query: str, context: str = "") -> dspy.Prediction:
        return self.generate(query=query, context=context)

    async def aforward(self, query: str, context: str = "") -> dspy.Prediction:
        return await self.generate.acall(query=query, context=context)


def perspectives_request(program: PerspectiveModule, query: str,
                         context: Sequence[ContextLike] = ()) -> LMRequest[list[str]]:
    """The perspective step of ``program`` on a checked ``query`` and the context passages found so far."""
    passages = to_context(context)

    def parse(prediction: dspy.Prediction) -> list[str]:
        try:
            return repair_perspectives(prediction.perspectives, query, passages)
        except ValueError as exc:
            raise LMOutputError(str(exc)) from exc
    shown = [{"title": p.title, "text": p.text[:_CONTEXT_CHARS]} for p in passages]
    inputs = {"query": query, "context": json.dumps(shown, ensure_ascii=False) if shown else ""}
    return LMRequest(LMStep(PERSPECTIVES_STEP, program, parse, lambda: heuristic_perspectives(query, passages)), inputs)


class PerspectiveQueryTransform(BaseQueryTransform):
    """Rewrite a query into 4-5 perspectives: entity, relationship, temporal, comparison and context focused.

    The transformed ``QueryBundle`` keeps the original ``query_str`` and carries the perspectives in
    ``custom_embedding_strs``, so it works inside LlamaIndex's ``TransformQueryEngine`` (a vector retriever then
    searches with the mean embedding of the perspectives). Context passages found so far can be passed in
    ``metadata={"context": [...]}`` or to :meth:`generate`; they supply the bridge entities of the next hop.

    Args:
        lm: a DSPy LM for the perspectives; ``llm``: any LlamaIndex LLM instead. Neither: ``dspy.settings.lm``
            when a query runs, and the LLM-free strategy when that is unset too.
        include_original: also keep the original query in ``custom_embedding_strs`` (when not already there).
        timeout: seconds an LM call may take before it is abandoned for the LLM-free strategy.
        program: a compiled :class:`PerspectiveModule`, or the path of one saved by :meth:`save_program`.
    """

    def __init__(self, lm: dspy.BaseLM | None = None, llm: Any = None, include_original: bool = True,
                 timeout: float = DEFAULT_LM_TIMEOUT, program: ProgramSource | None = None) -> None:
        self._include_original = include_original
        self.fallback_counts = FallbackCounter()
        self.runner = StepRunner(resolve_lm(lm, llm), self.fallback_counts, timeout)
        self.program = PerspectiveModule()
        if program is not None:
            load_program(self.program, program)

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the transform's DSPy program (its predictor's instructions and demos) as DSPy's JSON."""
        return save_program(self.program, path)

    def _get_prompts(self) -> dict[str, Any]:
        """The perspective step's instructions (its DSPy signature's, as the predictor holds them)."""
        return step_prompts({PERSPECTIVES_STEP: self.program.generate})

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        update_step_prompts({PERSPECTIVES_STEP: self.program.generate}, prompts_dict)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    def step(self, query: str, context: Sequence[ContextLike] = (),
             program: PerspectiveModule | None = None) -> LMRequest[list[str]]:
        """The LM step that writes the perspectives of ``query`` given the ``context`` passages found so far, run by
        ``program`` (default this transform's; a compiled flow passes its own copy)."""
        return perspectives_request(program or self.program, check_query(query), context)

    def generate(self, query: str, context: Sequence[ContextLike] = ()) -> list[str]:
        """4-5 distinct perspective queries for ``query`` given the ``context`` passages found so far."""
        return self.runner.run(self.step(query, context), StepRecord())

    async def agenerate(self, query: str, context: Sequence[ContextLike] = ()) -> list[str]:
        """The async twin of :meth:`generate`."""
        return await self.runner.arun(self.step(query, context), StepRecord())

    def _bundle(self, query_bundle: QueryBundle, perspectives: list[str]) -> QueryBundle:
        strs = list(perspectives)
        if self._include_original and query_bundle.query_str not in strs:
            strs.append(query_bundle.query_str)
        return QueryBundle(query_str=query_bundle.query_str, custom_embedding_strs=strs)

    def _run(self, query_bundle: QueryBundle, metadata: dict) -> QueryBundle:
        return self._bundle(query_bundle, self.generate(query_bundle.query_str, metadata.get("context", ())))

    async def arun(self, query_bundle_or_str: QueryBundle | str, metadata: dict | None = None) -> QueryBundle:
        """The async twin of ``run``."""
        bundle = QueryBundle(query_bundle_or_str) if isinstance(query_bundle_or_str, str) else query_bundle_or_str
        perspectives = await self.agenerate(bundle.query_str, (metadata or {}).get("context", ()))
        return self._bundle(bundle, perspectives)


class RRFFusionModule(FlowModule):
    """Seed 000's flow as a DSPy program: its predictor is the perspective transform's (``perspectives``).

    ``forward(query)`` returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace``. The numbers are
    the retriever's settings (:class:`RRFFusionConfig`).
    """

    searched_by = "RRFFusionRetriever"

    def __init__(self, transform: PerspectiveQueryTransform, search: SearchBatch | None = None,
                 asearch: AsyncSearchBatch | None = None, config: RRFFusionConfig | None = None,
                 passages: Callable[[], PassageSearch | None] = lambda: None) -> None:
        super().__init__(transform.runner, search, asearch, source=transform)
        self.perspectives = transform.program
        self.config = config or RRFFusionConfig()
        self.passages = passages  # a function: DSPy's copies of the module share it

    def flow(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        """The seed's loop, top to bottom; yields LM steps and searches (see :mod:`~llama_index_mhop.components.base`)."""
        return (yield from again_if_table_moved(partial(self._run, query, record)))

    def _run(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        nodes: dict[str, NodeWithScore] = {}
        views: dict[str, PassageView] = {}  # each passage read once a query, whichever lists it is in
        lists: list[list[str]] = []
        pool: list[str] = []
        trace: dict[str, Any] = {"query": query, "iterations": []}
        settings = self.config
        anchor: list[str] = []
        links: dict[str, list[str]] = {}
        # Without an LM, over Chroma, and with the transform's own step: the query's vector is all a run embeds.
        own_step = type(self._parts.source).step is PerspectiveQueryTransform.step
        passages = self.passages() if own_step and current_lm(self._parts.runner.lm) is None else None
        if passages is not None:
            found: FoundQuestion = yield Call(lambda: passages.question(query, settings.search_depth),
                                              lambda: passages.aquestion(query, settings.search_depth))
            views.update({found.table.ids[r]: found.table.view(r) for r in found.rows})
            pool = anchor = self._anchor(found.nodes(), nodes, trace)
        for iteration in range(settings.num_iterations):
            if passages is not None:
                record(PERSPECTIVES_STEP, "llm_free", "no LM configured")
                perspectives, rankings = self._lookups(query, found, anchor, links, pool, nodes, views)
            else:
                # Perspectives informed by the previous iteration's top passages, k passages for each. Through
                # the transform's step, so a subclass of the transform shapes the flow's perspectives too.
                context = [nodes[node_id] for node_id in pool[: settings.context_top_n]]
                perspectives = yield self._parts.source.step(query, context, program=self.perspectives)
                if iteration == 0:
                    # The query's own ranking, the anchor no perspective may dilute: one batch with the first
                    # perspectives (which see no passage yet).
                    anchor_results, *results = yield Search([query, *perspectives], settings.search_depth)
                    anchor = self._anchor(anchor_results, nodes, trace)
                else:
                    results = yield Search(perspectives, settings.perspective_top_k)
                # perspective order: ties resolve alike
                rankings = [self._ranking(r, nodes, settings.perspective_top_k) for r in results]
            # Fuse every list so far; carry the top passages over, the best of them as the next context.
            lists.extend(rankings)
            pool, links = self._fuse(query, anchor, lists, nodes, views, settings.carry_over_top_n)
            trace["iterations"].append({
                "perspectives": perspectives, "rankings": rankings, "links": links, "pool": pool,
                "context": pool[: settings.context_top_n], "step": record.steps[PERSPECTIVES_STEP],
                "reason": record.reasons[PERSPECTIVES_STEP]})
        fused, _ = self._fuse(query, anchor, lists, nodes, views, settings.similarity_top_k)
        # Reciprocal-rank scores: monotone in the fused order.
        trace["final"] = [[node_id, 1.0 / rank] for rank, node_id in enumerate(fused, start=1)]
        results = [NodeWithScore(node=nodes[node_id].node, score=score) for node_id, score in trace["final"]]
        if passages is not None:  # the table's passages still held as it read them
            results = yield from still_in_table(passages, found.table, results, trace)
        return results, trace

    def _lookups(self, query: str, found: FoundQuestion, anchor: list[str], links: dict[str, list[str]],
                 pool: list[str], nodes: dict[str, NodeWithScore],
                 views: dict[str, PassageView]) -> tuple[list[str], list[list[str]]]:
        """An iteration's LLM-free perspectives, none embedded: the query's own top ``perspective_top_k``, then the
        passages of the names :func:`~llama_index_mhop.rules.perspectives.lookup_perspectives` gives for the pool's
        top passages and the bridge chain's last passage, each name's closest first to the query moved towards
        that passage (up to five lists)."""
        table, top_k = found.table, self.config.perspective_top_k
        chain = self._chain(anchor, links)
        shown = [ContextPassage(views[i].title, views[i].text) for i in pool[: self.config.context_top_n]]
        aim = towards(found.vector, table.vectors[table.row_of[chain[-1]]])
        perspectives, rankings = ["query"], [anchor[:top_k]]
        for angle, name in lookup_perspectives(query, shown, views[chain[-1]], [views[i].subject for i in chain]):
            rows = closest(table, [r for r in table.about(name) if table.ids[r] not in chain], aim)
            if rows and len(rankings) < MAX_PERSPECTIVES:
                perspectives.append(f"{angle}: {name}")
                rankings.append([table.ids[r] for r in rows[:top_k]])
        for node_id in {i for ranking in rankings for i in ranking} - nodes.keys():
            nodes[node_id] = NodeWithScore(node=table.node(table.row_of[node_id]))
            views[node_id] = table.view(table.row_of[node_id])
        return perspectives, rankings

    @staticmethod
    def _chain(anchor: list[str], links: dict[str, list[str]]) -> list[str]:
        """The bridge chain followed from the query's top passage: it, then each passage linked from the last."""
        chain = anchor[:1]
        while links.get(chain[-1]) and links[chain[-1]][0] not in chain:
            chain.append(links[chain[-1]][0])
        return chain

    def _anchor(self, results: list[NodeWithScore], nodes: dict[str, NodeWithScore], trace: dict) -> list[str]:
        trace["anchor"] = self._ranking(results, nodes, self.config.similarity_top_k)
        return list(dict.fromkeys(trace["anchor"]))

    def _fuse(self, query: str, anchor: list[str], lists: list[list[str]], nodes: dict[str, NodeWithScore],
              views: dict[str, PassageView], top_n: int) -> tuple[list[str], dict[str, list[str]]]:
        """The anchored fusion: the query's ranking, the bridge hops after their sources, then RRF."""
        by_rrf = [node_id for node_id, _ in reciprocal_rank_fusion(lists, k=self.config.rrf_k)]
        links: dict[str, list[str]] = {}
        if anchor:
            for node_id in [*anchor, *by_rrf]:
                if node_id not in views:
                    views[node_id] = PassageView.from_node(nodes[node_id].node)
            links = link_passages(query, [views[anchor[0]]], [views[i] for i in by_rrf])
        return anchored_fusion(anchor, links, by_rrf, top_n=top_n), links

    @staticmethod
    def _ranking(results: list[NodeWithScore], nodes: dict[str, NodeWithScore], top_k: int) -> list[str]:
        """The ids of the first ``top_k`` results, each result noted in ``nodes`` (the first seen kept)."""
        for result in results[:top_k]:
            nodes.setdefault(result.node.node_id, result)
        return [result.node.node_id for result in results[:top_k]]


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

    ``last_trace`` holds the query's own ranking (``anchor``) and each iteration's perspectives, rankings, bridge
    links, pool, context and ``step`` (``"lm"``, ``"llm_free"`` or ``"fallback"``, with the ``reason``).
    """

    config_type = RRFFusionConfig
    config: RRFFusionConfig

    def __init__(self, base_retriever: BaseRetriever,
                 query_transform: PerspectiveQueryTransform | None = None, **kwargs: Any) -> None:
        self.base_retriever = base_retriever
        self.query_transform = query_transform  # the default one is built once the LM is resolved
        self._searcher = BatchSearcher(lambda k: self.base_retriever)  # one depth: the flow cuts each list
        super().__init__(**kwargs)

    @classmethod
    def from_defaults(cls, index: VectorStoreIndex, config: RRFFusionConfig | None = None,
                      **kwargs: Any) -> RRFFusionRetriever:
        """Fuse perspectives over a retriever of ``index`` (a Chroma-backed ``VectorStoreIndex``, a
        ``HippoGraphIndex``...), deep enough for the query's own ranking (:attr:`RRFFusionConfig.search_depth`)."""
        settings = {name: kwargs.pop(name) for name in RRFFusionConfig.model_fields if name in kwargs}
        config = cls.settings(config, settings)
        return cls(index.as_retriever(similarity_top_k=config.search_depth), config=config, **kwargs)

    def _build_program(self) -> RRFFusionModule:
        self.query_transform = self.query_transform or PerspectiveQueryTransform(lm=self.lm)
        return RRFFusionModule(self.query_transform, self._searcher.search, self._searcher.asearch, self.config,
                               lambda: PassageSearch.of(self.base_retriever))

    def _step_predictors(self) -> dict[str, Any]:
        return {PERSPECTIVES_STEP: self.program.perspectives.generate}

    @property
    def fallback_counts(self) -> Any:
        """How often the perspective LM step fell back to the LLM-free strategy."""
        return self.query_transform.fallback_counts
