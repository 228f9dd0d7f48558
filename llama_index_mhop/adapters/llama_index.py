"""LlamaIndex's private names the package reads, each in one function (tests/test_adapters.py checks them against
the installed LlamaIndex). LlamaIndex is imported only when a function runs."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from llama_index.core.indices.vector_store import VectorIndexRetriever, VectorStoreIndex
    from llama_index.core.llms import LLM
    from llama_index.core.schema import QueryBundle
    from llama_index.core.vector_stores.types import BasePydanticVectorStore, VectorStoreQuery
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

__all__ = ["build_query", "configured_embed_model", "configured_llm", "hugging_face_query_embeddings",
           "index_embed_model", "retriever_embed_model", "retriever_vector_store", "retriever_verbose"]


def configured_llm() -> LLM | None:
    """The LLM the app set in ``Settings.llm``, None if it set none. Reads ``Settings._llm``: the public
    ``Settings.llm`` builds LlamaIndex's OpenAI default when none is set."""
    from llama_index.core import Settings

    return Settings._llm


def configured_embed_model() -> BaseEmbedding | None:
    """The embedder the app set in ``Settings.embed_model``, None if it set none. Reads ``Settings._embed_model``:
    the public ``Settings.embed_model`` builds LlamaIndex's OpenAI default when none is set."""
    from llama_index.core import Settings

    return Settings._embed_model


def index_embed_model(index: VectorStoreIndex) -> BaseEmbedding:
    """The embedder of a ``VectorStoreIndex``. Reads its ``_embed_model``: no public accessor."""
    return index._embed_model


def retriever_embed_model(retriever: VectorIndexRetriever) -> BaseEmbedding:
    """The query embedder of a ``VectorIndexRetriever``. Reads its ``_embed_model``: no public accessor."""
    return retriever._embed_model


def retriever_vector_store(retriever: VectorIndexRetriever) -> BasePydanticVectorStore:
    """The vector store a ``VectorIndexRetriever`` searches. Reads its ``_vector_store``: no public accessor."""
    return retriever._vector_store


def build_query(retriever: VectorIndexRetriever, bundle: QueryBundle) -> VectorStoreQuery:
    """The store query ``retriever`` makes of ``bundle`` (which holds its embedding), as its own retrieval builds it.
    Calls ``VectorIndexRetriever._build_vector_store_query``: the query is built nowhere public."""
    return retriever._build_vector_store_query(bundle)


def hugging_face_query_embeddings(embed_model: HuggingFaceEmbedding, queries: list[str]) -> list[list[float]]:
    """The query embeddings of ``queries`` in one forward pass, with the query prompt a single query gets. Calls
    ``HuggingFaceEmbedding._embed``: public calls embed texts without that prompt, or one query at a time."""
    return embed_model._embed(queries, prompt_name="query")


def retriever_verbose(retriever: BaseRetriever) -> bool:
    """Whether a retriever was made ``verbose=True``. Reads ``BaseRetriever._verbose``: kept nowhere else."""
    return retriever._verbose


def with_vector_store(retriever: VectorIndexRetriever, store: BasePydanticVectorStore) -> VectorIndexRetriever:
    """A shallow copy of ``retriever`` that searches ``store`` (a round's answered store). Writes
    ``VectorIndexRetriever._vector_store``: the retriever takes its store only from its index at construction."""
    copied = copy.copy(retriever)
    copied._vector_store = store
    return copied
