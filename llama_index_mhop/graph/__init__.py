"""HippoRAG 2-style memory: extraction, the knowledge graph, its Chroma-backed index, and Personalized PageRank."""

from .extraction import (
    ExtractEntitiesAndTriples,
    OpenIEExtractor,
    entity_key,
    extract_llm_free,
    title_entities,
)
from .index import EmptyIndexError, HippoGraphIndex, UnknownDocumentError
from .knowledge_graph import KnowledgeGraph
from .openie_export import export_openie
from .openie_file import OpenIEFileError, StoredOpenIE, read_openie, write_openie
from .ppr import (
    DEFAULT_DAMPING,
    DEFAULT_MAX_ITER,
    DEFAULT_TOL,
    PageRankGraph,
    personalized_pagerank,
    transition_matrix,
)

__all__ = [
    "DEFAULT_DAMPING",
    "DEFAULT_MAX_ITER",
    "DEFAULT_TOL",
    "EmptyIndexError",
    "ExtractEntitiesAndTriples",
    "HippoGraphIndex",
    "KnowledgeGraph",
    "OpenIEExtractor",
    "OpenIEFileError",
    "PageRankGraph",
    "StoredOpenIE",
    "UnknownDocumentError",
    "entity_key",
    "export_openie",
    "extract_llm_free",
    "personalized_pagerank",
    "read_openie",
    "title_entities",
    "transition_matrix",
    "write_openie",
]
