"""What a passage row of the Chroma index records about its document (its id, its version's content hash and
passage count, the folder or file it came from): all a sync needs to know, written with each passage."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.schema import TextNode

from .chroma_batches import iter_all
from .corpus import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, CorpusError, chunk_documents, content_hash
from .sync import IncomingDocument, StoredDocument

__all__ = ["DOC_HASH_KEY", "DOC_PASSAGES_KEY", "SOURCE_KEY", "distinct_documents", "documents_in_rows",
           "incoming_documents", "passage_nodes", "row_source", "stored_documents", "versioned_nodes"]

#: Row metadata a sync reads: the document version's content hash, its passage count, and its source.
DOC_HASH_KEY = "doc_hash"
DOC_PASSAGES_KEY = "doc_passages"
SOURCE_KEY = "source"


def row_source(source: str | os.PathLike[str] | Sequence[Document] | None) -> str | None:
    """The resolved path by which rows name a folder or file source; None for a list of documents or None."""
    return str(Path(source).resolve()) if isinstance(source, (str, os.PathLike)) else None


def stored_documents(collection: Any, page: int = 5000) -> dict[str, StoredDocument]:
    """What a passage collection holds, by doc id: passage counts per content version, and each one's source."""
    return documents_in_rows(record["metadatas"] for record in iter_all(collection, ["metadatas"], page))


def documents_in_rows(metadatas: Iterable[Any]) -> dict[str, StoredDocument]:
    """The documents that passage rows' metadata describe, by doc id."""
    held: dict[str, StoredDocument] = {}
    for meta in metadatas:
        meta = meta or {}
        doc_id = str(meta.get("document_id", ""))
        doc = held.setdefault(doc_id, StoredDocument(doc_id))
        version = str(meta.get(DOC_HASH_KEY, ""))  # rows written before syncs existed have no version
        doc.passages_by_hash[version] = doc.passages_by_hash.get(version, 0) + 1
        doc.expected_passages = meta.get(DOC_PASSAGES_KEY, doc.expected_passages)
        doc.source = meta.get(SOURCE_KEY, doc.source) or None
    return held


def incoming_documents(documents: Iterable[Document]) -> list[IncomingDocument]:
    """Each document as a sync plans it: its doc id and the content hash its rows carry."""
    return [IncomingDocument(doc.id_, content_hash(str(doc.metadata.get("title", "")), doc.text))
            for doc in documents]


def versioned_nodes(documents: Sequence[Document], source: str | None, chunk_size: int,
                    chunk_overlap: int) -> list[TextNode]:
    """The passages of ``documents``, each tagged with its document's version, passage count and source."""
    nodes = chunk_documents(documents, chunk_size, chunk_overlap)
    per_doc = Counter(n.ref_doc_id for n in nodes)
    versions = {d.doc_id: d.content_hash for d in incoming_documents(documents)}
    for node in nodes:
        tags: dict[str, Any] = {DOC_HASH_KEY: versions[node.ref_doc_id], DOC_PASSAGES_KEY: per_doc[node.ref_doc_id]}
        if source is not None:
            tags[SOURCE_KEY] = source
        node.metadata = {**node.metadata, **tags}
        node.excluded_embed_metadata_keys = sorted({*node.excluded_embed_metadata_keys, *tags})
        node.excluded_llm_metadata_keys = sorted({*node.excluded_llm_metadata_keys, *tags})
    return nodes


def passage_nodes(
    documents: Sequence[Document], source: str | os.PathLike[str] | Sequence[Document] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP) -> list[TextNode]:
    """The passages of ``documents`` exactly as this index stores them (ids and metadata), so the graph index's own
    passages are the same nodes: LlamaIndex's fusion merges nodes only when their ``node.hash`` (metadata too) match."""
    return versioned_nodes(documents, row_source(source), chunk_size, chunk_overlap)


def distinct_documents(documents: Sequence[Document]) -> list[Document]:
    """The documents with exact repeats (same doc id, same content) dropped.

    Raises:
        CorpusError: two documents share a doc id but not their content."""
    versions: dict[str, str] = {}
    kept = []
    for doc, incoming in zip(documents, incoming_documents(documents), strict=True):
        if doc.id_ not in versions:
            versions[doc.id_] = incoming.content_hash
            kept.append(doc)
        elif versions[doc.id_] != incoming.content_hash:
            raise CorpusError(f"two different documents share the doc id {doc.id_!r}; doc ids must be unique")
    return kept
