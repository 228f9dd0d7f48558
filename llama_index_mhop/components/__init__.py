"""The project's LlamaIndex retrievers, one file each, their settings and their DSPy programs."""

from .confidence_loop import ConfidenceLoopConfig, ConfidenceLoopModule, ConfidenceLoopRetriever
from .hippo_config import HippoGraphConfig
from .hippo_graph import HippoGraphModule, HippoGraphRetriever
from .rrf_config import RRFFusionConfig
from .rrf_fusion import RRFFusionModule, RRFFusionRetriever

__all__ = [
    "ConfidenceLoopConfig",
    "ConfidenceLoopModule",
    "ConfidenceLoopRetriever",
    "HippoGraphConfig",
    "HippoGraphModule",
    "HippoGraphRetriever",
    "RRFFusionConfig",
    "RRFFusionModule",
    "RRFFusionRetriever",
]
