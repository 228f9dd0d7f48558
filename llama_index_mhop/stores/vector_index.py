"""The Chroma passage index: kept in step with a corpus, guarded against half-done syncs, opened again later.
Each passage row records its document's id, version and source (:mod:`~llama_index_mhop.stores.passage_rows`), so no
registry is kept beside the store; an embedder is checked against the stored vectors first."""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, TextNode

from ..rules.counters import count
from ..rules.terminal import progress
from .chroma_batches import iter_all
from .consistency import sync_log
from .corpus import (
    DEFAULT_CHUNK_OVERLAP,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_FILE_BYTES,
    CorpusError,
    PassageChunker,
    SkippedFile,
    no_text_error,
    read_corpus,
)
from .dimension_check import EmbeddingDimensionError, check_embedding_dimension
from .passage_index import PassageIndex, passage_collection, writing
from .passage_rows import (
    SOURCE_KEY,
    distinct_documents,
    incoming_documents,
    passage_nodes,
    row_source,
    stored_documents,
    versioned_nodes,
)
from .search import GuardedChromaVectorStore, collection_lock
from .sync import StoredDocument, SyncPlan, UnknownDocumentError, match_doc_ids, plan_sync, source_doc_ids

__all__ = ["DEFAULT_COLLECTION", "EmbeddingDimensionError", "IndexingInterrupted", "PassageIndex", "SyncResult",
           "all_passages", "build_vector_index", "delete_documents", "describe_collection", "load_vector_index",
           "passage_collection", "passage_nodes", "stored_documents", "sync_vector_index"]

logger = logging.getLogger(__name__)

DEFAULT_COLLECTION = "mhop_passages"


class IndexingInterrupted(RuntimeError):
    """The store failed part-way through indexing. What was written is kept; indexing again resumes."""


def _existing_collection(client: Any, name: str) -> Any:
    if name not in {getattr(c, "name", c) for c in client.list_collections()}:
        raise CorpusError(f"no Chroma collection {name!r}; index a corpus first (mhop index PATH)")
    return client.get_collection(name)


@dataclass(frozen=True)
class SyncResult:
    """What :func:`sync_vector_index` did: the index, its plan, and the folder's files that were skipped."""

    index: VectorStoreIndex
    plan: SyncPlan
    skipped: tuple[SkippedFile, ...] = ()


