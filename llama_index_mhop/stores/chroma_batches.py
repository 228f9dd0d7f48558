"""Chroma reads, vector writes and deletes by id, in batches under Chroma's maximum batch size (decided once for
the passage index and the graph index's stores)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

__all__ = [
    "CHROMA_BATCH", "all_ids", "delete_ids", "existing_ids", "get_records", "iter_all", "pages", "upsert_vectors",
]

#: Ids per Chroma call: well under Chroma's maximum batch size.
CHROMA_BATCH = 2000


def _batches(ids: Sequence[str], size: int) -> list[list[str]]:
    return [list(ids[start : start + size]) for start in range(0, len(ids), size)]


def existing_ids(collection: Any, ids: Sequence[str], batch: int = CHROMA_BATCH) -> set[str]:
    """The ids among ``ids`` that the collection holds."""
    return {found for chunk in _batches(ids, batch) for found in collection.get(ids=chunk, include=[])["ids"]}


def get_records(collection: Any, ids: Sequence[str], include: list[str],
                batch: int = CHROMA_BATCH) -> dict[str, dict[str, Any]]:
    """``{id: {field: value}}`` for the ids present in the collection (``include`` names the fields)."""
    out: dict[str, dict[str, Any]] = {}
    for chunk in _batches(ids, batch):
        page = collection.get(ids=chunk, include=include)
        for position, record_id in enumerate(page["ids"]):
            out[record_id] = {name: page[name][position] for name in include}
    return out


def upsert_vectors(collection: Any, ids: Sequence[str], vectors: Any, batch: int = CHROMA_BATCH) -> None:
    """Store one vector per id (row ``i`` of ``vectors`` for ``ids[i]``), with no document or metadata."""
    for start in range(0, len(ids), batch):
        collection.upsert(ids=list(ids[start : start + batch]), embeddings=vectors[start : start + batch])


def delete_ids(collection: Any, ids: Sequence[str], batch: int = CHROMA_BATCH) -> None:
    """Delete the records of ``ids`` (ids not present are ignored by Chroma)."""
    for chunk in _batches(ids, batch):
        collection.delete(ids=chunk)


def all_ids(collection: Any) -> list[str]:
    """Every record id of the collection, in one read: ids are small, and paging by offset would make the store
    skip every earlier row again for each page (half an hour at a million records, where one read takes seconds)."""
    return list(collection.get(include=[])["ids"])


def pages(collection: Any, include: list[str], batch: int = CHROMA_BATCH) -> Iterator[dict[str, Any]]:
    """The collection's records a batch at a time, each Chroma's ``get`` result for a batch of ids: the ids read
    once (:func:`all_ids`), then each batch by id, so the whole read is linear in the collection's size."""
    for chunk in _batches(all_ids(collection), batch):
        yield collection.get(ids=chunk, include=include)


def iter_all(collection: Any, include: list[str], batch: int = CHROMA_BATCH) -> list[dict[str, Any]]:
    """Every record of the collection as ``{"id": ..., field: value}``, read a batch of ids at a time."""
    return [{"id": record_id, **{name: page[name][position] for name in include}}
            for page in pages(collection, include, batch) for position, record_id in enumerate(page["ids"])]
