"""The package's Chroma vector store: every search reads one whole version of the collection, and a flow's round
of searches can be answered from one Chroma call.

In this process a sync holds the collection's write lock for its whole change, so a query answers from the corpus
as it was before or after it; a sync or delete in another process marks the collection's version row
(:mod:`~llama_index_mhop.stores.version_marker`), and a search that overlapped it waits and runs again. LlamaIndex's own
writes through the store (``insert``, ``delete_ref_doc``, ``refresh_ref_docs``) take the same lock and mark the same
row.

:meth:`GuardedChromaVectorStore.prefetch` and :meth:`~GuardedChromaVectorStore.answering` serve a round: the
round's queries go to Chroma together (one collection query with every query embedding, one version check), and
each retriever's own ``query`` of them in the same context, made through LlamaIndex's retriever as usual, takes its
answer from that call.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Any, TypeVar

from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import legacy_metadata_dict_to_node, metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore
from pydantic import PrivateAttr

from .rwlock import collection_lock, note_read
from .version_marker import VersionMarker

__all__ = ["GuardedChromaVectorStore", "read_guarded", "sync_log", "version_marker"]

T = TypeVar("T")


def sync_log(client: Any, collection_name: str) -> Any:
    """The one-row collection beside a passage collection: the last sync's time and counts, and the version row.

    Chroma refuses metadata changes on a collection created with a distance function, hence a collection."""
    return client.get_or_create_collection(f"{collection_name}.sync")


def version_marker(client: Any, collection: Any) -> VersionMarker:
    """The version row of a passage collection, in its sync log in ``client`` (see :mod:`.version_marker`)."""
    settings = client.get_settings()
    embedded = bool(settings.is_persistent and not settings.chroma_server_host)
    return VersionMarker(sync_log(client, collection.name), collection.name, embedded=embedded)


def read_guarded(collection: Any, marker: VersionMarker | None, read: Callable[[], T]) -> T:
    """``read()`` of a passage collection under its read lock in this process and at one whole version of it
    across processes (``marker``, None: this process alone), noted for the retrieval running it (see
    :mod:`~llama_index_mhop.stores.rwlock`). Every read of a collection a sync may change at the same time goes through
    this: the vector store's searches and the graph index's reads of the passages it reads in place.

    Raises:
        StaleStoreError: another process changed the collection of this embedded store.
        StoreBusyError: another process kept writing it for longer than a read waits.
    """
    lock = collection_lock(collection)

    def locked() -> tuple[T, int]:
        with lock.read():
            return read(), lock.generation

    if marker is None:
        result, generation = locked()
        note_read(lock, generation)
    else:
        (result, generation), version = marker.read_whole(locked)
        note_read(lock, generation, version.generation)
    return result


#: The round a context is answering from: the store and its prefetched answers (see answering).
_ROUND: contextvars.ContextVar[tuple[Any, list[tuple[VectorStoreQuery, VectorStoreQueryResult]]] | None] = \
    contextvars.ContextVar("mhop_round", default=None)


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
    """A ``ChromaVectorStore`` whose searches read one whole version of the collection (see the module docstring)."""

    _marker: VersionMarker | None = PrivateAttr(default=None)
    _answers_lock: Any = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def over(cls, client: Any, collection: Any) -> GuardedChromaVectorStore:
        """The guarded store of ``collection``, with the version row of its sync log in ``client``."""
        store = cls(chroma_collection=collection)
        store._marker = version_marker(client, collection)
        return store

    def _guarded(self, search: Callable[[], T]) -> T:
        """``search()`` at one whole version of the collection (:func:`read_guarded`)."""
        return read_guarded(self.client, self._marker, search)

    def query(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        block = _ROUND.get()
        if block is not None and block[0] is self and not kwargs:
            with self._answers_lock:
                for position, (asked, answer) in enumerate(block[1]):
                    if asked == query:
                        del block[1][position]
                        return answer
        return self._guarded(lambda: ChromaVectorStore.query(self, query, **kwargs))

    async def aquery(self, query: VectorStoreQuery, **kwargs: Any) -> VectorStoreQueryResult:
        # Waiting for a sync must not block the event loop; the read itself is quick. The thread runs in this
        # task's context, so it sees the round's answers (see answering).
        return await asyncio.to_thread(self.query, query, **kwargs)

    def prefetch(self, queries: Sequence[VectorStoreQuery]) -> list[tuple[VectorStoreQuery, VectorStoreQueryResult]]:
        """The answers to ``queries`` (the plain dense top-k ones), from one Chroma call per depth under one
        version check; none for fewer than two. Blocking: an event loop runs it in a worker thread."""
        plain = [q for q in queries if _plain(q)]
        if len(plain) < 2:
            return []
        by_depth: dict[int, list[VectorStoreQuery]] = {}
        for query in plain:  # one depth a call: Chroma's HNSW search widens with the depth asked
            by_depth.setdefault(query.similarity_top_k, []).append(query)
        groups = list(by_depth.values())
        found = self._guarded(lambda: [self._query_together(group) for group in groups])
        return [pair for group, results in zip(groups, found, strict=True) for pair in zip(group, results, strict=True)]

    @contextmanager
    def answering(self, answers: list[tuple[VectorStoreQuery, VectorStoreQueryResult]]) -> Iterator[None]:
        """Within the block, this context's ``query`` (and the worker threads it starts) of a query equal to one
        of ``answers`` (from :meth:`prefetch`) is answered from it; no other thread's or task's query is."""
        token = _ROUND.set((self, list(answers)))
        try:
            yield
        finally:
            _ROUND.reset(token)

    def _query_together(self, queries: list[VectorStoreQuery]) -> list[VectorStoreQueryResult]:
        """The top k of queries of one depth k from one collection query, each read as ``ChromaVectorStore.query``
        reads its result: the node from its metadata (or, for a row LlamaIndex did not write, its legacy fields),
        the similarity ``exp(-distance)``. A passage several queries find is read into a node once (the queries of
        a round overlap: a third to a half of their results)."""
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

    def writing(self) -> AbstractContextManager[None]:
        """The collection's write lock in this process, and its version row marked for the others."""
        stack = ExitStack()
        stack.enter_context(collection_lock(self.client).write())
        if self._marker is not None:
            stack.enter_context(self._marker.writing())
        return stack

    def add(self, nodes: list[BaseNode], **kwargs: Any) -> list[str]:
        with self.writing():  # LlamaIndex's insert, and each batch of a sync
            return super().add(nodes, **kwargs)

    def delete(self, ref_doc_id: str, **kwargs: Any) -> None:
        with self.writing():  # LlamaIndex's delete_ref_doc
            super().delete(ref_doc_id, **kwargs)
