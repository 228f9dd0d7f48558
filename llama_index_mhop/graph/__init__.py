"""HippoRAG 2-style memory: extraction, the knowledge graph, its Chroma-backed index, and Personalized PageRank.
Names are imported on first use, so light modules import without LlamaIndex, Chroma or DSPy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..rules.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from ..rules.text import entity_key, title_entities
    from .extraction import ExtractEntitiesAndTriples, OpenIEExtractor, extract_llm_free
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
_EXPORTS = {name: module for module, names in {
    "..rules.text": ("entity_key", "title_entities"),
    ".extraction": ("ExtractEntitiesAndTriples", "OpenIEExtractor", "extract_llm_free"),
    ".index": ("EmptyIndexError", "HippoGraphIndex", "UnknownDocumentError"), ".reader": ("HippoGraphReader",),
    ".index_config": ("HippoGraphIndexConfig",), ".knowledge_graph": ("KnowledgeGraph",),
    ".openie_file": ("export_openie", "OpenIEFileError", "StoredOpenIE", "read_openie", "write_openie"),
    ".walk.exact": ("DEFAULT_DAMPING", "DEFAULT_MAX_ITER", "DEFAULT_TOL", "PageRankGraph"),
}.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
