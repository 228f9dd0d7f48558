"""Every search of a passage collection reads one whole version of it, in this process and across processes: a
readers-writer lock per collection (queries share the read side, a sync holds the write side) and the collection's
version row (a seqlock kept in Chroma, :class:`VersionMarker`). A retrieval of several searches runs again while a
sync landed between two of them (:func:`read_one_version`) rather than stall every sync across its LM calls. A
round's queries are embedded in one call, each distinct query once per embedder (:class:`QueryVectors`), and over
:class:`GuardedChromaVectorStore` answered from one Chroma query.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import os
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, ParamSpec, TypeVar

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.indices.vector_store.retrievers import VectorIndexRetriever
from llama_index.core.schema import BaseNode, TextNode
from llama_index.core.vector_stores.types import (
    VectorStoreQuery,
    VectorStoreQueryMode,
    VectorStoreQueryResult,
)
from llama_index.core.vector_stores.utils import legacy_metadata_dict_to_node, metadata_dict_to_node
from llama_index.vector_stores.chroma import ChromaVectorStore
from pydantic import PrivateAttr

from ..adapters.llama_index import (
    hugging_face_query_embeddings,
    retriever_embed_model,
    retriever_vector_store,
)
from .consistency import StaleStoreError, StoreBusyError, sync_log

__all__ = ["GuardedChromaVectorStore", "QueryVectors", "StaleStoreError", "StoreBusyError", "VersionMarker",
           "aread_one_version", "collection_lock", "embed_queries", "node_copy", "query_embedder",
           "read_guarded", "read_one_version", "version_marker"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

#: Seconds without a renewed heartbeat after which a marked write counts as abandoned (its writer died).
ABANDONED_AFTER = 60.0
#: Seconds a read waits for other processes' writes (and a retrieval for syncs landing in it) before giving up.
READER_WAIT = 600.0
VERSION_ROW = "version"
_POLL = 0.02


class ReadWriteLock:
    """Many readers or one writer, re-entrant in its thread; a waiting writer blocks new readers (no starving)."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writer_depth = 0
        self._writers_waiting = 0
        #: How many writes have finished: a reader that saw two generations saw two versions.
        self.generation = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:  # a writer may read what it is writing
            self._cond.wait_for(lambda: self._writer == me or (self._writer is None and not self._writers_waiting))
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._cond:
            if self._writer != me:
                self._writers_waiting += 1
                self._cond.wait_for(lambda: self._writer is None and not self._readers)
                self._writers_waiting -= 1
                self._writer = me
            self._writer_depth += 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if self._writer_depth == 0:
                    self._writer = None
                    self.generation += 1
                self._cond.notify_all()


_locks: dict[str, ReadWriteLock] = {}
_locks_guard = threading.Lock()


def collection_lock(collection: object) -> ReadWriteLock:
    """The process-wide lock of a Chroma collection, keyed by the collection's id (stable across clients)."""
    key = str(getattr(collection, "id", id(collection)))
    with _locks_guard:
        return _locks.setdefault(key, ReadWriteLock())


#: The last generation of each collection (by its sync log's id) this process's view holds: the one found when it
#: first opened the collection, then each it wrote. Only embedded stores are checked against it.
_viewed: dict[str, int] = {}
_viewed_lock = threading.Lock()


@dataclass(frozen=True)
class Version:
    """The version row as read: the last finished write's generation, and whether a write is under way."""

    generation: int = 0
    writing: bool = False
    heartbeat: float = 0.0
    writer: int = 0  # the writing process's pid


