"""The confidence loop's settings, checked once (seed 001's numbers are the defaults)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..rules.confidence import DEFAULT_BRIDGE_PASSAGES, DEFAULT_BRIDGE_PENALTY, DEFAULT_CONFIDENCE_TOP_N
from ..rules.confidence import DEFAULT_RERANK_RRF_K
from ..lm.steps import DEFAULT_LM_TIMEOUT

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
    "ConfidenceLoopConfig",
]

DEFAULT_SIMILARITY_TOP_K = 21
DEFAULT_ROUND1_K = 23
DEFAULT_ROUND2_K = 15
DEFAULT_CONFIDENCE_THRESHOLD = 80
DEFAULT_MAX_ROUND1_QUERIES = 3
DEFAULT_MAX_ROUND2_QUERIES = 2
#: Weight of the original query's ranking in the round-1 order and the listwise relevance (1: plain RRF; the
#: LLM-free rerank keeps the query's own ranking as its anchor anyway).
DEFAULT_ORIGINAL_QUERY_WEIGHT = 1.0
#: Characters of each passage shown to the LM (confidence evaluator and reranker).
DEFAULT_LM_PASSAGE_CHARS = 300
#: Passages shown to the LM confidence evaluator.
DEFAULT_LM_PASSAGES = 10


class ConfidenceLoopConfig(BaseModel):
    """Every setting of :class:`~llama_index_mhop.components.confidence_loop.ConfidenceLoopRetriever`.

    A value out of range raises pydantic's ``ValidationError`` (a ``ValueError``) naming the field.

    Attributes:
        similarity_top_k: passages returned (21).
        round1_k: passages per round-1 query (23).
        round2_k: passages per round-2 query (15).
        confidence_threshold: round 2 runs when the confidence is below it (80; 0 never runs round 2).
        max_round1_queries: generated round-1 queries at most (3); the query itself is issued beside them.
        max_round2_queries: targeted round-2 queries at most (2).
        include_original_query: also search with the query itself in round 1 (recommended).
        original_query_weight: weight of the original query's ranking in the listwise relevance.
        rrf_k: the rank constant of the LLM-free listwise relevance.
        confidence_top_n: passages the LLM-free confidence looks at.
        bridge_passages: top passages searched for bridge entities.
        bridge_penalty: LLM-free confidence points taken off per open bridge.
        lm_passages: passages shown to the LM confidence evaluator.
        lm_passage_chars: characters of each passage shown to the LM (confidence evaluator and reranker).
        lm_timeout: seconds before an LM call is abandoned for the LLM-free strategy.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    similarity_top_k: int = Field(DEFAULT_SIMILARITY_TOP_K, ge=1)
    round1_k: int = Field(DEFAULT_ROUND1_K, ge=1)
    round2_k: int = Field(DEFAULT_ROUND2_K, ge=1)
    confidence_threshold: float = Field(DEFAULT_CONFIDENCE_THRESHOLD, ge=0, le=100, strict=False)
    max_round1_queries: int = Field(DEFAULT_MAX_ROUND1_QUERIES, ge=1)
    max_round2_queries: int = Field(DEFAULT_MAX_ROUND2_QUERIES, ge=0)
    include_original_query: bool = True
    original_query_weight: float = Field(DEFAULT_ORIGINAL_QUERY_WEIGHT, ge=0, strict=False)
    rrf_k: int = Field(DEFAULT_RERANK_RRF_K, ge=0)
    confidence_top_n: int = Field(DEFAULT_CONFIDENCE_TOP_N, ge=1)
    bridge_passages: int = Field(DEFAULT_BRIDGE_PASSAGES, ge=0)
    bridge_penalty: float = Field(DEFAULT_BRIDGE_PENALTY, ge=0, strict=False)
    lm_passages: int = Field(DEFAULT_LM_PASSAGES, ge=1)
    lm_passage_chars: int = Field(DEFAULT_LM_PASSAGE_CHARS, ge=1)
    lm_timeout: float = Field(DEFAULT_LM_TIMEOUT, gt=0, strict=False)
