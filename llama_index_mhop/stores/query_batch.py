"""A flow's searches of one round, embedded together: one embedder call for all of the round's new queries, each
distinct query embedded once per retriever, and the vectors handed to the retriever in LlamaIndex's
``QueryBundle.embedding`` so it embeds nothing again. Over the package's Chroma store the round's searches are
also answered from one Chroma call (:mod:`llama_index_mhop.stores.guarded_store`).

On a CPU the query embedding is most of a search, and a transformer embeds a batch of short queries in little
more time than one (measured in docs/BENCHMARKS.md, "Query cost of the flows"). A retriever that takes its query
vector from the bundle (LlamaIndex's ``VectorIndexRetriever``, the graph's retriever) gets the batch; any other
retriever is searched one query at a time, as it would be alone.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..adapters.llama_index import (
    build_query,
    hugging_face_query_embeddings,
    retriever_embed_model,
    retriever_vector_store,
)
from .guarded_store import GuardedChromaVectorStore

__all__ = ["DEFAULT_CACHED_QUERIES", "BatchSearcher", "QueryVectors", "embed_queries", "query_embedder"]

#: Query vectors a searcher keeps (a vector of 384 floats is about 3 KB as a list).
DEFAULT_CACHED_QUERIES = 1024


def query_embedder(retriever: BaseRetriever) -> BaseEmbedding | None:
    """The embedder ``retriever`` embeds its queries with, if it takes a query vector from ``QueryBundle.embedding``
    (LlamaIndex's vector index retriever, the graph's retriever); else None."""
    from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever

    if isinstance(retriever, VectorIndexRetriever):
        return retriever_embed_model(retriever) if retriever_vector_store(retriever).is_embedding_query else None
    index = getattr(retriever, "index", None)  # HippoGraphRetriever: its index's embedder
    embed_model = getattr(index, "embed_model", None)
    return embed_model if isinstance(embed_model, BaseEmbedding) else None


def embed_queries(embed_model: BaseEmbedding, queries: Sequence[str]) -> list[list[float]]:
    """The query embeddings of ``queries`` in one batch where the embedder has one (a Hugging Face model: one
    forward pass, the path its single-query embedding takes), else one by one."""
    hugging_face = sys.modules.get("llama_index.embeddings.huggingface")  # loaded wherever such an embedder exists
    if hugging_face is not None and isinstance(embed_model, hugging_face.HuggingFaceEmbedding) and len(queries) > 1:
        # LlamaIndex's embedders have a text batch but no query batch; this is the query path, batched.
        return hugging_face_query_embeddings(embed_model, list(queries))
    return [embed_model.get_query_embedding(q) for q in queries]


class QueryVectors:
    """Query embeddings of one embedder, each distinct query embedded once and kept (least recently used go
    first past ``max_queries``). Thread-safe: two threads may embed the same new query, never store a wrong one."""

    def __init__(self, embed_model: BaseEmbedding, max_queries: int = DEFAULT_CACHED_QUERIES) -> None:
        self.embed_model = embed_model
        self.max_queries = max_queries
        self._vectors: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, queries: Sequence[str]) -> list[list[float]]:
        """One vector per query, the ones not kept yet embedded in one batch."""
        with self._lock:
            known = {q: self._vectors[q] for q in dict.fromkeys(queries) if q in self._vectors}
            for query in known:
                self._vectors.move_to_end(query)
        missing = [q for q in dict.fromkeys(queries) if q not in known]
        if missing:
            fresh = dict(zip(missing, embed_queries(self.embed_model, missing), strict=True))
            with self._lock:
                self._vectors.update(fresh)
                while len(self._vectors) > self.max_queries:
                    self._vectors.popitem(last=False)
            known.update(fresh)
        return [known[q] for q in queries]


class BatchSearcher:
    """Searches a flow's rounds: ``search(queries, k)`` gives one result list per query, from the retriever
    ``retriever_for(k)``, the round's query vectors embedded together (see the module docstring).

    Args:
        retriever_for: the retriever that searches ``k`` deep.
        keep: how many of each result list to keep, given ``k`` (default all).
    """

    def __init__(self, retriever_for: Callable[[int], BaseRetriever],
                 keep: Callable[[list[NodeWithScore], int], list[NodeWithScore]] | None = None) -> None:
        self._retriever_for = retriever_for
        self._keep = keep or (lambda results, k: list(results))
        self._vectors: dict[int, QueryVectors] = {}  # by the embedder's id: retrievers of one embedder share them
        self._lock = threading.Lock()

    def _bundles(self, retriever: BaseRetriever, queries: list[str]) -> list[QueryBundle | str]:
        embed_model = query_embedder(retriever)
        if embed_model is None:
            return list(queries)
        with self._lock:
            vectors = self._vectors.setdefault(id(embed_model), QueryVectors(embed_model))
        return [QueryBundle(query_str=q, embedding=v) for q, v in zip(queries, vectors(queries), strict=True)]

    def search(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        retriever = self._retriever_for(k)
        bundles = self._bundles(retriever, queries)
        store, answers = _round_answers(retriever, bundles)
        with store.answering(answers) if answers else nullcontext():
            return [self._keep(retriever.retrieve(b), k) for b in bundles]

    async def asearch(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        """:meth:`search` with awaited retrievals (run concurrently), the batch embedded in a worker thread."""
        retriever = self._retriever_for(k)
        bundles = await asyncio.to_thread(self._bundles, retriever, queries)
        store, answers = await asyncio.to_thread(_round_answers, retriever, bundles)
        with store.answering(answers) if answers else nullcontext():
            results = await asyncio.gather(*(retriever.aretrieve(b) for b in bundles))
        return [self._keep(r, k) for r in results]


def _round_answers(retriever: BaseRetriever, bundles: list[QueryBundle | str]) -> tuple[Any, list[Any]]:
    """For LlamaIndex's vector retriever over the package's guarded Chroma store, the store and the answers to the
    bundles' store queries from one Chroma call (:meth:`GuardedChromaVectorStore.prefetch`); else no answers."""
    from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever

    if not isinstance(retriever, VectorIndexRetriever) or not isinstance(retriever_vector_store(retriever),
                                                                         GuardedChromaVectorStore):
        return None, []
    store = retriever_vector_store(retriever)
    return store, store.prefetch([build_query(retriever, b) for b in bundles
                                  if isinstance(b, QueryBundle)])
