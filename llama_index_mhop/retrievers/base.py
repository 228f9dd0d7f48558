"""What the project's retrievers share: the query is checked before LlamaIndex's dispatch touches it."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType

from ..counters import count
from ..validation import check_query

__all__ = ["CheckedQueryRetriever", "ProgramRetriever", "query_text"]


def query_text(query: QueryType) -> str:
    """The checked text of a query string or ``QueryBundle`` (see :func:`~llama_index_mhop.validation.check_query`)."""
    return check_query(query.query_str if isinstance(query, QueryBundle) else query)


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
        bundle = _checked(str_or_query_bundle)
        count(f"queries_served.{type(self).__name__}")
        return super().retrieve(bundle)

    async def aretrieve(self, str_or_query_bundle: QueryType) -> list[NodeWithScore]:
        bundle = _checked(str_or_query_bundle)
        count(f"queries_served.{type(self).__name__}")
        return await super().aretrieve(bundle)


class ProgramRetriever(CheckedQueryRetriever):
    """A retriever whose flow is its DSPy program (``self.program``): a retrieval is one call of the program,
    whose prediction carries the ``nodes`` and the ``trace`` (kept as ``last_trace``)."""

    program: Any
    last_trace: dict[str, Any]

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = self.program(query=query_bundle.query_str)
        self.last_trace = prediction.trace
        return prediction.nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        prediction = await self.program.acall(query=query_bundle.query_str)
        self.last_trace = prediction.trace
        return prediction.nodes
