"""Multi-hop retrieval components for LlamaIndex over Chroma.

- :class:`PerspectiveQueryTransform`: 4-5 reformulations of a query from different angles.
- :class:`RRFFusionRetriever`: iterative perspective retrieval fused by Reciprocal Rank Fusion.
- :class:`ConfidenceLoopRetriever`: entity-chain queries, a confidence check, targeted follow-up, listwise rerank.
- :class:`HippoGraphIndex` / :class:`HippoGraphRetriever`: HippoRAG 2 memory with Personalized PageRank.
- :class:`DSPyFactFilter`: recognition memory over (subject, predicate, object) fact nodes.
- :func:`reciprocal_rank_fusion`, :func:`build_vector_index`: the pieces they stand on.
"""

from .fusion import reciprocal_rank_fusion
from .graph import HippoGraphIndex
from .postprocessors import DSPyFactFilter, fact_node
from .query_transforms import PerspectiveQueryTransform
from .retrievers import ConfidenceLoopRetriever, HippoGraphRetriever, RRFFusionRetriever
from .stores import load_documents
from .vector_index import build_vector_index, load_vector_index

__all__ = [
    "ConfidenceLoopRetriever",
    "DSPyFactFilter",
    "HippoGraphIndex",
    "HippoGraphRetriever",
    "PerspectiveQueryTransform",
    "RRFFusionRetriever",
    "build_vector_index",
    "fact_node",
    "load_documents",
    "load_vector_index",
    "reciprocal_rank_fusion",
]
__version__ = "0.1.0"
