"""Seed 001 (HoVer's multi-hop pipeline with confidence-based self-verification) over any LlamaIndex retriever:

1. Round 1: ``EntityAndGapAnalyzer`` reads the entity chains of the query and writes 2-3 search queries
   aimed at different links of the chain; the query itself is issued beside them (the original query's
   ranking is the strongest single signal). Each query retrieves ``round1_k`` (23) passages.
2. The passages are de-duplicated, first-seen order kept.
3. ``ConfidenceEvaluator`` judges whether they suffice: a confidence from 0 to 100 and the missing pieces.
4. Round 2, only when the confidence is below ``confidence_threshold`` (80): ``TargetedQueryGenerator`` writes
   1-2 queries for the gaps, each retrieving ``round2_k`` (15) more passages; de-duplicated again.
5. ``ListwiseDocumentReranker`` ranks all passages together; the top ``similarity_top_k`` (21) are returned.

Every step is a DSPy predictor (:mod:`~llama_index_mhop.lm.steps`) with an LLM-free strategy
(:mod:`~llama_index_mhop.rules.confidence`): the default without an LM, the fallback when the LM fails. Without an
LM, over a vector index of Chroma or a graph, only the query is embedded: the link and gap queries name entities,
each finding its entities' own passages by title in the collection's table
(:mod:`~llama_index_mhop.stores.passage_table`), closest first to the query moved towards the passage that named
them; a gap's, then where its bridge leads, hop after hop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import dspy
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore
from pydantic import BaseModel, ConfigDict, Field

from ..adapters.llama_index import retriever_verbose
from ..lm.steps import (
    DEFAULT_LM_TIMEOUT,
    ConfidenceEvaluator,
    EntityAndGapAnalyzer,
    FallbackCounter,
    ListwiseDocumentReranker,
    LMStep,
    TargetedQueryGenerator,
    current_lm,
)
from ..rules.confidence import (
    DEFAULT_BRIDGE_PASSAGES,
    DEFAULT_BRIDGE_PENALTY,
    DEFAULT_CONFIDENCE_TOP_N,
    DEFAULT_RERANK_RRF_K,
    ConfidenceAssessment,
    Gap,
    GapKind,
    RankedPassage,
    analyze_query,
    assess_confidence,
    listwise_rerank,
    numbered_passages,
    targeted_queries,
)
from ..rules.parsing import parse_confidence, parse_queries, parse_ranking, parse_string_list
from ..rules.ranking import PassageView, reciprocal_rank_fusion
from ..rules.text import escape_controls, normalize
from ..stores.passage_table import FoundQuestion, PassageSearch, PassageTable, towards
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

__all__ = ["ConfidenceLoopConfig", "ConfidenceLoopModule", "ConfidenceLoopRetriever"]

logger = logging.getLogger(__name__)

class ConfidenceLoopConfig(BaseModel):
    """Every setting of :class:`ConfidenceLoopRetriever`; one out of range raises pydantic's ``ValidationError``.

    Attributes:
        similarity_top_k: passages returned (21).
        round1_k: passages per round-1 query (23).
        round2_k: passages per round-2 query (15).
        confidence_threshold: round 2 runs when the confidence is below it (80; 0 never runs round 2).
        max_round1_queries: generated round-1 queries at most (3); the query itself is issued beside them.
        max_round2_queries: targeted round-2 queries at most (2).
        include_original_query: also search with the query itself in round 1 (recommended).
        original_query_weight: weight of the original query's ranking in the round-1 order and the listwise
            relevance (1: plain RRF; the LLM-free rerank keeps the query's own ranking as its anchor anyway).
        rrf_k: the rank constant of the LLM-free listwise relevance.
        confidence_top_n: passages the LLM-free confidence looks at.
        bridge_passages: top passages searched for bridge entities.
        bridge_penalty: LLM-free confidence points taken off per open bridge.
        lm_passages: passages shown to the LM confidence evaluator.
        lm_passage_chars: characters of each passage shown to the LM (confidence evaluator and reranker).
        lm_timeout: seconds before an LM call is abandoned for the LLM-free strategy.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    similarity_top_k: int = Field(21, ge=1)
    round1_k: int = Field(23, ge=1)
    round2_k: int = Field(15, ge=1)
    confidence_threshold: float = Field(80, ge=0, le=100, strict=False)
    max_round1_queries: int = Field(3, ge=1)
    max_round2_queries: int = Field(2, ge=0)
    include_original_query: bool = True
    original_query_weight: float = Field(1.0, ge=0, strict=False)
    rrf_k: int = Field(DEFAULT_RERANK_RRF_K, ge=0)
    confidence_top_n: int = Field(DEFAULT_CONFIDENCE_TOP_N, ge=1)
    bridge_passages: int = Field(DEFAULT_BRIDGE_PASSAGES, ge=0)
    bridge_penalty: float = Field(DEFAULT_BRIDGE_PENALTY, ge=0, strict=False)
    lm_passages: int = Field(10, ge=1)
    lm_passage_chars: int = Field(300, ge=1)
    lm_timeout: float = Field(DEFAULT_LM_TIMEOUT, gt=0, strict=False)


STEP_ANALYZER = "entity_and_gap_analyzer"
STEP_CONFIDENCE = "confidence_evaluator"
STEP_TARGETED = "targeted_query_generator"
STEP_RERANK = "listwise_document_reranker"

@dataclass
class _Pool:
    """The de-duplicated passages retrieved so far and every query's ranking over them."""

    nodes: list[NodeWithScore] = field(default_factory=list)
    views: list[PassageView] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    rankings: list[tuple[list[int], float]] = field(default_factory=list)

    def add(self, results: list[NodeWithScore], weight: float, table: PassageTable | None = None) -> int:
        ranking, added = [], 0
        for result in results:
            node_id = result.node.node_id
            if node_id not in self.index:
                self.index[node_id] = len(self.nodes)
                self.nodes.append(result)
                self.views.append(table.view(table.row_of[node_id]) if table else PassageView.from_node(result.node))
                added += 1
            ranking.append(self.index[node_id])
        self.rankings.append((ranking, weight))
        return added


class ConfidenceLoopModule(FlowModule):
    """Seed 001's confidence loop: ``forward(query)`` returns a ``dspy.Prediction`` with ``nodes``, ``node_ids``,
    ``titles``, ``passages`` and ``trace``.

    Args:
        config: the loop's settings.
        search: ``(queries, k) -> one node list per query``, the blocking search (``forward`` needs it).
        asearch: the awaitable search (``aforward`` needs it).
        runner: the LM, fallback counter and timeout of the LM steps (LLM-free when None).
        verbose: log each round's queries at INFO.
    """

    def __init__(self, config: ConfidenceLoopConfig | None = None, search: SearchBatch | None = None,
                 asearch: AsyncSearchBatch | None = None, runner: StepRunner | None = None,
                 verbose: bool = False, passages: Callable[[], PassageSearch | None] = lambda: None) -> None:
        super().__init__(runner or StepRunner(lm=None, counter=FallbackCounter()), search, asearch)
        self.analyzer = dspy.Predict(EntityAndGapAnalyzer)
        self.evaluator = dspy.Predict(ConfidenceEvaluator)
        self.query_generator = dspy.Predict(TargetedQueryGenerator)
        self.reranker = dspy.Predict(ListwiseDocumentReranker)
        self.config = config or ConfidenceLoopConfig()
        self.verbose = verbose
        self.passages = passages  # the LLM-free run's search (a function: DSPy's copies share it)

    def flow(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        """The loop, top to bottom; yields LM steps and searches to its driver (see :mod:`~llama_index_mhop.components.base`)."""
        return (yield from again_if_table_moved(partial(self._run, query, record)))

    def _run(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        config = self.config
        trace = _new_trace(query, record)
        passages, found = self.passages() if current_lm(self._parts.runner.lm) is None else None, None
        # 1. Round 1: the entity chains and link queries, the query itself beside them. Without an LM, over Chroma:
        # the query searched by its vector, each link query its entity's passages by title (only the query embedded).
        if passages is not None and config.include_original_query:
            found = yield Call(lambda: passages.question(query, config.round1_k),
                               lambda: passages.aquestion(query, config.round1_k))
            analysis = analyze_query(query, config.max_round1_queries)
            record(STEP_ANALYZER, "llm_free", "no LM configured")
            chains, named = analysis.entity_chains, analysis.entities[: config.max_round1_queries]
            round1 = [(query, config.original_query_weight), *((name, 1.0) for name in named)]
            results = [found.nodes(), *(found.looked_up([name], found.vector, config.round1_k) for name in named)]
        else:
            chains, generated = yield self._analyze(query)
            round1 = self._round1_queries(query, generated)
            results = yield Search([q for q, _ in round1], config.round1_k)
        trace["entity_chains"], issued, table = chains, [q for q, _ in round1], found.table if found else None
        # 2. De-duplicate, first-seen order kept; every query's ranking is kept for the fusion.
        pool = _Pool()
        added = [pool.add(r, weight, table) for r, (_, weight) in zip(results, round1, strict=True)]
        self._record_round(trace, 1, issued, config.round1_k, results, added)
        # 3. Confidence over the round-1 passages, the original query's ranking first.
        views = [pool.views[i] for i in self._round1_order(pool)]
        assessment = yield self._evaluate(query, views, issued)
        trace["confidence"] = assessment.confidence
        trace["gaps"] = [g.as_dict() for g in assessment.gaps]
        trace["round2"] = assessment.confidence < config.confidence_threshold and config.max_round2_queries > 0
        # 4. Round 2 for the gaps, only when the confidence is low.
        if trace["round2"]:
            if found is None:
                round2 = yield self._target(query, assessment, views, issued)
                results = yield Search(round2, config.round2_k)
            else:
                record(STEP_TARGETED, "llm_free", "no LM configured")
                round2, results = self._gap_lookups(found, assessment, pool, issued)
            added = [pool.add(r, 1.0, table) for r in results]
            self._record_round(trace, 2, round2, config.round2_k, results, added)
        # 5. Rank every passage together and keep the top similarity_top_k.
        free_ranking = listwise_rerank(query, pool.views, pool.rankings, rrf_k=config.rrf_k)
        ranking = yield self._rerank(query, pool, [r.index for r in free_ranking])
        results = self._finish(pool, ranking, free_ranking, trace)
        if found is not None:  # the table's passages still held as it read them
            results = yield from still_in_table(passages, found.table, results, trace)
        return results, trace

    def _gap_lookups(self, found: FoundQuestion, assessment: ConfidenceAssessment, pool: _Pool,
                     issued: list[str]) -> tuple[list[str], list[list[NodeWithScore]]]:
        """The LLM-free round 2: each gap naming an entity no query named yet finds its entities' passages."""
        looked = {normalize(name) for name in issued}
        queries, results = [], []
        for gap in [g for g in assessment.gaps if {normalize(e) for e in g.entities} - looked]:
            source = next((found.table.row_of[v.id] for v in pool.views if v.subject == gap.source), None)
            aim = found.vector if source is None else towards(found.vector, found.table.vectors[source])
            queries.append(", ".join(gap.entities))
            results.append(found.looked_up(list(gap.entities), aim, self.config.round2_k, issued[0]))
            if len(queries) == self.config.max_round2_queries:
                break
        return queries, results

    # -- the LM steps: inputs, parser and LLM-free strategy ---------------------------------------------------

    def _analyze(self, query: str) -> LMRequest[tuple[list[str], list[str]]]:
        limit = self.config.max_round1_queries

        def parse(prediction: dspy.Prediction) -> tuple[list[str], list[str]]:
            queries = parse_queries(prediction.get("queries"), 1, limit, exclude=[query])
            return parse_string_list(prediction.get("entity_chains") or ""), queries

        def free() -> tuple[list[str], list[str]]:
            analysis = analyze_query(query, limit)
            return analysis.entity_chains, analysis.queries
        return LMRequest(LMStep(STEP_ANALYZER, self.analyzer, parse, free), {"query": query})

    def _free_assessment(self, query: str, views: list[PassageView], issued: list[str]) -> ConfidenceAssessment:
        config = self.config
        return assess_confidence(query, views, issued, top_n=config.confidence_top_n,
                                 bridge_passages=config.bridge_passages, bridge_penalty=config.bridge_penalty)

    def _evaluate(self, query: str, views: list[PassageView], issued: list[str]) -> LMRequest[ConfidenceAssessment]:
        def parse(prediction: dspy.Prediction) -> ConfidenceAssessment:
            confidence = parse_confidence(prediction.get("confidence"))
            missing = parse_string_list(prediction.get("missing_information") or "", max_items=5)
            return ConfidenceAssessment(confidence, [Gap(GapKind.FACT, text) for text in missing])
        shown = numbered_passages(views[: self.config.lm_passages], self.config.lm_passage_chars)
        step = LMStep(STEP_CONFIDENCE, self.evaluator, parse, lambda: self._free_assessment(query, views, issued))
        return LMRequest(step, {"query": query, "passages": shown})

    def _target(self, query: str, assessment: ConfidenceAssessment, views: list[PassageView],
                issued: list[str]) -> LMRequest[list[str]]:
        limit = self.config.max_round2_queries

        def free() -> list[str]:
            gaps: list[Gap | str] = list(assessment.gaps)
            if not any(g.query for g in assessment.gaps):
                # The gaps came from an LM as plain text: add the LLM-free gaps so a query is always found.
                gaps.extend(self._free_assessment(query, views, issued).gaps)
            return targeted_queries(query, gaps, issued, limit)

        def parse(prediction: dspy.Prediction) -> list[str]:
            return parse_queries(prediction.get("queries"), 1, limit, exclude=issued)
        inputs = {"query": query, "missing_information": "\n".join(g.text for g in assessment.gaps) or "none",
                  "issued_queries": "\n".join(issued)}
        return LMRequest(LMStep(STEP_TARGETED, self.query_generator, parse, free), inputs)

    def _rerank(self, query: str, pool: _Pool, prior: list[int]) -> LMRequest[list[int]]:
        def parse(prediction: dspy.Prediction) -> list[int]:
            return parse_ranking(prediction.get("ranking"), len(pool.views), prior=prior)
        inputs = {"query": query, "passages": numbered_passages(pool.views, self.config.lm_passage_chars)}
        return LMRequest(LMStep(STEP_RERANK, self.reranker, parse, lambda: prior), inputs)

    # -- the bookkeeping between the steps --------------------------------------------------------------------

    def _round1_queries(self, query: str, generated: list[str]) -> list[tuple[str, float]]:
        original = self.config.include_original_query
        queries = [(query, self.config.original_query_weight)] if original else []
        seen = {query.lower()} if original else set()
        for q in generated:
            if q.lower() not in seen:
                seen.add(q.lower())
                queries.append((q, 1.0))
        return queries

    def _round1_order(self, pool: _Pool) -> list[int]:
        """What the confidence step reads: the original query's ranking first (the strongest single ranking),
        then the other round-1 passages by weighted Reciprocal Rank Fusion of the round-1 rankings."""
        head = list(dict.fromkeys(pool.rankings[0][0])) if self.config.include_original_query else []
        fused = reciprocal_rank_fusion([ranking for ranking, _ in pool.rankings], k=self.config.rrf_k,
                                       weights=[w for _, w in pool.rankings])
        taken = set(head)
        return head + [index for index, _ in fused if index not in taken]

    def _record_round(self, trace: dict[str, Any], number: int, queries: list[str], k: int,
                      results: list[list[NodeWithScore]], added: list[int]) -> None:
        trace["rounds"].append({"round": number, "k": k, "queries": queries,
                                "retrieved": [len(r) for r in results], "new_passages": added})
        if self.verbose:
            logger.info("round %d: %s", number, escape_controls(queries))  # queries an LM wrote

    def _finish(self, pool: _Pool, ranking: list[int], free_ranking: list[RankedPassage],
                trace: dict[str, Any]) -> list[NodeWithScore]:
        parts = {r.index: r for r in free_ranking}
        out: list[NodeWithScore] = []
        for position, index in enumerate(ranking[: self.config.similarity_top_k]):
            # Reciprocal-rank scores: monotone, and the same whichever step (LM or LLM-free) ranked.
            out.append(NodeWithScore(node=pool.nodes[index].node, score=1.0 / (position + 1)))
            part = parts[index]
            trace["ranking"].append({
                "id": pool.views[index].id, "title": pool.views[index].title,
                "first_stage_score": pool.nodes[index].score, "relevance": round(part.relevance, 6),
                "linked_from": None if part.linked_from is None else pool.views[part.linked_from].id})
        trace["pool_size"] = len(pool.nodes)
        trace["pool_ids"] = [view.id for view in pool.views]
        trace["llm_free_order"] = [r.index for r in free_ranking]
        trace["fallback_counts"] = self._parts.runner.counter.as_dict()
        return out

    def _node_fields(self, nodes: list[NodeWithScore]) -> dict[str, Any]:
        return {"titles": [str(n.node.metadata.get("title", "")) for n in nodes],
                "passages": [n.node.get_content() for n in nodes]}


def _new_trace(query: str, record: StepRecord) -> dict[str, Any]:
    return {"query": query, "rounds": [], "entity_chains": [], "confidence": None, "gaps": [], "round2": False,
            "steps": record.steps, "step_reasons": record.reasons, "fallbacks": record.fallbacks, "pool_size": 0,
            "pool_ids": [], "llm_free_order": [], "ranking": []}


class ConfidenceLoopRetriever(ProgramRetriever):
    """Seed 001's confidence loop as a LlamaIndex retriever over any base retriever (each LM step falls back to its
    LLM-free strategy, counted in :attr:`fallback_counts`).

    Retrieval depth: give either ``base_retriever`` (called once per query, its results cut to the round's
    ``k``; it should return at least ``round1_k`` results) or ``retriever_factory`` (``k -> retriever``,
    called once per distinct ``k``, so every search asks for exactly ``k``). :meth:`from_defaults` builds the
    factory of a ``VectorStoreIndex``.

    :attr:`last_trace` (JSON; the latest query to finish) holds the ``rounds`` (``k``, ``queries``, ``retrieved``,
    ``new_passages``), ``entity_chains``, ``confidence``, ``gaps``, ``round2``, each step's outcome and reason
    (``steps``, ``step_reasons``, ``fallbacks``), the pool (``pool_ids``, ``llm_free_order``) and the ``ranking``
    (``id``, ``title``, ``first_stage_score``, ``relevance``, ``linked_from``). Nodes are scored ``1 / rank``.
    LM answers are parsed by :mod:`~llama_index_mhop.rules.parsing` (a confidence outside 0-100 is rejected).

    Args:
        base_retriever: the retriever that every query goes to.
        retriever_factory: builds the retriever for a given ``k`` (instead of ``base_retriever``).
        **kwargs: ``config`` or its settings one by one (:class:`ConfidenceLoopConfig`: ``similarity_top_k=21``,
            ``round1_k=23``, ...); ``lm``, ``llm``, ``program`` (a compiled :class:`ConfidenceLoopModule` or its
            saved JSON), ``callback_manager`` and ``verbose`` (log each round's queries at INFO), as for every
            :class:`~llama_index_mhop.components.base.ProgramRetriever`.

    Raises:
        ValueError: neither or both of ``base_retriever`` and ``retriever_factory``, or a bad setting.
    """

    config_type = ConfidenceLoopConfig
    config: ConfidenceLoopConfig

    def __init__(self, base_retriever: BaseRetriever | None = None, *,
                 retriever_factory: Callable[[int], BaseRetriever] | None = None, **kwargs: Any) -> None:
        if (base_retriever is None) == (retriever_factory is None):
            raise ValueError("give exactly one of base_retriever and retriever_factory")
        self._base_retriever = base_retriever
        self._retriever_factory = retriever_factory
        self._retrievers: dict[int, BaseRetriever] = {}
        self._searcher = BatchSearcher(self._retriever_for, keep=lambda results, k: list(results)[:k])
        self.fallback_counts = FallbackCounter()
        super().__init__(**kwargs)

    @classmethod
    def from_defaults(cls, index: Any, retriever_kwargs: dict[str, Any] | None = None,
                      **kwargs: Any) -> ConfidenceLoopRetriever:
        """A confidence loop over an index (e.g. a Chroma ``VectorStoreIndex`` from
        :func:`~llama_index_mhop.stores.vector_index.build_vector_index`): each search is
        ``index.as_retriever(similarity_top_k=k, **retriever_kwargs)``.

        Args:
            index: any LlamaIndex index with ``as_retriever``.
            retriever_kwargs: extra arguments of ``as_retriever`` (e.g. metadata filters).
            **kwargs: any other :class:`ConfidenceLoopRetriever` argument (``similarity_top_k=21``, ``lm``...).
        """
        if not hasattr(index, "as_retriever"):
            raise ValueError(f"index must be a LlamaIndex index with as_retriever(), "
                             f"got {type(index).__name__}")
        extra = dict(retriever_kwargs or {})
        return cls(retriever_factory=lambda k: index.as_retriever(similarity_top_k=k, **extra), **kwargs)

    def _build_program(self) -> ConfidenceLoopModule:
        runner = StepRunner(self.lm, self.fallback_counts, self.config.lm_timeout)
        return ConfidenceLoopModule(self.config, self._searcher.search, self._searcher.asearch, runner,
                                    retriever_verbose(self),
                                    lambda: PassageSearch.of(self._retriever_for(self.config.round1_k)))

    def _step_predictors(self) -> dict[str, Any]:
        program = self.program
        return {STEP_ANALYZER: program.analyzer, STEP_CONFIDENCE: program.evaluator,
                STEP_TARGETED: program.query_generator, STEP_RERANK: program.reranker}

    def _retriever_for(self, k: int) -> BaseRetriever:
        if self._retriever_factory is None:
            return self._base_retriever  # type: ignore[return-value]
        if k not in self._retrievers:
            self._retrievers[k] = self._retriever_factory(k)
        return self._retrievers[k]