class VersionMarker:
    """The version row of collection ``name`` in its sync log ``log``: a writer marks it ``writing`` before its first
    change and sets the next ``generation`` after its last (a mark unrenewed for :data:`ABANDONED_AFTER` seconds is
    a killed writer's); a search that found it unmarked and unchanged before and after read one whole version."""

    def __init__(self, log: Any, name: str, embedded: bool = False) -> None:
        self.log = log
        self.name = name
        self.embedded = embedded
        self._warned_abandoned = False
        self._depth, self._generation = 0, 0  # writes nest (a sync's batches): the outermost marks, from this one
        self._key = str(getattr(log, "id", name))
        with _viewed_lock:
            if self._key not in _viewed:
                _viewed[self._key] = self.read().generation

    def read(self) -> Version:
        rows = self.log.get(ids=[VERSION_ROW], include=["metadatas"])["metadatas"]
        return Version(**rows[0]) if rows and rows[0] else Version()

    def _write(self, version: Version) -> None:
        self.log.upsert(ids=[VERSION_ROW], embeddings=[[0.0]], metadatas=[asdict(version)])

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Mark a write for the ``with`` block (one inside another, a sync's batch, renews the outer's heartbeat).
        The caller holds the collection's write lock, so one thread marks at a time."""
        if self._depth == 0:
            self._generation = self.read().generation
        self._write(Version(self._generation, True, time.time(), os.getpid()))
        self._depth += 1
        failed = False
        try:
            yield
        except BaseException:
            failed = True
            raise
        finally:
            self._depth -= 1
            if self._depth == 0:  # a failed write ends too: what it wrote is a version (a sync resumes from it)
                with _viewed_lock:  # first: a reader of this process must never find a version it did not see
                    _viewed[self._key] = self._generation + 1
                try:
                    self._write(Version(self._generation + 1, False, time.time(), os.getpid()))
                except Exception:
                    if not failed:
                        raise  # else the heartbeat lets readers on, and the write's own error is the one to report
                    logger.warning("collection %s: could not mark the end of a failed write", self.name)

    def read_whole(self, search: Callable[[], T], records_only: bool = False) -> tuple[T, Version]:
        """``search()`` run until it began and ended on one unmarked version (waiting while a write runs), and
        that version. An embedded store's vector index is in each process's memory: another process's change to it
        raises :class:`StaleStoreError`; writes going on for :data:`READER_WAIT` seconds, :class:`StoreBusyError`.
        ``records_only``: ``search()`` reads stored records (a ``get``), not the vector index."""
        from chromadb.errors import InternalError

        deadline = time.monotonic() + READER_WAIT
        while True:
            if self.embedded:
                # Only this process writes an embedded store it reads, kept out by the collection's lock, which the
                # search takes. Another's write is refused after the search, when it began before or during it, and
                # before a search of the vector index too, which must not be searched stale.
                if not records_only:
                    self._check_view(self.read())
                result = search()
                after = self.read()
                self._check_view(after)
                return result, after
            before = self.read()
            if before.writing and not self._abandoned(before):
                self._wait_or_give_up(deadline)
                continue
            try:
                result, failure = search(), None
            except InternalError as exc:  # an id another process removed meanwhile: searched again below
                result, failure = None, exc
            if self.read() == before:
                if failure is not None:
                    raise failure
                return result, before  # type: ignore[return-value]
            self._wait_or_give_up(deadline)

    def _check_view(self, version: Version) -> None:
        """Refuse an embedded store's collection another process writes or wrote since this process saw it."""
        viewed = _viewed.get(self._key, version.generation)
        foreign_write = version.writing and version.writer != os.getpid()
        if self.embedded and (version.generation > viewed or foreign_write):
            raise StaleStoreError(
                f"collection {self.name!r} of this embedded Chroma store was changed by another process (version "
                f"{version.generation}, this process holds {viewed}), and an embedded store's vector index is "
                "held in each process's memory: share a Chroma server between processes (chroma run; mhop "
                "--chroma-host), or open the store again in a new process")

    def _abandoned(self, version: Version) -> bool:
        if not version.writing or time.time() - version.heartbeat <= ABANDONED_AFTER:
            return False
        if not self._warned_abandoned:
            self._warned_abandoned = True
            logger.warning("collection %s: a write stopped half-way over %.0f s ago; searching it as it is until "
                           "the next sync (mhop index, sync_vector_index) completes it", self.name, ABANDONED_AFTER)
        return True

    def _wait_or_give_up(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise StoreBusyError(f"collection {self.name!r} has been written by another process for over "
                                 f"{READER_WAIT:g} s; try again when its sync has finished")
        time.sleep(_POLL)


def version_marker(client: Any, collection: Any) -> VersionMarker:
    """The version row of a passage collection, in its sync log in ``client``."""
    settings = client.get_settings()
    embedded = bool(settings.is_persistent and not settings.chroma_server_host)
    return VersionMarker(sync_log(client, collection.name), collection.name, embedded=embedded)


#: The versions each lock's collection was read at during the running retrieval (None: none is tracking).
_reads: contextvars.ContextVar[dict[int, set[tuple[int, ...]]] | None] = contextvars.ContextVar("mhop_reads",
                                                                                                default=None)


def read_guarded(collection: Any, marker: VersionMarker | None, read: Callable[[], T], records_only: bool = False) -> T:
    """``read()`` of a collection under its read lock and at one whole version across processes (``marker``;
    None: this process alone; ``records_only``: ``read()`` is a ``get``; see :meth:`VersionMarker.read_whole`), noted
    for the running :func:`read_one_version`."""
    lock = collection_lock(collection)

    def locked() -> tuple[T, int]:
        with lock.read():
            return read(), lock.generation
    if marker is None:
        (result, generation), version = locked(), ()
    else:
        (result, generation), row = marker.read_whole(locked, records_only)
        version = (row.generation,)
    seen = _reads.get()
    if seen is not None:
        seen.setdefault(id(lock), set()).add((generation, *version))
    return result


@contextmanager
def _tracking(seen: dict[int, set[tuple[int, ...]]]) -> Iterator[None]:
    """Note in ``seen`` the versions read in the block (threads it starts with a copy of the context included);
    a block inside another passes them on to it."""
    outer = _reads.get()
    token = _reads.set(seen)
    try:
        yield
    finally:
        _reads.reset(token)
        if outer is not None:
            for key, versions in seen.items():
                outer.setdefault(key, set()).update(versions)


def _runs() -> Iterator[AbstractContextManager[None]]:
    """A retrieval's runs: another while the last read two versions of a collection, until READER_WAIT."""
    deadline = time.monotonic() + READER_WAIT
    while True:
        seen: dict[int, set[tuple[int, ...]]] = {}
        yield _tracking(seen)
        if all(len(versions) == 1 for versions in seen.values()):
            return
        if time.monotonic() > deadline:
            raise StoreBusyError(f"syncs kept changing the index during this retrieval for over {READER_WAIT:g} s")


def read_one_version(retrieve: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``retrieve(...)``, run again (its LM steps included) while a sync landed between two of its reads of one
    collection, so what it returns was read from one version of each (:class:`StoreBusyError` after
    :data:`READER_WAIT` seconds)."""
    for run in _runs():
        with run:
            result = retrieve(*args, **kwargs)
    return result


async def aread_one_version(retrieve: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """:func:`read_one_version` of an awaited retrieval."""
    for run in _runs():
        with run:
            result = await retrieve(*args, **kwargs)
    return result


def _node(node_id: str, text: str | None, metadata: dict[str, Any]) -> BaseNode:
    """A result row as ``ChromaVectorStore`` reads it: from LlamaIndex's node metadata, else the legacy fields."""
    try:
        return metadata_dict_to_node(metadata, text=text)
    except Exception:  # a row LlamaIndex did not write: the same fallback as ChromaVectorStore's
        metadata, node_info, relationships = legacy_metadata_dict_to_node(metadata)
        return TextNode(text=text or "", id_=node_id, metadata=metadata, start_char_idx=node_info.get("start"),
                        end_char_idx=node_info.get("end"), relationships=relationships)


def node_copy(node: BaseNode) -> BaseNode:
    """``node`` with its own metadata and relationships: a node kept for many queries is served as a copy, which
    its caller or a postprocessor may change."""
    return node.model_copy(update={"metadata": dict(node.metadata), "relationships": dict(node.relationships)})


def _plain(query: VectorStoreQuery) -> bool:
    """A dense top-k search without filters: what one batched Chroma query answers exactly."""
    return (query.query_embedding is not None and query.mode == VectorStoreQueryMode.DEFAULT
            and query.filters is None and not query.node_ids and not query.doc_ids)


class GuardedChromaVectorStore(ChromaVectorStore):
    """A ``ChromaVectorStore`` whose searches read one whole version of the collection (:func:`read_guarded`);
    LlamaIndex's writes through it (``insert``, ``delete_ref_doc``, ``refresh_ref_docs``) take the write lock and
    mark the version row."""

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
        one Chroma call made now under one version check. Blocking: an event loop runs it in a thread."""
        plain = [q for q in queries if _plain(q)]
        if len(plain) < 2:
            return self
        store = self.model_copy()
        found = read_guarded(self.client, self._marker, lambda: self._query_together(plain))
        store._answers = list(zip(plain, found, strict=True))
        return store

    def _query_together(self, queries: list[VectorStoreQuery]) -> list[VectorStoreQueryResult]:
        """Each query's top k from one collection query at the deepest k, each read as ``ChromaVectorStore.query``
        reads it (similarity ``exp(-distance)``); a passage several queries find is read into a node once. A
        shallower query's top k is the first k of the deeper search: HNSW explores ``max(ef_search, depth)``
        candidates (``ef_search`` 100 by default), so up to ``ef_search`` the two find the same distances, and the
        same passages unless passages at exactly the k-th distance tie (Chroma keeps any of them)."""
        found = self.client.query(query_embeddings=[q.query_embedding for q in queries],
                                  n_results=max(q.similarity_top_k for q in queries),
                                  include=["documents", "metadatas", "distances"])
        nodes: dict[str, BaseNode] = {}
        results = []
        for query, *row in zip(queries, found["ids"], found["documents"], found["metadatas"], found["distances"],
                               strict=True):
            ids, texts, metas, distances = (column[: query.similarity_top_k] for column in row)
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
    """The embedder ``retriever`` embeds its queries with, if it takes a query vector from ``QueryBundle.embedding``."""
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
