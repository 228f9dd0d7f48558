"""What the project's retrievers share: the query is checked before LlamaIndex's dispatch touches it."""

from __future__ import annotations

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from ..validation import check_query

__all__ = ["CheckedQueryRetriever"]


def _checked(query: QueryType) -> QueryBundle:
    if isinstance(query, QueryBundle):
        text = check_query(query.query_str)
        return query if text == query.query_str else QueryBundle(
            query_str=text, custom_embedding_strs=query.custom_embedding_strs, embedding=query.embedding
        )
    return QueryBundle(query_str=check_query(query))


class CheckedQueryRetriever(BaseRetriever):
    """A ``BaseRetriever`` whose ``retrieve``/``aretrieve`` reject bad queries with a clear error.

    Non-strings raise ``TypeError``; empty or white-space queries raise ``ValueError``; control characters become
    spaces and over-long queries are cut (:func:`~llama_index_mhop.validation.check_query`).
    """

    def retrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        return super().retrieve(_checked(str_or_query_bundle))

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        return await super().aretrieve(_checked(str_or_query_bundle))