def sync_vector_index(
    source: str | os.PathLike[str] | Sequence[Document], collection_name: str = DEFAULT_COLLECTION,
    chroma_client: Any = None, persist_path: str | os.PathLike[str] | None = None,
    embed_model: BaseEmbedding | None = None, chunk_size: int = DEFAULT_CHUNK_SIZE,
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP, show_progress: bool = True, insert_batch_size: int = 256,
    delete_missing: bool = False, strict: bool = False, follow_symlinks: bool = False,
    max_file_bytes: int | None = DEFAULT_MAX_FILE_BYTES) -> SyncResult:
    """Bring the Chroma passage collection in step with a corpus (the rule of :mod:`llama_index_mhop.stores.sync`).

    New documents are added, changed ones replaced, unchanged ones left alone (not embedded again); with
    ``delete_missing``, documents gone from the same folder or file are removed. Every step is idempotent, so after
    a crash the same call resumes; queries in this process never see half a sync. ``source``, ``strict``,
    ``follow_symlinks`` and ``max_file_bytes`` are :func:`~llama_index_mhop.stores.corpus.read_corpus`'s; the client
    defaults to :func:`~llama_index_mhop.stores.defaults.default_chroma_client` (at ``persist_path``), the embedder
    to :func:`~llama_index_mhop.stores.defaults.resolve_embed_model`'s; ``insert_batch_size`` passages are embedded
    and written at a time.

    Raises:
        CorpusError: the corpus is empty (a folder with ``delete_missing`` may be) or unreadable.
        IndexingInterrupted: the store or the embedder failed part-way; syncing again resumes."""
    from .defaults import default_chroma_client, resolve_embed_model

    # A mirrored folder whose files were all removed syncs to no documents: its indexed ones are removed.
    documents, skipped = read_corpus(source, strict=strict, follow_symlinks=follow_symlinks,
                                     max_file_bytes=max_file_bytes, allow_empty_folder=delete_missing)
    documents = distinct_documents(documents)
    source_key = row_source(source)
    if delete_missing and source_key is None:
        raise ValueError("delete_missing needs a folder or file source: a list of documents has no 'missing'")
    client = chroma_client if chroma_client is not None else default_chroma_client(persist_path)
    embed_model = resolve_embed_model(embed_model)
    collection = client.get_or_create_collection(collection_name, metadata={"hnsw:space": "cosine"})
    store = GuardedChromaVectorStore.over(client, collection)
    chunker = PassageChunker(chunk_size=chunk_size, chunk_overlap=chunk_overlap)
    index = PassageIndex.from_vector_store(store, embed_model=embed_model, transformations=[chunker])
    index.chunk_size, index.chunk_overlap = chunk_size, chunk_overlap
    with collection_lock(collection).write():
        held = stored_documents(collection)
        if not documents and not any(doc.source == source_key for doc in held.values()):
            raise no_text_error(source, skipped)  # an empty folder that was never indexed is a mistake, not a sync
        if source_key is not None:  # a file name another folder already holds is stored under its full path
            stored_as = source_doc_ids([d.id_ for d in documents], held, source_key)
            for doc in documents:
                doc.id_ = stored_as[doc.id_]
        # A file that was not read this time is not gone: its indexed version stays.
        unread = _unread_doc_ids(collection, skipped, source_key, held)
        plan = plan_sync(incoming_documents(documents), {i: d for i, d in held.items() if i not in unread},
                         mirror_source=source_key if delete_missing else None)
        logger.info("%s: %s", collection_name, plan.counts())
        changed = set(plan.added) | set(plan.updated)
        nodes = versioned_nodes([d for d in documents if d.id_ in changed], source_key, chunk_size, chunk_overlap)
        # Before anything is written or deleted, even when nothing is to be embedded: a wrong embedder loses
        # nothing, and an unchanged corpus synced with it is an error now rather than at the first query.
        check_embedding_dimension(collection, embed_model)
        with store.writing() if plan.changes else nullcontext():
            for doc_id in (*plan.removed, *plan.updated):
                collection.delete(where={"document_id": doc_id})
            _insert(index, nodes, client, collection_name, insert_batch_size, show_progress)
        at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        sync_log(client, collection_name).upsert(ids=["last"], embeddings=[[0.0]],
                                                 metadatas=[{"at": at, **plan.counts()}])
    count("documents_indexed", len(changed))
    count("documents_removed", len(plan.removed))
    return SyncResult(index, plan, tuple(skipped))


def _unread_doc_ids(collection: Any, skipped: Sequence[SkippedFile], source_key: str | None,
                    held: dict[str, StoredDocument]) -> set[str]:
    # What a sync must keep of the files it skipped: a text file's doc id and, when a JSON file was skipped, every
    # JSON record of the folder (a row does not say which JSON file it came from; only text rows carry file_path).
    skipped = [f for f in skipped if not f.empty]  # an empty file was read: its indexed version goes
    if not skipped or source_key is None:
        return set()
    unread = set(source_doc_ids([f.path.relative_to(source_key).as_posix() for f in skipped], held,
                                source_key).values())
    if any(f.path.suffix.lower() == ".json" for f in skipped):
        for record in iter_all(collection, ["metadatas"]):
            meta = record["metadatas"] or {}
            if meta.get(SOURCE_KEY) == source_key and "file_path" not in meta:
                unread.add(str(meta.get("document_id", "")))
    return unread


