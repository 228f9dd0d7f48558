"""The sync rule every store of the package follows, as pure functions over doc ids (:func:`source_doc_ids`)
and content hashes: add the documents the store does not hold, replace those whose stored content differs or
is incomplete (an interrupted write), leave the rest, and, when mirroring a source, remove its documents gone
from it. Each step of applying a :class:`SyncPlan` is idempotent: run again after a crash, it converges."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath

__all__ = ["IncomingDocument", "StoredDocument", "SyncPlan", "UnknownDocumentError", "match_doc_ids", "plan_sync",
           "resolve_doc_id", "source_doc_ids"]


@dataclass(frozen=True)
class IncomingDocument:
    """A document offered to a store: its id and content hash."""

    doc_id: str
    content_hash: str


@dataclass
class StoredDocument:
    """What a store holds of one document: its passages per content version (two versions, or fewer than
    ``expected_passages``, mean an interrupted write) and the folder or file it was indexed from."""

    doc_id: str
    passages_by_hash: dict[str, int] = field(default_factory=dict)
    expected_passages: int | None = None
    source: str | None = None

    def is_complete_version_of(self, incoming: IncomingDocument) -> bool:
        """True when exactly one version is stored, it is ``incoming``'s, and none of its passages is missing."""
        return (set(self.passages_by_hash) == {incoming.content_hash}
                and self.passages_by_hash[incoming.content_hash] == self.expected_passages)


@dataclass(frozen=True)
class SyncPlan:
    """What a sync does, by doc id."""

    added: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return bool(self.added or self.updated or self.removed)

    def counts(self) -> dict[str, int]:
        """``{"added": n, "updated": n, "removed": n, "unchanged": n}``."""
        return {name: len(ids) for name, ids in asdict(self).items()}


def plan_sync(incoming: Sequence[IncomingDocument], stored: Mapping[str, StoredDocument],
              mirror_source: str | None = None) -> SyncPlan:
    """The plan that brings a store holding ``stored`` (by doc id) to what ``incoming`` asks for; with
    ``mirror_source``, that source's stored documents not in ``incoming`` are removed.

    Raises:
        ValueError: two incoming documents share a doc id."""
    seen: set[str] = set()
    added, updated, unchanged = [], [], []
    for doc in incoming:
        if doc.doc_id in seen:
            raise ValueError(f"two documents share the doc id {doc.doc_id!r}; doc ids must be unique")
        seen.add(doc.doc_id)
        held = stored.get(doc.doc_id)
        if held is None or not held.passages_by_hash:
            added.append(doc.doc_id)
        elif held.is_complete_version_of(doc):
            unchanged.append(doc.doc_id)
        else:
            updated.append(doc.doc_id)
    removed = [] if mirror_source is None else sorted(
        d for d, held in stored.items() if held.source == mirror_source and d not in seen)
    return SyncPlan(tuple(added), tuple(updated), tuple(removed), tuple(unchanged))


def source_doc_ids(doc_ids: Iterable[str], stored: Mapping[str, StoredDocument], source: str) -> dict[str, str]:
    """The doc id each document read from ``source`` is stored under, by the id it was read with: that id, unless
    another source (or the API) holds it, then ``source/id``; a document once stored under either keeps it.

    Raises:
        ValueError: ``source/id`` too is held by another source (nothing is written)."""
    chosen = {}
    for doc_id in doc_ids:
        qualified = f"{source}/{doc_id}"
        held, held_qualified = stored.get(doc_id), stored.get(qualified)
        if held_qualified is not None and held_qualified.source != source:
            raise ValueError(f"{doc_id!r} of {source} clashes with {qualified!r} indexed from "
                              f"{held_qualified.source or 'the API'}; delete one of them first (mhop delete)")
        keeps_id = held_qualified is None and (held is None or held.source == source)
        chosen[doc_id] = doc_id if keeps_id else qualified
    return chosen


class UnknownDocumentError(KeyError):
    """A doc id no store holds; the message lists the closest ones it does."""

    def __str__(self) -> str:  # KeyError quotes its argument; this one is a sentence
        return str(self.args[0])


_CLOSE_MATCHES = 5


def _file_name(doc_id: str) -> str:
    return PurePosixPath(doc_id.replace("\\", "/")).name


def resolve_doc_id(doc_id: str, known: Iterable[str]) -> str:
    """The known doc id ``doc_id`` names: itself, or the one document whose file name it is.

    Raises:
        UnknownDocumentError: no document has this id or file name (close matches listed), or several have."""
    ids = sorted(set(known))
    if doc_id in ids:
        return doc_id
    by_name = [k for k in ids if _file_name(k) == doc_id]
    if len(by_name) == 1:
        return by_name[0]
    if by_name:
        raise UnknownDocumentError(f"{doc_id!r} names {len(by_name)} documents: {', '.join(by_name[:10])}; "
                                   "give the full doc id")
    close = difflib.get_close_matches(doc_id, ids, n=_CLOSE_MATCHES, cutoff=0.6)
    names = {_file_name(k): k for k in ids}
    by_file_name = difflib.get_close_matches(doc_id, list(names), n=_CLOSE_MATCHES)
    close += [names[n] for n in by_file_name if names[n] not in close]
    hint = (f"; close matches: {', '.join(close[:_CLOSE_MATCHES])}" if close
            else f"; the index holds {len(ids)} documents")
    raise UnknownDocumentError(f"no passage or document with id {doc_id!r}{hint}")


def match_doc_ids(requested: Iterable[str], known: Iterable[str],
                  missing: list[UnknownDocumentError] | None = None) -> list[str]:
    """:func:`resolve_doc_id` for each of ``requested`` (raising as it does); given a ``missing`` list, an id that
    names no document is left out and its error appended there instead."""
    known_ids = set(known)
    names = {_file_name(k) for k in known_ids}
    resolved = []
    for doc_id in requested:
        try:
            resolved.append(resolve_doc_id(doc_id, known_ids))
        except UnknownDocumentError as exc:
            if missing is None or doc_id in names:  # a name of several documents is the caller's mistake
                raise
            missing.append(exc)
    return resolved
