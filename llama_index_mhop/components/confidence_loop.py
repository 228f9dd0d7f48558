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

Every step is a DSPy predictor on a class signature (:mod:`llama_index_mhop.lm.signatures`) and has an
LLM-free strategy (:mod:`llama_index_mhop.rules.confidence`, :mod:`llama_index_mhop.rules.listwise_rerank`)
that is the default when no LM is configured and the fallback when the LM raises, times out or answers
something unusable (:mod:`llama_index_mhop.rules.parsing`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever

from ..adapters.llama_index import retriever_verbose
from .flow import StepRunner
from ..lm.steps import FallbackCounter
from ..stores.query_batch import BatchSearcher
from .base import ProgramRetriever
from .confidence_config import ConfidenceLoopConfig
from .confidence_program import (
    STEP_ANALYZER,
    STEP_CONFIDENCE,
    STEP_RERANK,
    STEP_TARGETED,
    ConfidenceLoopModule,
)

__all__ = ["ConfidenceLoopConfig", "ConfidenceLoopModule", "ConfidenceLoopRetriever"]


class ConfidenceLoopRetriever(ProgramRetriever):
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
    ``"fallback"``); ``step_reasons`` (per step, the reason in one line); ``fallbacks`` (steps that fell back on this query); ``pool_size``, ``pool_ids`` (every
    passage considered, first-seen order); ``llm_free_order`` (the LLM-free listwise ranking, as indices into
    ``pool_ids``); ``ranking`` (per returned node: ``id``, ``title``, ``first_stage_score``, its LLM-free
    ``relevance`` and ``linked_from``, the passage whose bridge led it there); and
    ``fallback_counts`` (the running totals). Returned nodes are scored ``1 / rank`` (1, 1/2, 1/3, ...),
    whichever step ranked them.

    LM answers are parsed by :mod:`llama_index_mhop.rules.parsing`: a confidence outside 0-100 is rejected (the
    LLM-free assessment is used); generated queries beyond the maximum are cut; a ranking keeps its valid
    indices in the LM's order, followed by the passages it left out in the LLM-free listwise order. Without
    ``lm``/``llm`` the LM is ``dspy.settings.lm`` when each step runs, so ``dspy.configure`` and
    ``dspy.context(lm=...)`` after construction take effect; every predictor call runs in the caller's DSPy
    context, so ``dspy.context(trace=[])`` (and every optimizer) sees it. The DSPy program is :attr:`program`.

    Args:
        base_retriever: the retriever that every query goes to.
        retriever_factory: builds the retriever for a given ``k`` (instead of ``base_retriever``).
        **kwargs: ``config`` or its settings one by one (:class:`ConfidenceLoopConfig`: ``similarity_top_k=21``,
            ``round1_k=23``, ...); ``lm``, ``llm``, ``program`` (a compiled :class:`ConfidenceLoopModule` or its
            saved JSON), ``callback_manager`` and ``verbose`` (log each round's queries at INFO), as for every
            :class:`~llama_index_mhop.components.base.ProgramRetriever`.

    Raises:
        ValueError: neither or both of ``base_retriever`` and ``retriever_factory``, ``config`` together with
            keyword settings, or a setting out of range.
    """

    config_type = ConfidenceLoopConfig
    config: ConfidenceLoopConfig

    def __init__(
        self,
        base_retriever: BaseRetriever | None = None,
        *,
        retriever_factory: Callable[[int], BaseRetriever] | None = None,
        **kwargs: Any,
    ) -> None:
        if (base_retriever is None) == (retriever_factory is None):
            raise ValueError("give exactly one of base_retriever and retriever_factory")
        self._base_retriever = base_retriever
        self._retriever_factory = retriever_factory
        self._retrievers: dict[int, BaseRetriever] = {}
        self._searcher = BatchSearcher(self._retriever_for, keep=lambda results, k: list(results)[:k])
        self.fallback_counts = FallbackCounter()
        super().__init__(**kwargs)

    @classmethod
    def from_defaults(
        cls,
        index: Any,
        retriever_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> ConfidenceLoopRetriever:
        """A confidence loop over an index (e.g. a Chroma ``VectorStoreIndex`` from
        :func:`~llama_index_mhop.stores.vector_index.build_vector_index`): each search is
        ``index.as_retriever(similarity_top_k=k, **retriever_kwargs)``.

        Args:
            index: any LlamaIndex index with ``as_retriever``.
            retriever_kwargs: extra arguments of ``as_retriever`` (e.g. metadata filters).
            **kwargs: any other :class:`ConfidenceLoopRetriever` argument (``similarity_top_k=21``, ``lm``...).
        """
        if not hasattr(index, "as_retriever"):
            raise ValueError(
                f"index must be a LlamaIndex index with as_retriever(), got {type(index).__name__}"
            )
        extra = dict(retriever_kwargs or {})

        def factory(k: int) -> BaseRetriever:
            return index.as_retriever(similarity_top_k=k, **extra)

        return cls(retriever_factory=factory, **kwargs)

    def _build_program(self) -> ConfidenceLoopModule:
        runner = StepRunner(self.lm, self.fallback_counts, self.config.lm_timeout)
        return ConfidenceLoopModule(self.config, self._searcher.search, self._searcher.asearch, runner,
                                    retriever_verbose(self))

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