def describe_collection(client: Any, collection_name: str = DEFAULT_COLLECTION) -> dict[str, Any]:
    """What a passage collection holds: documents, passages, sources, and the time and counts of the last sync
    (CorpusError when there is no such collection)."""
    collection = _existing_collection(client, collection_name)
    held = stored_documents(collection)
    last = sync_log(client, collection_name).get(ids=["last"], include=["metadatas"])["metadatas"]
    return {"collection": collection_name, "documents": len(held), "passages": collection.count(),
            "sources": sorted({d.source for d in held.values() if d.source}),
            "last_sync": dict(last[0]) if last else None}


def _insert(index: VectorStoreIndex, nodes: list[TextNode], client: Any, name: str, batch_size: int,
            show_progress: bool) -> None:
    from .defaults import describe_client

    batches = [nodes[i : i + batch_size] for i in range(0, len(nodes), batch_size)]
    done = 0
    for batch in progress(batches, show=show_progress, desc=f"indexing {name}", unit="batch"):
        try:
            index.insert_nodes(batch)
        except Exception as exc:  # a store or embedder failure of any kind: say where it stopped
            raise IndexingInterrupted(f"indexing {name!r} stopped after {done} of {len(nodes)} new passages: "
                                      f"{describe_client(client)} failed ({type(exc).__name__}: {exc}). The passages "
                                      "written are kept; index again to resume.") from exc
        done += len(batch)


def build_vector_index(source: str | os.PathLike[str] | Sequence[Document], **kwargs: Any) -> VectorStoreIndex:
    """:func:`sync_vector_index` (``kwargs`` are its own), returning just the index."""
    return sync_vector_index(source, **kwargs).index


def delete_documents(index: VectorStoreIndex, doc_ids: Sequence[str],
                     missing: list[UnknownDocumentError] | None = None) -> list[str]:
    """Remove documents (by doc id, or by an unambiguous file name) from a Chroma passage index; the doc ids
    removed. An unknown id raises UnknownDocumentError, or, given a ``missing`` list, is appended there (so a delete
    killed part-way finishes when run again)."""
    collection = passage_collection(index)
    with writing(index):
        resolved = match_doc_ids(doc_ids, stored_documents(collection), missing)
        for doc_id in resolved:
            collection.delete(where={"document_id": doc_id})
    return resolved


def load_vector_index(collection_name: str = DEFAULT_COLLECTION, chroma_client: Any = None,
                      persist_path: str | os.PathLike[str] | None = None,
                      embed_model: BaseEmbedding | None = None) -> PassageIndex:
    """Open an existing Chroma passage collection as a ``VectorStoreIndex``; an embedder
    (:func:`~llama_index_mhop.stores.defaults.resolve_embed_model`) that does not fit it is refused here.

    Raises:
        CorpusError: the collection does not exist or is empty.
        EmbeddingDimensionError: the embedder does not fit the collection."""
    from .defaults import default_chroma_client, resolve_embed_model

    client = chroma_client if chroma_client is not None else default_chroma_client(persist_path)
    collection = _existing_collection(client, collection_name)
    if collection.count() == 0:
        raise CorpusError(f"Chroma collection {collection_name!r} is empty; index a corpus first")
    embed_model = resolve_embed_model(embed_model)
    check_embedding_dimension(collection, embed_model)
    return PassageIndex.from_vector_store(GuardedChromaVectorStore.over(client, collection), embed_model=embed_model,
                                          transformations=[PassageChunker()])


def all_passages(index: VectorStoreIndex, batch: int = 5000) -> list[BaseNode]:
    """Every passage stored in a Chroma-backed index (text and metadata, no embeddings)."""
    records = iter_all(passage_collection(index), ["documents", "metadatas"], batch)
    return [TextNode(id_=record["id"], text=record["documents"] or "",
                     metadata={k: v for k, v in (record["metadatas"] or {}).items() if not k.startswith("_")})
            for record in records]
