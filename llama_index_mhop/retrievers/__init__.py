"""The project's LlamaIndex retrievers, one file each."""

from .confidence_loop import ConfidenceLoopModule, ConfidenceLoopRetriever
from .hippo_graph import HippoGraphRetriever
from .rrf_fusion import RRFFusionRetriever

__all__ = ["ConfidenceLoopModule", "ConfidenceLoopRetriever", "HippoGraphRetriever", "RRFFusionRetriever"]
