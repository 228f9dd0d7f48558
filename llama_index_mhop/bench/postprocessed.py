"""A retriever followed by node postprocessors, as a query engine applies them, for benchmarking the pair."""

from __future__ import annotations

from collections.abc import Sequence

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle

__all__ = ["PostprocessedRetriever"]


class PostprocessedRetriever(BaseRetriever):
    """``retriever``'s nodes passed through ``postprocessors`` in order (what ``RetrieverQueryEngine`` retrieves).

    Args:
        retriever: the first-stage retriever.
        postprocessors: node postprocessors applied to its nodes, in order.
    """

    def __init__(self, retriever: BaseRetriever, postprocessors: Sequence[BaseNodePostprocessor]) -> None:
        super().__init__()
        self.retriever = retriever
        self.postprocessors = list(postprocessors)

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = self.retriever.retrieve(query_bundle)
        for postprocessor in self.postprocessors:
            nodes = postprocessor.postprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        nodes = await self.retriever.aretrieve(query_bundle)
        for postprocessor in self.postprocessors:
            nodes = await postprocessor.apostprocess_nodes(nodes, query_bundle=query_bundle)
        return nodes
