"""The project's LlamaIndex retrievers, one file each."""

from .rrf_fusion import RRFFusionRetriever

__all__ = ["RRFFusionRetriever"]
