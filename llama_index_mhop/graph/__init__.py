"""HippoRAG 2-style memory: extraction, the knowledge graph, its Chroma-backed index, and Personalized PageRank.

The names below are imported on first use, so a light module (the reconcile rule ``mhop status`` reads) imports
without LlamaIndex, Chroma or DSPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rules.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .extraction import (
        ExtractEntitiesAndTriples,
        OpenIEExtractor,
        entity_key,
        extract_llm_free,
        title_entities,
    )
    from .index import EmptyIndexError, HippoGraphIndex, UnknownDocumentError
    from .index_config import HippoGraphIndexConfig
    from .knowledge_graph import KnowledgeGraph
    from .openie_file import OpenIEFileError, StoredOpenIE, export_openie, read_openie, write_openie
    from .reader import HippoGraphReader
    from .walk.exact import DEFAULT_DAMPING, DEFAULT_MAX_ITER, DEFAULT_TOL, PageRankGraph


__all__ = ["DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "EmptyIndexError", "ExtractEntitiesAndTriples",
           "HippoGraphIndex", "HippoGraphIndexConfig", "HippoGraphReader", "KnowledgeGraph", "OpenIEExtractor",
           "OpenIEFileError", "PageRankGraph", "StoredOpenIE", "UnknownDocumentError", "entity_key", "export_openie",
           "extract_llm_free", "read_openie", "title_entities", "write_openie"]

#: Where each exported name lives (the module, relative to this package).
_EXPORTS = {
    "ExtractEntitiesAndTriples": ".extraction",
    "OpenIEExtractor": ".extraction",
    "entity_key": ".extraction",
    "extract_llm_free": ".extraction",
    "title_entities": ".extraction",
    "EmptyIndexError": ".index",
    "HippoGraphIndex": ".index",
    "UnknownDocumentError": ".index",
    "HippoGraphIndexConfig": ".index_config",
    "KnowledgeGraph": ".knowledge_graph",
    "export_openie": ".openie_file",
    "OpenIEFileError": ".openie_file",
    "StoredOpenIE": ".openie_file",
    "read_openie": ".openie_file",
    "write_openie": ".openie_file",
    "HippoGraphReader": ".reader",
    "DEFAULT_DAMPING": ".walk.exact",
    "DEFAULT_MAX_ITER": ".walk.exact",
    "DEFAULT_TOL": ".walk.exact",
    "PageRankGraph": ".walk.exact",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
