"""Multi-hop retrieval components for LlamaIndex over Chroma."""

from .fusion import reciprocal_rank_fusion
from .stores import build_vector_index, load_documents, load_vector_index

__all__ = ["build_vector_index", "load_documents", "load_vector_index", "reciprocal_rank_fusion"]
__version__ = "0.1.0"
