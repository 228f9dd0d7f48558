"""The confidence loop as a DSPy program: four predictors and the seed-001 flow that calls them.

:class:`ConfidenceLoopModule` holds the predictors as attributes (so optimizers and ``save``/``load`` see them)
and runs the flow in :meth:`ConfidenceLoopModule.flow`, read top to bottom; ``forward`` and ``aforward`` drive
that one flow with blocking or awaited calls (:class:`~llama_index_mhop.components.flow_module.FlowModule`). Searches go
through the search callables the owning :class:`~llama_index_mhop.components.confidence_loop.ConfidenceLoopRetriever`
hands in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
from llama_index.core.schema import NodeWithScore

from ..rules.confidence import (
    ConfidenceAssessment,
    Gap,
    GapKind,
    analyze_query,
    assess_confidence,
    targeted_queries,
)
from .flow import AsyncSearchBatch, Flow, LMRequest, Search, SearchBatch, StepRecord, StepRunner
from .flow_module import FlowModule, NodesAndTrace, Shared
from ..rules.ranking import reciprocal_rank_fusion
from ..rules.confidence import RankedPassage, listwise_rerank
from ..lm.steps import FallbackCounter, LMStep
from ..rules.parsing import parse_confidence, parse_queries, parse_ranking, parse_string_list
from ..rules.ranking import PassageView
from ..lm.signatures import (
    ConfidenceEvaluator,
    EntityAndGapAnalyzer,
    ListwiseDocumentReranker,
    TargetedQueryGenerator,
)
from ..rules.text import escape_controls
from .confidence_config import ConfidenceLoopConfig

__all__ = ["STEP_ANALYZER", "STEP_CONFIDENCE", "STEP_RERANK", "STEP_TARGETED", "ConfidenceLoopModule"]

logger = logging.getLogger(__name__)

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

    def add(self, results: list[NodeWithScore], weight: float) -> int:
        ranking, added = [], 0
        for result in results:
            node_id = result.node.node_id
            if node_id not in self.index:
                self.index[node_id] = len(self.nodes)
                self.nodes.append(result)
                self.views.append(PassageView.from_node(result.node))
                added += 1
            ranking.append(self.index[node_id])
        self.rankings.append((ranking, weight))
        return added


def _passages_text(views: Sequence[PassageView], chars: int) -> str:
    lines = []
    for i, view in enumerate(views):
        body = " ".join(view.text.split())
        body = body if len(body) <= chars else body[:chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"[{i}] {view.title + ': ' if view.title else ''}{body}")
    return "\n".join(lines)


class ConfidenceLoopModule(FlowModule[None]):
    """Seed 001's confidence loop: ``forward(query)`` returns a ``dspy.Prediction`` with ``nodes``, ``node_ids``,
    ``titles``, ``passages`` and ``trace``.

    Args:
        config: the loop's settings.
        search: ``(queries, k) -> one node list per query``, the blocking search (``forward`` needs it).
        asearch: the awaitable search (``aforward`` needs it).
        runner: the LM, fallback counter and timeout of the LM steps (LLM-free when None).
        verbose: log each round's queries at INFO.
    """

    searched_by = "ConfidenceLoopRetriever"

    def __init__(
        self,
        config: ConfidenceLoopConfig | None = None,
        search: SearchBatch | None = None,
        asearch: AsyncSearchBatch | None = None,
        runner: StepRunner | None = None,
        verbose: bool = False,
    ) -> None:
        super().__init__(Shared(None, runner or StepRunner(lm=None, counter=FallbackCounter()), search, asearch))
        self.analyzer = dspy.Predict(EntityAndGapAnalyzer)
        self.evaluator = dspy.Predict(ConfidenceEvaluator)
        self.query_generator = dspy.Predict(TargetedQueryGenerator)
        self.reranker = dspy.Predict(ListwiseDocumentReranker)
        self.config = config or ConfidenceLoopConfig()
        self.verbose = verbose

    def flow(self, query: str, record: StepRecord) -> Flow[NodesAndTrace]:
        """The loop, top to bottom; yields LM steps and searches to its driver (see :mod:`llama_index_mhop.components.flow`)."""
        config = self.config
        trace = _new_trace(query, record)
        # 1. Round 1: the entity chains and link queries, the query itself beside them.
        chains, generated = yield self._analyze(query)
        trace["entity_chains"] = chains
        round1 = self._round1_queries(query, generated)
        issued = [q for q, _ in round1]
        results = yield Search(issued, config.round1_k)
        # 2. De-duplicate, first-seen order kept; every query's ranking is kept for the fusion.
        pool = _Pool()
        added = [pool.add(r, weight) for r, (_, weight) in zip(results, round1, strict=True)]
        self._record_round(trace, 1, issued, config.round1_k, results, added)
        # 3. Confidence over the round-1 passages, the original query's ranking first.
        views = [pool.views[i] for i in self._round1_order(pool)]
        assessment = yield self._evaluate(query, views, issued)
        trace["confidence"] = assessment.confidence
        trace["gaps"] = [g.as_dict() for g in assessment.gaps]
        trace["round2"] = assessment.confidence < config.confidence_threshold and config.max_round2_queries > 0
        # 4. Round 2 for the gaps, only when the confidence is low.
        if trace["round2"]:
            round2 = yield self._target(query, assessment, views, issued)
            results = yield Search(round2, config.round2_k)
            added = [pool.add(r, 1.0) for r in results]
            self._record_round(trace, 2, round2, config.round2_k, results, added)
        # 5. Rank every passage together and keep the top similarity_top_k.
        free_ranking = listwise_rerank(query, pool.views, pool.rankings, rrf_k=config.rrf_k)
        ranking = yield self._rerank(query, pool, [r.index for r in free_ranking])
        return self._finish(pool, ranking, free_ranking, trace), trace

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

        shown = _passages_text(views[: self.config.lm_passages], self.config.lm_passage_chars)
        step = LMStep(STEP_CONFIDENCE, self.evaluator, parse, lambda: self._free_assessment(query, views, issued))
        return LMRequest(step, {"query": query, "passages": shown})

    def _target(
        self, query: str, assessment: ConfidenceAssessment, views: list[PassageView], issued: list[str]
    ) -> LMRequest[list[str]]:
        limit = self.config.max_round2_queries

        def free() -> list[str]:
            gaps: list[Gap | str] = list(assessment.gaps)
            if not any(g.query for g in assessment.gaps):
                # The gaps came from an LM as plain text: add the LLM-free gaps so a query is always found.
                gaps.extend(self._free_assessment(query, views, issued).gaps)
            return targeted_queries(query, gaps, issued, limit)

        def parse(prediction: dspy.Prediction) -> list[str]:
            return parse_queries(prediction.get("queries"), 1, limit, exclude=issued)

        inputs = {
            "query": query,
            "missing_information": "\n".join(g.text for g in assessment.gaps) or "none",
            "issued_queries": "\n".join(issued),
        }
        return LMRequest(LMStep(STEP_TARGETED, self.query_generator, parse, free), inputs)

    def _rerank(self, query: str, pool: _Pool, prior: list[int]) -> LMRequest[list[int]]:
        def parse(prediction: dspy.Prediction) -> list[int]:
            return parse_ranking(prediction.get("ranking"), len(pool.views), prior=prior)

        inputs = {"query": query, "passages": _passages_text(pool.views, self.config.lm_passage_chars)}
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
        fused = reciprocal_rank_fusion(
            [ranking for ranking, _ in pool.rankings], k=self.config.rrf_k, weights=[w for _, w in pool.rankings]
        )
        taken = set(head)
        return head + [index for index, _ in fused if index not in taken]

    def _record_round(
        self, trace: dict[str, Any], number: int, queries: list[str], k: int, results: list[list[NodeWithScore]],
        added: list[int],
    ) -> None:
        trace["rounds"].append(
            {"round": number, "k": k, "queries": queries, "retrieved": [len(r) for r in results],
             "new_passages": added}
        )
        if self.verbose:
            logger.info("round %d: %s", number, escape_controls(queries))  # queries an LM wrote

    def _finish(
        self, pool: _Pool, ranking: list[int], free_ranking: list[RankedPassage], trace: dict[str, Any]
    ) -> list[NodeWithScore]:
        parts = {r.index: r for r in free_ranking}
        out: list[NodeWithScore] = []
        for position, index in enumerate(ranking[: self.config.similarity_top_k]):
            # Reciprocal-rank scores: monotone, and the same whichever step (LM or LLM-free) ranked.
            out.append(NodeWithScore(node=pool.nodes[index].node, score=1.0 / (position + 1)))
            part = parts[index]
            trace["ranking"].append(
                {
                    "id": pool.views[index].id,
                    "title": pool.views[index].title,
                    "first_stage_score": pool.nodes[index].score,
                    "relevance": round(part.relevance, 6),
                    "linked_from": None if part.linked_from is None else pool.views[part.linked_from].id,
                }
            )
        trace["pool_size"] = len(pool.nodes)
        trace["pool_ids"] = [view.id for view in pool.views]
        trace["llm_free_order"] = [r.index for r in free_ranking]
        trace["fallback_counts"] = self._shared.runner.counter.as_dict()
        return out

    def _node_fields(self, nodes: list[NodeWithScore]) -> dict[str, Any]:
        return {"titles": [str(n.node.metadata.get("title", "")) for n in nodes],
                "passages": [n.node.get_content() for n in nodes]}


def _new_trace(query: str, record: StepRecord) -> dict[str, Any]:
    return {
        "query": query,
        "rounds": [],
        "entity_chains": [],
        "confidence": None,
        "gaps": [],
        "round2": False,
        "steps": record.steps,
        "step_reasons": record.reasons,
        "fallbacks": record.fallbacks,
        "pool_size": 0,
        "pool_ids": [],
        "llm_free_order": [],
        "ranking": [],
    }
