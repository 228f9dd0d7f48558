"""The knowledge graph of HippoRAG 2-style retrieval and the Personalized PageRank that searches it."""

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
    "PageRankGraph",
    "personalized_pagerank",
    "transition_matrix",
]
