"""An embedder checked against the vectors a collection holds, before anything is written or searched."""

from __future__ import annotations

import weakref
from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding

__all__ = ["EmbeddingDimensionError", "check_embedding_dimension", "embedder_name", "embedding_dimension"]

# The dimension of each embedder probed so far, by object (see embedding_dimension).
_DIMENSIONS: dict[int, tuple[weakref.ref[Any], int]] = {}


class EmbeddingDimensionError(ValueError):
    """The embedder's vectors do not have the dimension of the vectors a collection holds."""


def embedding_dimension(embed_model: BaseEmbedding) -> int:
    """The dimension of ``embed_model``'s vectors: one probe text embedded, once per embedder object."""
    key = id(embed_model)
    held = _DIMENSIONS.get(key)
    if held is not None and held[0]() is embed_model:
        return held[1]
    dimension = len(embed_model.get_text_embedding("dimension probe"))

    def forget(ref: weakref.ref[Any]) -> None:
        if _DIMENSIONS.get(key, (None,))[0] is ref:
            _DIMENSIONS.pop(key, None)
    try:
        _DIMENSIONS[key] = (weakref.ref(embed_model, forget), dimension)
    except TypeError:  # an embedder that takes no weak reference is probed each time
        pass
    return dimension


def embedder_name(embed_model: BaseEmbedding) -> str:
    """How an error names an embedder: its model name, else its class."""
    name = getattr(embed_model, "model_name", None)
    return str(name) if name and name != "unknown" else type(embed_model).__name__


def check_embedding_dimension(collection: Any, embed_model: BaseEmbedding) -> None:
    """Raise a one-line EmbeddingDimensionError when ``embed_model``'s dimension differs from the stored vectors'."""
    stored = collection.peek(limit=1)["embeddings"] if collection.count() else None
    if stored is None or len(stored) == 0:
        return
    expected, got = len(stored[0]), embedding_dimension(embed_model)
    if got != expected:
        raise EmbeddingDimensionError(
            f"the collection {collection.name!r} holds {expected}-dimensional vectors but the embedder "
            f"{embedder_name(embed_model)} gives {got}; use the embedder the collection was built with "
            "(embed_model=; mhop: --embed-model)")
