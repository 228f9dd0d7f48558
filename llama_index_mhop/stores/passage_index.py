"""The package's Chroma passage index as a LlamaIndex ``VectorStoreIndex``."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.vector_stores.chroma import ChromaVectorStore

from ..rules.counters import count
from .corpus import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from .passage_rows import distinct_documents, documents_in_rows, incoming_documents, versioned_nodes
from .search import GuardedChromaVectorStore, collection_lock
from .sync import plan_sync

__all__ = ["PassageIndex", "passage_collection", "writing"]


class PassageIndex(VectorStoreIndex):
    """The package's Chroma passage index: a ``VectorStoreIndex`` that keeps one version of each document.

    LlamaIndex's ``insert``, ``refresh_ref_docs`` and ``update_ref_doc`` read a docstore that Chroma leaves empty,
    so an edited document's passages would be added beside the old ones. Here they read the passage rows (each
    carries its version's hash): a changed document's passages replace the old ones, an unchanged one is not
    embedded again, and the rows are a sync's, cut by the sync's ``chunk_size`` and ``chunk_overlap``."""

    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP

    def insert(self, document: Document, **insert_kwargs: Any) -> None:
        self._replace([document])

    update_ref_doc = insert

    def refresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> list[bool]:
        """Index the new and changed documents; one flag per document, True where it was (re)indexed."""
        return self._replace(documents)

    async def ainsert(self, document: Document, **insert_kwargs: Any) -> None:
        await asyncio.to_thread(self._replace, [document])

    aupdate_ref_doc = ainsert

    async def arefresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> list[bool]:
        return await asyncio.to_thread(self._replace, documents)

    def _replace(self, documents: Sequence[Document]) -> list[bool]:
        """Write the new and changed ``documents`` in one marked write: a changed one's old passages go first."""
        documents = distinct_documents(documents)
        collection = passage_collection(self)
        with writing(self):
            ids = [d.id_ for d in documents]
            rows = collection.get(where={"document_id": {"$in": ids}}, include=["metadatas"]) if ids else {}
            held = documents_in_rows(rows.get("metadatas") or [])
            plan = plan_sync(incoming_documents(documents), held)
            for doc_id in plan.updated:
                collection.delete(where={"document_id": doc_id})
            changed = [d for d in documents if d.id_ in {*plan.added, *plan.updated}]
            for doc in changed:  # a document keeps the source a sync recorded, so that sync still mirrors it
                source = held[doc.id_].source if doc.id_ in held else None
                self.insert_nodes(versioned_nodes([doc], source, self.chunk_size, self.chunk_overlap))
        count("documents_indexed", len(changed))
        refreshed = {d.id_ for d in changed}
        return [doc.id_ in refreshed for doc in documents]


def writing(index: VectorStoreIndex) -> AbstractContextManager[Any]:
    """A write to the index's collection: the guarded store's (lock and version row), else the lock alone."""
    store = index.vector_store
    if isinstance(store, GuardedChromaVectorStore):
        return store.writing()
    return collection_lock(passage_collection(index)).write()


def passage_collection(index: VectorStoreIndex) -> Any:
    """The Chroma collection behind a Chroma-backed ``VectorStoreIndex`` (``ChromaVectorStore.client``)."""
    store = index.vector_store
    if not isinstance(store, ChromaVectorStore):
        raise TypeError(f"expected an index over a ChromaVectorStore, got {type(store).__name__}")
    return store.client
