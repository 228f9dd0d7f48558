"""The package's LlamaIndex components, one file each with its settings and DSPy program: the RRF fusion
retriever and its perspective transform, the confidence loop, the HippoRAG 2 graph retriever and the fact
filter."""

from .confidence_loop import ConfidenceLoopConfig, ConfidenceLoopModule, ConfidenceLoopRetriever
from .fact_filter import DSPyFactFilter, fact_node
from .hippo_graph import HippoGraphConfig, HippoGraphModule, HippoGraphRetriever
from .rrf_fusion import PerspectiveQueryTransform, RRFFusionConfig, RRFFusionModule, RRFFusionRetriever

__all__ = ["ConfidenceLoopConfig", "ConfidenceLoopModule", "ConfidenceLoopRetriever", "DSPyFactFilter",
           "HippoGraphConfig", "HippoGraphModule", "HippoGraphRetriever", "PerspectiveQueryTransform",
           "RRFFusionConfig", "RRFFusionModule", "RRFFusionRetriever", "fact_node"]
