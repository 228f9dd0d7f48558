"""The HippoRAG 2 retriever's settings, checked once; the defaults are HippoRAG 2's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..rules.first_page import FIRST_PAGE_SIZE
from ..graph.walk.exact import DEFAULT_DAMPING
from .postprocessors import DEFAULT_FACT_TOP_N

__all__ = ["HippoGraphConfig"]


class HippoGraphConfig(BaseModel):
    """Every setting of :class:`~llama_index_mhop.components.hippo_graph.HippoGraphRetriever`.

    A count out of range, a damping outside [0, 1) or a weight that is negative or not finite raises pydantic's
    ``ValidationError`` (a ``ValueError``) naming the field.

    Attributes:
        similarity_top_k: passages returned (5).
        linking_top_k: candidate facts sent to the filter, and entities kept in the reset vector (HippoRAG 2: 5).
        fact_top_n: most facts the filter keeps (HippoRAG 2: 4).
        passage_node_weight: weight of the dense passage scores in the reset vector (HippoRAG 2: 0.05).
        damping: probability that the walk follows an edge (HippoRAG 2: 0.5).
        query_entity_weight: reset weight of entities the query names (1; 0 turns it off).
        dense_seed_top_k: how many best dense passages get an extra reset weight (0 turns it off).
        dense_seed_weight: that extra weight, times the passage's normalised dense score (0).
        first_page: how many of the best passages are put in first-page order: those about what the query names
            first, then the passage they lead to (:mod:`~llama_index_mhop.rules.first_page`; 5, 0 keeps the walk's
            order).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    similarity_top_k: int = Field(5, ge=1)
    linking_top_k: int = Field(5, ge=1)
    fact_top_n: int = Field(DEFAULT_FACT_TOP_N, ge=1)
    passage_node_weight: float = Field(0.05, ge=0, allow_inf_nan=False, strict=False)
    damping: float = Field(DEFAULT_DAMPING, ge=0, lt=1, allow_inf_nan=False, strict=False)
    query_entity_weight: float = Field(1.0, ge=0, allow_inf_nan=False, strict=False)
    dense_seed_top_k: int = Field(0, ge=0)
    dense_seed_weight: float = Field(0.0, ge=0, allow_inf_nan=False, strict=False)
    first_page: int = Field(FIRST_PAGE_SIZE, ge=0)
