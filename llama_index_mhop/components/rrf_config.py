"""The RRF fusion retriever's numbers, checked once; the defaults are seed 000's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..rules.ranking import DEFAULT_RRF_K

__all__ = ["RRFFusionConfig"]


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
            raise ValueError(
                f"context_top_n must be at most carry_over_top_n ({self.carry_over_top_n}), got {self.context_top_n}"
            )
        return self

    @property
    def search_depth(self) -> int:
        """How many results each search must return: the deeper of a perspective's list and the query's own."""
        return max(self.perspective_top_k, self.similarity_top_k)
