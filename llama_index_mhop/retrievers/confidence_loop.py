"""Confidence-loop retrieval (seed 001): entity-chain queries, a confidence check, targeted follow-up, rerank.

The flow of seed 001 (the HoVer multi-hop pipeline with confidence-based self-verification), over any
LlamaIndex retriever:

1. Round 1: ``EntityAndGapAnalyzer`` reads the entity chains of the query and writes 2-3 search queries
   aimed at different links of the chain; the query itself is issued beside them (the original query's
   ranking is the strongest single signal). Each query retrieves ``round1_k`` (23) passages.
2. The passages are de-duplicated, first-seen order kept.
3. ``ConfidenceEvaluator`` judges whether they suffice: a confidence from 0 to 100 and the missing pieces.
4. Round 2, only when the confidence is below ``confidence_threshold`` (80): ``TargetedQueryGenerator`` writes
   1-2 queries for the gaps, each retrieving ``round2_k`` (15) more passages; de-duplicated again.
5. ``ListwiseDocumentReranker`` ranks all passages together; the top ``similarity_top_k`` (21) are returned.

Every step is a DSPy predictor on a class signature (:mod:`llama_index_mhop.signatures`) and has an
LLM-free strategy (:mod:`llama_index_mhop.confidence_strategies`, :mod:`llama_index_mhop.listwise_rerank`)
that is the default when no LM is configured and the fallback when the LM raises, times out or answers
something unusable (:mod:`llama_index_mhop.parsing`).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..confidence_strategies import (
    DEFAULT_BRIDGE_PASSAGES,
    DEFAULT_BRIDGE_PENALTY,
    DEFAULT_CONFIDENCE_TOP_N,
    ConfidenceAssessment,
    Gap,
    GapKind,
    PassageView,
    analyze_query,
    assess_confidence,
    query_entities,
    targeted_queries,
)
from ..listwise_rerank import (
    DEFAULT_COVERAGE_WEIGHT,
    DEFAULT_LINK_TOP,
    DEFAULT_LINK_WEIGHT,
    DEFAULT_RERANK_RRF_K,
    RankedPassage,
    listwise_rerank,
)
from ..lm import DEFAULT_LM_TIMEOUT, FallbackCounter, arun_lm_step, resolve_lm, run_lm_step
from ..parsing import parse_confidence, parse_queries, parse_ranking, parse_string_list
from ..signatures import (
    ConfidenceEvaluator,
    EntityAndGapAnalyzer,
    ListwiseDocumentReranker,
    TargetedQueryGenerator,
)
from ..validation import check_query
from .base import CheckedQueryRetriever

__all__ = [
    "DEFAULT_CONFIDENCE_THRESHOLD",
    "DEFAULT_LM_PASSAGES",
    "DEFAULT_LM_PASSAGE_CHARS",
    "DEFAULT_MAX_ROUND1_QUERIES",
    "DEFAULT_MAX_ROUND2_QUERIES",
    "DEFAULT_ORIGINAL_QUERY_WEIGHT",
    "DEFAULT_ROUND1_K",
    "DEFAULT_ROUND2_K",
    "DEFAULT_SIMILARITY_TOP_K",
    "ConfidenceLoopModule",
    "ConfidenceLoopRetriever",
]

logger = logging.getLogger(__name__)

DEFAULT_SIMILARITY_TOP_K = 21
DEFAULT_ROUND1_K = 23
DEFAULT_ROUND2_K = 15
DEFAULT_CONFIDENCE_THRESHOLD = 80
DEFAULT_MAX_ROUND1_QUERIES = 3
DEFAULT_MAX_ROUND2_QUERIES = 2
#: Weight of the original query's ranking in the listwise relevance (the generated queries' rankings weigh 1).
DEFAULT_ORIGINAL_QUERY_WEIGHT = 3.0
#: Characters of each passage shown to the LM (confidence evaluator and reranker).
DEFAULT_LM_PASSAGE_CHARS = 300
#: Passages shown to the LM confidence evaluator.
DEFAULT_LM_PASSAGES = 10

STEP_ANALYZER = "entity_and_gap_analyzer"
STEP_CONFIDENCE = "confidence_evaluator"
STEP_TARGETED = "targeted_query_generator"
STEP_RERANK = "listwise_document_reranker"


class ConfidenceLoopModule(dspy.Module):
    """The four DSPy predictors of the confidence loop, held as attributes so optimizers and save/load see
    them.

    The retrieval between the steps lives in :class:`ConfidenceLoopRetriever`, which calls these predictors;
    ``forward(query)`` / ``aforward(query)`` run the whole loop through the retriever that owns the module and
    return a ``dspy.Prediction`` with ``node_ids``, ``titles``, ``passages`` and ``trace``.
    """

    def __init__(self, retriever: ConfidenceLoopRetriever | None = None) -> None:
        super().__init__()
        self.analyzer = dspy.Predict(EntityAndGapAnalyzer)
        self.evaluator = dspy.Predict(ConfidenceEvaluator)
        self.query_generator = dspy.Predict(TargetedQueryGenerator)
        self.reranker = dspy.Predict(ListwiseDocumentReranker)
        # A weak reference: the retriever owns the module, and copies of the module must not copy the store.
        self._owner = weakref.ref(retriever) if retriever is not None else None

    def _retriever(self) -> ConfidenceLoopRetriever:
        owner = self._owner() if self._owner is not None else None
        if owner is None:
            raise RuntimeError("this ConfidenceLoopModule is not attached to a ConfidenceLoopRetriever")
        return owner

    @staticmethod
    def _prediction(nodes: list[NodeWithScore], trace: dict[str, Any]) -> dspy.Prediction:
        return dspy.Prediction(
            node_ids=[n.node.node_id for n in nodes],
            titles=[str(n.node.metadata.get("title", "")) for n in nodes],
            passages=[n.node.get_content() for n in nodes],
            trace=trace,
        )

    def forward(self, query: str) -> dspy.Prediction:
        return self._prediction(*self._retriever()._loop(_validate_query(query)))

    async def aforward(self, query: str) -> dspy.Prediction:
        return self._prediction(*(await self._retriever()._aloop(_validate_query(query))))


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


def _validate_query(query: Any) -> str:
    return check_query(query.query_str if isinstance(query, QueryBundle) else query)


def _passages_text(views: Sequence[PassageView], chars: int) -> str:
    lines = []
    for i, view in enumerate(views):
        body = " ".join(view.text.split())
        body = body if len(body) <= chars else body[:chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"[{i}] {view.title + ': ' if view.title else ''}{body}")
    return "\n".join(lines)


class ConfidenceLoopRetriever(CheckedQueryRetriever):
    """Seed 001's confidence loop as a LlamaIndex retriever over any base retriever.

    Without an LM every step uses its LLM-free strategy; with one (``lm=`` a DSPy LM, ``llm=`` a LlamaIndex
    LLM, or ``dspy.settings.lm``) every step asks the LM and falls back to the LLM-free strategy, logged at
    WARNING and counted in :attr:`fallback_counts`, when the LM fails. The trace of the latest query is
    :attr:`last_trace`.

    Retrieval depth: give either ``base_retriever`` (called once per query, its results cut to the round's
    ``k``; it should return at least ``round1_k`` results) or ``retriever_factory`` (``k -> retriever``,
    called once per distinct ``k``, so every search asks for exactly ``k``). :meth:`from_defaults` builds the
    factory of a ``VectorStoreIndex``.

    The trace (:attr:`last_trace`, a JSON-serialisable dict; with concurrent queries, the latest to finish):
    ``query``; ``rounds`` (per round: ``round``, ``k``, ``queries``, ``retrieved`` per query, ``new_passages``
    per query); ``entity_chains``; ``confidence``; ``gaps`` (``kind``, ``text``, ``query``, ``entities``,
    ``source``); ``round2`` (whether it ran); ``steps`` (per step: ``"lm"``, ``"llm_free"`` or
    ``"fallback"``); ``fallbacks`` (steps that fell back on this query); ``pool_size``, ``pool_ids`` (every
    passage considered, first-seen order); ``llm_free_order`` (the LLM-free listwise ranking, as indices into
    ``pool_ids``); ``ranking`` (per returned node: ``id``, ``title``, ``first_stage_score`` and the parts of
    its LLM-free listwise score); and
    ``fallback_counts`` (the running totals). Returned nodes are scored ``1 / rank`` (1, 1/2, 1/3, ...),
    whichever step ranked them.

    LM answers are parsed by :mod:`llama_index_mhop.parsing`: a confidence outside 0-100 is rejected (the
    LLM-free assessment is used); generated queries beyond the maximum are cut; a ranking keeps its valid
    indices in the LM's order, followed by the passages it left out in the LLM-free listwise order. The LM is
    resolved once, when the retriever is built.

    Args:
        base_retriever: the retriever that every query goes to.
        retriever_factory: builds the retriever for a given ``k`` (instead of ``base_retriever``).
        similarity_top_k: passages returned (21).
        round1_k: passages per round-1 query (23).
        round2_k: passages per round-2 query (15).
        confidence_threshold: round 2 runs when the confidence is below it (80; 0 never runs round 2).
        max_round1_queries: generated round-1 queries at most (3); the query itself is issued beside them.
        max_round2_queries: targeted round-2 queries at most (2).
        include_original_query: also search with the query itself in round 1 (recommended).
        original_query_weight: weight of the original query's ranking in the listwise relevance.
        link_weight: weight of the link term of the LLM-free listwise score.
        coverage_weight: weight of the entity-coverage term of the LLM-free listwise score.
        link_top: how many top passages lift the passages they name (LLM-free listwise score).
        rrf_k: the rank constant of the LLM-free listwise relevance.
        confidence_top_n: passages the LLM-free confidence looks at.
        bridge_passages: top passages searched for bridge entities.
        bridge_penalty: LLM-free confidence points taken off per open bridge.
        lm_passages: passages shown to the LM confidence evaluator.
        lm_passage_chars: characters of each passage shown to the LM (confidence evaluator and reranker).
        lm: a DSPy LM (optional).
        llm: a LlamaIndex LLM (optional; not together with ``lm``).
        lm_timeout: seconds before an LM call is abandoned for the LLM-free strategy.
        callback_manager: LlamaIndex callbacks.
        verbose: log each round's queries at INFO.

    Raises:
        ValueError: neither or both of ``base_retriever`` and ``retriever_factory``, or a k, count or
            threshold out of range.
    """

    def __init__(
        self,
        base_retriever: BaseRetriever | None = None,
        *,
        retriever_factory: Callable[[int], BaseRetriever] | None = None,
        similarity_top_k: int = DEFAULT_SIMILARITY_TOP_K,
        round1_k: int = DEFAULT_ROUND1_K,
        round2_k: int = DEFAULT_ROUND2_K,
        confidence_threshold: float = DEFAULT_CONFIDENCE_THRESHOLD,
        max_round1_queries: int = DEFAULT_MAX_ROUND1_QUERIES,
        max_round2_queries: int = DEFAULT_MAX_ROUND2_QUERIES,
        include_original_query: bool = True,
        original_query_weight: float = DEFAULT_ORIGINAL_QUERY_WEIGHT,
        link_weight: float = DEFAULT_LINK_WEIGHT,
        coverage_weight: float = DEFAULT_COVERAGE_WEIGHT,
        link_top: int = DEFAULT_LINK_TOP,
        rrf_k: int = DEFAULT_RERANK_RRF_K,
        confidence_top_n: int = DEFAULT_CONFIDENCE_TOP_N,
        bridge_passages: int = DEFAULT_BRIDGE_PASSAGES,
        bridge_penalty: float = DEFAULT_BRIDGE_PENALTY,
        lm_passages: int = DEFAULT_LM_PASSAGES,
        lm_passage_chars: int = DEFAULT_LM_PASSAGE_CHARS,
        lm: dspy.BaseLM | None = None,
        llm: Any = None,
        lm_timeout: float = DEFAULT_LM_TIMEOUT,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        if (base_retriever is None) == (retriever_factory is None):
            raise ValueError("give exactly one of base_retriever and retriever_factory")
        for name, value in {
            "similarity_top_k": similarity_top_k,
            "round1_k": round1_k,
            "round2_k": round2_k,
            "max_round1_queries": max_round1_queries,
            "confidence_top_n": confidence_top_n,
            "lm_passages": lm_passages,
            "lm_passage_chars": lm_passage_chars,
        }.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in {
            "max_round2_queries": max_round2_queries,
            "link_top": link_top,
            "bridge_passages": bridge_passages,
            "rrf_k": rrf_k,
        }.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not 0 <= confidence_threshold <= 100:
            raise ValueError(f"confidence_threshold must be between 0 and 100, got {confidence_threshold!r}")
        for name, value in {
            "original_query_weight": original_query_weight,
            "link_weight": link_weight,
            "coverage_weight": coverage_weight,
            "bridge_penalty": bridge_penalty,
        }.items():
            if value < 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if lm_timeout <= 0:
            raise ValueError(f"lm_timeout must be > 0, got {lm_timeout!r}")
        self._base_retriever = base_retriever
        self._retriever_factory = retriever_factory
        self._retrievers: dict[int, BaseRetriever] = {}
        self.similarity_top_k = similarity_top_k
        self.round1_k = round1_k
        self.round2_k = round2_k
        self.confidence_threshold = confidence_threshold
        self.max_round1_queries = max_round1_queries
        self.max_round2_queries = max_round2_queries
        self.include_original_query = include_original_query
        self.original_query_weight = original_query_weight
        self.link_weight = link_weight
        self.coverage_weight = coverage_weight
        self.link_top = link_top
        self.rrf_k = rrf_k
        self.confidence_top_n = confidence_top_n
        self.bridge_passages = bridge_passages
        self.bridge_penalty = bridge_penalty
        self.lm_passages = lm_passages
        self.lm_passage_chars = lm_passage_chars
        self.lm_timeout = lm_timeout
        self.lm = resolve_lm(lm=lm, llm=llm)
        self.program = ConfidenceLoopModule(self)
        self.fallback_counts = FallbackCounter()
        self.last_trace: dict[str, Any] = {}
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(
        cls,
        index: Any,
        similarity_top_k: int = DEFAULT_SIMILARITY_TOP_K,
        lm: dspy.BaseLM | None = None,
        llm: Any = None,
        retriever_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ConfidenceLoopRetriever:
        """A confidence loop over an index (e.g. a Chroma ``VectorStoreIndex`` from
        :func:`~llama_index_mhop.vector_index.build_vector_index`): each search is
        ``index.as_retriever(similarity_top_k=k, **retriever_kwargs)``.

        Args:
            index: any LlamaIndex index with ``as_retriever``.
            similarity_top_k: passages returned.
            lm: a DSPy LM (optional).
            llm: a LlamaIndex LLM (optional).
            retriever_kwargs: extra arguments of ``as_retriever`` (e.g. metadata filters).
            **kwargs: any other :class:`ConfidenceLoopRetriever` argument.
        """
        if not hasattr(index, "as_retriever"):
            raise ValueError(
                f"index must be a LlamaIndex index with as_retriever(), got {type(index).__name__}"
            )
        extra = dict(retriever_kwargs or {})

        def factory(k: int) -> BaseRetriever:
            return index.as_retriever(similarity_top_k=k, **extra)

        return cls(retriever_factory=factory, similarity_top_k=similarity_top_k, lm=lm, llm=llm, **kwargs)

    # -- searching -------------------------------------------------------------------------------------------

    def _retriever_for(self, k: int) -> BaseRetriever:
        if self._retriever_factory is None:
            return self._base_retriever  # type: ignore[return-value]
        if k not in self._retrievers:
            self._retrievers[k] = self._retriever_factory(k)
        return self._retrievers[k]

    def _search(self, query: str, k: int) -> list[NodeWithScore]:
        return list(self._retriever_for(k).retrieve(query))[:k]

    async def _asearch(self, query: str, k: int) -> list[NodeWithScore]:
        return list(await self._retriever_for(k).aretrieve(query))[:k]

    # -- the steps: LM inputs, parsers and LLM-free strategies shared by the sync and async paths ------------

    def _step_kwargs(self, step: str, trace: dict[str, Any], free: Callable[[], Any]) -> dict[str, Any]:
        def fallback() -> Any:
            trace["steps"][step] = "llm_free" if self.lm is None else "fallback"
            if self.lm is not None:
                trace["fallbacks"].append(step)
            return free()

        trace["steps"][step] = "lm"
        return {
            "fallback": fallback,
            "lm": self.lm,
            "counter": self.fallback_counts,
            "timeout": self.lm_timeout,
        }

    def _analyzer_step(self, query: str, trace: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        def parse(prediction: dspy.Prediction) -> tuple[list[str], list[str]]:
            queries = parse_queries(prediction.get("queries"), 1, self.max_round1_queries, exclude=[query])
            chains = parse_string_list(prediction.get("entity_chains") or "")
            return chains, queries

        def free() -> tuple[list[str], list[str]]:
            analysis = analyze_query(query, self.max_round1_queries)
            return analysis.entity_chains, analysis.queries

        args = {
            "step": STEP_ANALYZER,
            "predictor": self.program.analyzer,
            "inputs": {"query": query},
            "parse": parse,
        }
        return args, self._step_kwargs(STEP_ANALYZER, trace, free)

    def _confidence_step(
        self, query: str, pool: _Pool, order: list[int], issued: list[str], trace: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        views = [pool.views[i] for i in order]

        def free() -> ConfidenceAssessment:
            return self._free_assessment(query, views, issued)

        def parse(prediction: dspy.Prediction) -> ConfidenceAssessment:
            confidence = parse_confidence(prediction.get("confidence"))
            missing = parse_string_list(prediction.get("missing_information") or "", max_items=5)
            return ConfidenceAssessment(confidence, [Gap(GapKind.FACT, text) for text in missing])

        inputs = {
            "query": query,
            "passages": _passages_text(views[: self.lm_passages], self.lm_passage_chars),
        }
        args = {
            "step": STEP_CONFIDENCE,
            "predictor": self.program.evaluator,
            "inputs": inputs,
            "parse": parse,
        }
        return args, self._step_kwargs(STEP_CONFIDENCE, trace, free)

    def _free_assessment(
        self, query: str, views: list[PassageView], issued: list[str]
    ) -> ConfidenceAssessment:
        return assess_confidence(
            query,
            views,
            issued,
            top_n=self.confidence_top_n,
            bridge_passages=self.bridge_passages,
            bridge_penalty=self.bridge_penalty,
        )

    def _targeted_step(
        self,
        query: str,
        assessment: ConfidenceAssessment,
        free_gaps: Callable[[], list[Gap]],
        issued: list[str],
        trace: dict[str, Any],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        def free() -> list[str]:
            gaps: list[Gap | str] = list(assessment.gaps)
            if not any(g.query for g in assessment.gaps):
                # The gaps came from an LM as plain text: add the LLM-free gaps so a query is always found.
                gaps.extend(free_gaps())
            return targeted_queries(query, gaps, issued, self.max_round2_queries)

        def parse(prediction: dspy.Prediction) -> list[str]:
            return parse_queries(prediction.get("queries"), 1, self.max_round2_queries, exclude=issued)

        inputs = {
            "query": query,
            "missing_information": "\n".join(g.text for g in assessment.gaps) or "none",
            "issued_queries": "\n".join(issued),
        }
        args = {
            "step": STEP_TARGETED,
            "predictor": self.program.query_generator,
            "inputs": inputs,
            "parse": parse,
        }
        return args, self._step_kwargs(STEP_TARGETED, trace, free)

    def _rerank_step(
        self, query: str, pool: _Pool, trace: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any], list[RankedPassage]]:
        free_ranking = self._free_rerank(query, pool)
        prior = [r.index for r in free_ranking]

        def free() -> list[int]:
            return prior

        def parse(prediction: dspy.Prediction) -> list[int]:
            return parse_ranking(prediction.get("ranking"), len(pool.views), prior=prior)

        inputs = {"query": query, "passages": _passages_text(pool.views, self.lm_passage_chars)}
        args = {"step": STEP_RERANK, "predictor": self.program.reranker, "inputs": inputs, "parse": parse}
        return args, self._step_kwargs(STEP_RERANK, trace, free), free_ranking

    def _free_rerank(self, query: str, pool: _Pool) -> list[RankedPassage]:
        return listwise_rerank(
            pool.views,
            pool.rankings,
            targets=query_entities(query),
            link_weight=self.link_weight,
            coverage_weight=self.coverage_weight,
            link_top=self.link_top,
            rrf_k=self.rrf_k,
        )

    def _round1_order(self, pool: _Pool) -> list[int]:
        """What the confidence step reads: the original query's ranking first (the strongest single ranking),
        then the other round-1 passages by weighted Reciprocal Rank Fusion of the round-1 rankings."""
        head = (
            list(dict.fromkeys(pool.rankings[0][0])) if self.include_original_query and pool.rankings else []
        )
        scores: dict[int, float] = {}
        for ranking, weight in pool.rankings:
            for rank, index in enumerate(dict.fromkeys(ranking), start=1):
                scores[index] = scores.get(index, 0.0) + weight / (self.rrf_k + rank)
        taken = set(head)
        return head + sorted((i for i in scores if i not in taken), key=lambda i: (-scores[i], i))

    # -- the loop --------------------------------------------------------------------------------------------

    def _new_trace(self, query: str) -> dict[str, Any]:
        return {
            "query": query,
            "rounds": [],
            "entity_chains": [],
            "confidence": None,
            "gaps": [],
            "round2": False,
            "steps": {},
            "fallbacks": [],
            "pool_size": 0,
            "pool_ids": [],
            "llm_free_order": [],
            "ranking": [],
        }

    def _round1_queries(self, query: str, generated: list[str]) -> list[tuple[str, float]]:
        queries = [(query, self.original_query_weight)] if self.include_original_query else []
        seen = {query.lower()} if self.include_original_query else set()
        for q in generated:
            if q.lower() not in seen:
                seen.add(q.lower())
                queries.append((q, 1.0))
        return queries

    def _record_round(
        self,
        trace: dict[str, Any],
        number: int,
        queries: list[str],
        k: int,
        results: list[list[NodeWithScore]],
        added: list[int],
    ) -> None:
        trace["rounds"].append(
            {
                "round": number,
                "k": k,
                "queries": queries,
                "retrieved": [len(r) for r in results],
                "new_passages": added,
            }
        )
        if self._verbose:
            logger.info("round %d: %s", number, queries)

    def _finish(
        self, pool: _Pool, ranking: list[int], free_ranking: list[RankedPassage], trace: dict[str, Any]
    ) -> list[NodeWithScore]:
        parts = {r.index: r for r in free_ranking}
        out: list[NodeWithScore] = []
        for position, index in enumerate(ranking[: self.similarity_top_k]):
            # Reciprocal-rank scores: monotone, and the same whichever step (LM or LLM-free) ranked.
            out.append(NodeWithScore(node=pool.nodes[index].node, score=1.0 / (position + 1)))
            part = parts[index]
            trace["ranking"].append(
                {
                    "id": pool.views[index].id,
                    "title": pool.views[index].title,
                    "first_stage_score": pool.nodes[index].score,
                    "listwise_score": round(part.score, 6),
                    "relevance": round(part.relevance, 6),
                    "link": round(part.link, 6),
                    "coverage": round(part.coverage, 6),
                }
            )
        trace["pool_size"] = len(pool.nodes)
        trace["pool_ids"] = [view.id for view in pool.views]
        trace["llm_free_order"] = [r.index for r in free_ranking]
        trace["fallback_counts"] = self.fallback_counts.as_dict()
        self.last_trace = trace
        return out

    def _after_confidence(self, trace: dict[str, Any], assessment: ConfidenceAssessment) -> bool:
        trace["confidence"] = assessment.confidence
        trace["gaps"] = [g.as_dict() for g in assessment.gaps]
        run_round2 = assessment.confidence < self.confidence_threshold and self.max_round2_queries > 0
        trace["round2"] = run_round2
        return run_round2

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self._loop(_validate_query(query_bundle))[0]

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return (await self._aloop(_validate_query(query_bundle)))[0]

    def _loop(self, query: str) -> tuple[list[NodeWithScore], dict[str, Any]]:
        trace = self._new_trace(query)
        args, kwargs = self._analyzer_step(query, trace)
        chains, generated = run_lm_step(**args, **kwargs)
        trace["entity_chains"] = chains
        round1 = self._round1_queries(query, generated)
        results = [self._search(q, self.round1_k) for q, _ in round1]
        pool = _Pool()
        added = [pool.add(r, w) for r, (_, w) in zip(results, round1, strict=True)]
        issued = [q for q, _ in round1]
        self._record_round(trace, 1, issued, self.round1_k, results, added)

        order = self._round1_order(pool)
        args, kwargs = self._confidence_step(query, pool, order, issued, trace)
        assessment = run_lm_step(**args, **kwargs)
        if self._after_confidence(trace, assessment):
            views = [pool.views[i] for i in order]
            args, kwargs = self._targeted_step(
                query, assessment, lambda: self._free_assessment(query, views, issued).gaps, issued, trace
            )
            round2 = run_lm_step(**args, **kwargs)
            results = [self._search(q, self.round2_k) for q in round2]
            added = [pool.add(r, 1.0) for r in results]
            self._record_round(trace, 2, round2, self.round2_k, results, added)

        args, kwargs, free_ranking = self._rerank_step(query, pool, trace)
        ranking = run_lm_step(**args, **kwargs)
        return self._finish(pool, ranking, free_ranking, trace), trace

    async def _aloop(self, query: str) -> tuple[list[NodeWithScore], dict[str, Any]]:
        trace = self._new_trace(query)
        args, kwargs = self._analyzer_step(query, trace)
        chains, generated = await arun_lm_step(**args, **kwargs)
        trace["entity_chains"] = chains
        round1 = self._round1_queries(query, generated)
        results = list(await asyncio.gather(*(self._asearch(q, self.round1_k) for q, _ in round1)))
        pool = _Pool()
        added = [pool.add(r, w) for r, (_, w) in zip(results, round1, strict=True)]
        issued = [q for q, _ in round1]
        self._record_round(trace, 1, issued, self.round1_k, results, added)

        order = self._round1_order(pool)
        args, kwargs = self._confidence_step(query, pool, order, issued, trace)
        assessment = await arun_lm_step(**args, **kwargs)
        if self._after_confidence(trace, assessment):
            views = [pool.views[i] for i in order]
            args, kwargs = self._targeted_step(
                query, assessment, lambda: self._free_assessment(query, views, issued).gaps, issued, trace
            )
            round2 = await arun_lm_step(**args, **kwargs)
            results = list(await asyncio.gather(*(self._asearch(q, self.round2_k) for q in round2)))
            added = [pool.add(r, 1.0) for r in results]
            self._record_round(trace, 2, round2, self.round2_k, results, added)

        args, kwargs, free_ranking = self._rerank_step(query, pool, trace)
        ranking = await arun_lm_step(**args, **kwargs)
        return self._finish(pool, ranking, free_ranking, trace), trace
