"""What a graph retriever reads of the index it searches (a protocol, so the retriever never imports the index)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.schema import NodeWithScore

    from .state import RetrievalState

__all__ = ["RetrievalSource"]


class RetrievalSource(Protocol):
    """A graph a query searches: its ``name`` (for messages), the ``embed_model`` of its vectors and queries, and
    the ``fact_filter_program`` its retrievers' filters start from (None: none)."""

    name: str
    fact_filter_program: Any

    @property
    def embed_model(self) -> BaseEmbedding: ...

    def retrieval_state(self, damping: float) -> RetrievalState:
        """The current graph version's query state (its arrays and its walk), for a walk with ``damping``."""

    def passage_sources(self) -> list[tuple[Any, Any]]:
        """The passage collections, each with its Chroma version row (None: none)."""

    def still_held(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without the passages gone from the index's collections since its state was loaded."""
