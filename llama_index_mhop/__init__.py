"""Multi-hop retrieval components for LlamaIndex over Chroma.

- :class:`PerspectiveQueryTransform`: 4-5 reformulations of a query from different angles.
- :class:`RRFFusionRetriever`: iterative perspective retrieval fused by Reciprocal Rank Fusion.
- :class:`ConfidenceLoopRetriever`: entity-chain queries, a confidence check, targeted follow-up, listwise rerank.
- :class:`HippoGraphIndex` / :class:`HippoGraphRetriever`: HippoRAG 2 memory with Personalized PageRank;
  :class:`HippoGraphReader`: a query worker over a saved one, from files every worker maps.
- :class:`DSPyFactFilter`: recognition memory over (subject, predicate, object) fact nodes.
- :func:`reciprocal_rank_fusion`, :func:`build_vector_index`: the pieces they stand on; :func:`sync_vector_index`
  and :func:`delete_documents` keep a passage index in step with a corpus.

The names are imported on first use (``from llama_index_mhop import RRFFusionRetriever`` works as usual), so
importing one light module of the package, as the ``mhop`` command does to answer ``--help``, does not import
LlamaIndex, Chroma or DSPy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .fusion import reciprocal_rank_fusion
    from .graph import HippoGraphIndex, HippoGraphReader
    from .postprocessors import DSPyFactFilter, fact_node
    from .query_transforms import PerspectiveQueryTransform
    from .retrievers import ConfidenceLoopRetriever, HippoGraphRetriever, RRFFusionRetriever
    from .stores import load_documents
    from .vector_index import build_vector_index, delete_documents, load_vector_index, sync_vector_index

__all__ = [
    "ConfidenceLoopRetriever",
    "DSPyFactFilter",
    "HippoGraphIndex",
    "HippoGraphReader",
    "HippoGraphRetriever",
    "PerspectiveQueryTransform",
    "RRFFusionRetriever",
    "build_vector_index",
    "delete_documents",
    "fact_node",
    "load_documents",
    "load_vector_index",
    "reciprocal_rank_fusion",
    "sync_vector_index",
]
__version__ = "0.1.0"

#: Where each exported name lives (the module, relative to this package).
_EXPORTS = {
    "ConfidenceLoopRetriever": ".retrievers",
    "DSPyFactFilter": ".postprocessors",
    "HippoGraphIndex": ".graph",
    "HippoGraphReader": ".graph",
    "HippoGraphRetriever": ".retrievers",
    "PerspectiveQueryTransform": ".query_transforms",
    "RRFFusionRetriever": ".retrievers",
    "build_vector_index": ".vector_index",
    "delete_documents": ".vector_index",
    "fact_node": ".postprocessors",
    "load_documents": ".stores",
    "load_vector_index": ".vector_index",
    "reciprocal_rank_fusion": ".fusion",
    "sync_vector_index": ".vector_index",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
