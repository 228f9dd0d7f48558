"""The package's Chroma vector store, whose every search reads one whole version of the collection, and a flow's
rounds of searches: the round's queries embedded in one call (a transformer embeds a batch of short queries in
little more time than one), each distinct query once per embedder, and over that store answered from one Chroma
query. A retriever that takes no query vector from ``QueryBundle.embedding`` is searched one query at a time."""

from __future__ import annotations

import asyncio
import math
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import legacy_metadata_dict_to_node, metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore
from pydantic import PrivateAttr

from ..adapters.llama_index import (
    build_query,
    hugging_face_query_embeddings,
    retriever_embed_model,
    retriever_vector_store,
    with_vector_store,
)
from .consistency import VersionMarker, collection_lock, read_guarded, version_marker

__all__ = ["BatchSearcher", "GuardedChromaVectorStore", "QueryVectors", "embed_queries", "query_embedder"]

def _node(node_id: str, text: str | None, metadata: dict[str, Any]) -> BaseNode:
    """A result row as ``ChromaVectorStore`` reads it: from LlamaIndex's node metadata, else the legacy fields."""
    try:
        return metadata_dict_to_node(metadata, text=text)
    except Exception:  # a row LlamaIndex did not write: the same fallback as ChromaVectorStore's
        metadata, node_info, relationships = legacy_metadata_dict_to_node(metadata)
        return TextNode(text=text or "", id_=node_id, metadata=metadata, start_char_idx=node_info.get("start"),
                        end_char_idx=node_info.get("end"), relationships=relationships)


def _plain(query: VectorStoreQuery) -> bool:
    """A dense top-k search without filters: what one batched Chroma query answers exactly."""
    return (query.query_embedding is not None and query.mode == VectorStoreQueryMode.DEFAULT
            and query.filters is None and not query.node_ids and not query.doc_ids)


class GuardedChromaVectorStore(ChromaVectorStore):
    """A ``ChromaVectorStore`` whose searches read one whole version of the collection: in this process under the
    collection's read lock, across processes at one version of its version row (see :mod:`.consistency`).
    LlamaIndex's writes through it (``insert``, ``delete_ref_doc``, ``refresh_ref_docs``) take the write lock and
    mark the row."""

    _marker: VersionMarker | None = PrivateAttr(default=None)
    _answers: list[tuple[VectorStoreQuery, VectorStoreQueryResult]] = PrivateAttr(default_factory=list)

    @classmethod
    def over(cls, client: Any, collection: Any) -> GuardedChromaVectorStore:
        """The guarded store of ``collection``, with the version row of its sync log in ``client``."""
        store = cls(chroma_collection=collection)
        store._marker = version_marker(client, collection)
        return store

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        if not kwargs:
            for asked, answer in self._answers:
                if asked == query:
                    return answer
        return read_guarded(self.client, self._marker, lambda: ChromaVectorStore.query(self, query, **kwargs))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        # Waiting for a sync must not block the event loop; the read itself is quick.
        return await asyncio.to_thread(self.query, query, **kwargs)

    def answering(self, queries: Sequence[VectorStoreQuery]) -> GuardedChromaVectorStore:
        """This store, its ``query`` of one of ``queries`` (the plain dense top-k ones, two or more) answered from
        one Chroma call per depth made now under one version check. Blocking: an event loop runs it in a thread."""
        plain = [q for q in queries if _plain(q)]
        if len(plain) < 2:
            return self
        by_depth: dict[int, list[VectorStoreQuery]] = {}
        for query in plain:  # one depth a call: Chroma's HNSW search widens with the depth asked
            by_depth.setdefault(query.similarity_top_k, []).append(query)
        groups = list(by_depth.values())
        found = read_guarded(self.client, self._marker, lambda: [self._query_together(g) for g in groups])
        store = self.model_copy()
        store._answers = [pair for group, results in zip(groups, found, strict=True)
                          for pair in zip(group, results, strict=True)]
        return store

    def _query_together(self, queries: list[VectorStoreQuery]) -> list[VectorStoreQueryResult]:
        """The top k of queries of one depth k from one collection query, each read as ``ChromaVectorStore.query``
        reads it (similarity ``exp(-distance)``); a passage several queries find is read into a node once."""
        found = self.client.query(query_embeddings=[q.query_embedding for q in queries],
                                       n_results=queries[0].similarity_top_k,
                                       include=["documents", "metadatas", "distances"])
        nodes: dict[str, BaseNode] = {}
        results = []
        for ids, texts, metas, distances in zip(found["ids"], found["documents"], found["metadatas"],
                                                found["distances"], strict=True):
            for node_id, text, meta in zip(ids, texts, metas, strict=True):
                if node_id not in nodes:
                    nodes[node_id] = _node(node_id, text, meta)
            results.append(VectorStoreQueryResult(nodes=[nodes[i] for i in ids],
                                                  similarities=[math.exp(-d) for d in distances], ids=list(ids)))
        return results

    @contextmanager
    def writing(self) -> Iterator[None]:
        """The collection's write lock in this process, and its version row marked for the others."""
        with collection_lock(self.client).write(), self._marker.writing() if self._marker else nullcontext():
            yield

    def add(self, nodes: list[BaseNode], **kwargs: Any) -> list[str]:
        with self.writing():  # LlamaIndex's insert, and each batch of a sync
            return super().add(nodes, **kwargs)

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        with self.writing():  # LlamaIndex's delete_ref_doc
            super().delete(ref_doc_id, **kwargs)


def query_embedder(retriever: BaseRetriever) -> BaseEmbedding | None:
    """The embedder ``retriever`` embeds its queries with, if it takes a query vector from ``QueryBundle.embedding``;
    else None."""
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
    """Query embeddings of one embedder, each distinct query embedded once and kept (least recently used go first
    past ``max_queries``). Thread-safe: two threads may embed the same new query, never store a wrong one."""

    def __init__(self, embed_model: BaseEmbedding, max_queries: int = 1024) -> None:  # 384 floats: 3 KB each
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

    def _round(self, retriever: BaseRetriever, queries: list[str]) -> tuple[BaseRetriever, list[QueryBundle | str]]:
        """The round's bundles (with their query vectors) and the retriever to search them: over the guarded store,
        a copy of ``retriever`` whose store answers the round's searches from one Chroma call."""
        embed_model = query_embedder(retriever)
        if embed_model is None:
            return retriever, list(queries)
        with self._lock:
            vectors = self._vectors.setdefault(id(embed_model), QueryVectors(embed_model))
        bundles = [QueryBundle(query_str=q, embedding=v) for q, v in zip(queries, vectors(queries), strict=True)]
        store = retriever_vector_store(retriever) if isinstance(retriever, VectorIndexRetriever) else None
        if isinstance(store, GuardedChromaVectorStore):
            answered = store.answering([build_query(retriever, b) for b in bundles])
            if answered is not store:
                retriever = with_vector_store(retriever, answered)
        return retriever, bundles

    def search(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        retriever, bundles = self._round(self._retriever_for(k), queries)
        return [self._keep(retriever.retrieve(b), k) for b in bundles]

    async def asearch(self, queries: list[str], k: int) -> list[list[NodeWithScore]]:
        """:meth:`search` with awaited retrievals (run concurrently), the round prepared in a worker thread."""
        retriever, bundles = await asyncio.to_thread(self._round, self._retriever_for(k), queries)
        results = await asyncio.gather(*(retriever.aretrieve(b) for b in bundles))
        return [self._keep(r, k) for r in results]
