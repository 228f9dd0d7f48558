"""The graph index's settings, checked once: its name, chunking, batching, short-text embedding, synonymy and walk."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..stores.corpus import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from ..stores.embed_dtype import EmbedDType
from .graph_stores import DEFAULT_SHORT_TEXT_BATCH_SIZE, DEFAULT_SHORT_TEXT_DTYPE
from .indexing import DEFAULT_INSERT_BATCH_SIZE
from .knowledge_graph import DEFAULT_SYNONYMY_THRESHOLD, DEFAULT_SYNONYMY_TOP_K, DEFAULT_TITLE_EDGE_WEIGHT
from .synonym_lists import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES
from .walk import WalkMode, WalkSettings

__all__ = ["DEFAULT_AUTO_RECONCILE_MAX_PASSAGES", "DEFAULT_INDEX_NAME", "GRAPH_SETTINGS", "HippoGraphIndexConfig"]

DEFAULT_INDEX_NAME = "hippo"
#: New passages a query's reconcile extracts at most (an LM reads each: a few seconds apiece).
DEFAULT_AUTO_RECONCILE_MAX_PASSAGES = 32
#: The settings a new index's knowledge graph is built with (a saved graph keeps its own).
GRAPH_SETTINGS = ("synonymy_threshold", "synonymy_top_k", "title_edge_weight")


class HippoGraphIndexConfig(BaseModel):
    """Every setting of :class:`~llama_index_mhop.graph.index.HippoGraphIndex`, given as ``config=`` or as keywords;
    a bad value raises pydantic's ``ValidationError``. A saved index keeps the settings it was built with, except
    ``num_workers``, ``show_progress``, ``auto_reconcile_max_passages`` and the walk's.

    Attributes:
        name: prefix of the Chroma collection names ("hippo").
        chunk_size, chunk_overlap: passage size and overlap in tokens.
        insert_batch_size: passages per batch (one checkpoint line per batch).
        num_workers: concurrent OpenIE calls when an LM extracts (4).
        show_progress: show a progress bar over passages.
        auto_reconcile_max_passages: a query reconciles the graph first when at most this many passages are new.
        short_text_batch_size, short_text_dtype: embedding batch size and dtype for entity names and facts.
        exact_synonymy_max_entities: above this many entities, synonyms come from Chroma's HNSW index.
        synonymy_threshold, synonymy_top_k: a synonymy edge's least cosine (HippoRAG 2: 0.8), most per entity.
        title_edge_weight: weight of a passage's edge to its own title entity.
        walk: ``"auto"`` takes the large-graph paths from the sizes below; ``"exact"`` never.
        push_min_nodes, int8_min_rows, hnsw_min_facts, hnsw_min_passages, hnsw_top_n: those paths' thresholds."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = DEFAULT_INDEX_NAME
    chunk_size: int = Field(DEFAULT_CHUNK_SIZE, ge=1)
    chunk_overlap: int = Field(DEFAULT_CHUNK_OVERLAP, ge=0)
    insert_batch_size: int = Field(DEFAULT_INSERT_BATCH_SIZE, ge=1)
    num_workers: int = Field(4, ge=1)
    show_progress: bool = True
    auto_reconcile_max_passages: int = Field(DEFAULT_AUTO_RECONCILE_MAX_PASSAGES, ge=0)
    short_text_batch_size: int | None = Field(DEFAULT_SHORT_TEXT_BATCH_SIZE, ge=1)
    short_text_dtype: EmbedDType = DEFAULT_SHORT_TEXT_DTYPE
    exact_synonymy_max_entities: int = Field(DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES, ge=0)
    synonymy_threshold: float = Field(DEFAULT_SYNONYMY_THRESHOLD, ge=-1, le=1, allow_inf_nan=False, strict=False)
    synonymy_top_k: int = Field(DEFAULT_SYNONYMY_TOP_K, ge=0)
    title_edge_weight: float = Field(DEFAULT_TITLE_EDGE_WEIGHT, gt=0, allow_inf_nan=False, strict=False)
    walk: WalkMode = "auto"
    push_min_nodes: int = Field(WalkSettings.push_min_nodes, ge=0)
    int8_min_rows: int = Field(WalkSettings.int8_min_rows, ge=0)
    hnsw_min_facts: int = Field(WalkSettings.hnsw_min_facts, ge=0)
    hnsw_min_passages: int = Field(WalkSettings.hnsw_min_passages, ge=0)
    hnsw_top_n: int = Field(WalkSettings.hnsw_top_n, ge=1)

    @classmethod
    def of(cls, config: HippoGraphIndexConfig | None, settings: dict[str, Any]) -> HippoGraphIndexConfig:
        """``config`` (default: the defaults) with ``settings`` in place of its fields, checked."""
        if config is not None and not isinstance(config, cls):
            raise TypeError(f"config= takes a {cls.__name__}, got {type(config).__name__}")
        if config is not None and not settings:
            return config
        return cls.model_validate({**(config.model_dump() if config is not None else {}), **settings})

    def replaced(self, **settings: Any) -> HippoGraphIndexConfig:
        """These settings with ``settings`` in place, checked."""
        return self.of(self, settings)

    def walk_settings(self) -> WalkSettings:
        """The paths this index's walk and searches take (one object per index: it logs each path once)."""
        return WalkSettings(self.walk, self.push_min_nodes, self.int8_min_rows, self.hnsw_min_facts,
                            self.hnsw_min_passages, self.hnsw_top_n, self.name)

    def graph_settings(self) -> dict[str, Any]:
        """The settings a new index's knowledge graph is built with (``KnowledgeGraph(**settings)``)."""
        return {key: getattr(self, key) for key in GRAPH_SETTINGS}
