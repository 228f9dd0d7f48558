"""The version of a Chroma passage collection that every process sees: a seqlock kept in Chroma itself.

In one process, :mod:`.rwlock` keeps queries out of a sync. Another process (a query worker beside ``mhop index``,
on one embedded store or one Chroma server) cannot see that lock, so the writer also marks the collection's
version row, which lives in the collection's sync log beside the collection: ``writing`` before its first change,
the next ``generation`` after its last. A search that found the row unmarked and at the same generation before
and after it read one whole version; otherwise it waits for the writer and searches again.

An embedded store (``chromadb.PersistentClient``) serves one process: Chroma holds its vector index in memory, so
after another process writes, this one's searches return removed passages (empty) and miss new ones for good. A
reader of an embedded store that finds a generation it did not write, or another process writing, before or after
its search, refuses it (:class:`StaleStoreError`) rather than serve that; processes that share a collection share a Chroma server.
There, one read of the row before each search is enough: this process's own writes are kept out by its lock.

A writer killed half-way leaves the row marked. Its ``heartbeat`` (renewed with each batch it writes) tells the
readers: a mark not renewed for :data:`ABANDONED_AFTER` seconds is an abandoned write, searched through with a
warning until the next sync of the collection (which resumes it, :mod:`.sync`) clears it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["ABANDONED_AFTER", "READER_WAIT", "StaleStoreError", "StoreBusyError", "Version", "VersionMarker"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

VERSION_ROW = "version"
#: Seconds without a renewed heartbeat after which a marked write counts as abandoned (its writer died).
ABANDONED_AFTER = 60.0
#: Seconds a search waits for another process's write to finish before giving up.
READER_WAIT = 600.0
_POLL = 0.02


class StoreBusyError(RuntimeError):
    """Another process kept writing the collection for longer than a search waits."""


class StaleStoreError(RuntimeError):
    """Another process changed a collection of the embedded Chroma store this process reads: its view is stale."""


#: The last generation of each collection (by its Chroma id) this process's view holds: the one found when it
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

    def abandoned(self, now: float) -> bool:
        return self.writing and now - self.heartbeat > ABANDONED_AFTER


class VersionMarker:
    """The version row of one collection, in its sync log collection ``log`` (any Chroma collection the package
    owns beside it; rows there carry a one-number vector)."""

    def __init__(self, log: Any, name: str, embedded: bool = False) -> None:
        self.log = log
        self.name = name
        self.embedded = embedded
        self._warned_abandoned = False
        self._depth = 0  # writes nest (a sync's batches are LlamaIndex inserts): the outermost one marks
        self._generation = 0  # the generation the outermost write started from
        self._key = str(getattr(log, "id", name))
        with _viewed_lock:
            if self._key not in _viewed:
                _viewed[self._key] = self.read().generation

    def read(self) -> Version:
        rows = self.log.get(ids=[VERSION_ROW], include=["metadatas"])["metadatas"]
        meta = rows[0] if rows else None
        if not meta:
            return Version()
        return Version(int(meta.get("generation", 0)), bool(meta.get("writing", False)),
                       float(meta.get("heartbeat", 0.0)), int(meta.get("writer", 0)))

    def _write(self, version: Version) -> None:
        self.log.upsert(ids=[VERSION_ROW], embeddings=[[0.0]],
                        metadatas=[{"generation": version.generation, "writing": version.writing,
                                    "heartbeat": version.heartbeat, "writer": version.writer}])

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Mark a write for the ``with`` block. A write inside another (a batch of a sync) renews the outer one's
        heartbeat instead. The caller holds the collection's write lock, so one thread marks at a time."""
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
            if self._depth == 0:
                self._finish(self._generation + 1, failed)

    def _finish(self, generation: int, failed: bool) -> None:
        """End a write, also a failed one: what was written is a version (a sync resumes from it), and readers
        must not wait for a writer that has stopped."""
        with _viewed_lock:  # first: a reader of this process must never find a version it did not see
            _viewed[self._key] = generation
        try:
            self._write(Version(generation, False, time.time(), os.getpid()))
        except Exception:
            if not failed:
                raise
            # The store that failed the write may fail this too: the mark's heartbeat then lets readers on, and
            # the write's own error is the one to report.
            logger.warning("collection %s: could not mark the end of a failed write", self.name)

    def read_whole(self, search: Callable[[], T], wait: float = READER_WAIT) -> tuple[T, Version]:
        """``search()`` run until it began and ended on one unmarked version (waiting while a write runs), and
        that version.

        Raises:
            StoreBusyError: another process kept writing for ``wait`` seconds.
            StaleStoreError: another process changed the collection of this embedded store.
        """
        from chromadb.errors import InternalError

        deadline = time.monotonic() + wait
        while True:
            before = self.read()
            self._check_view(before)
            if self.embedded:
                # Only this process writes an embedded store it can read: its own writes are kept out by the
                # collection's lock, which the search takes. Another's are refused above, or below when one began
                # during the search (what the search read may then be half a version).
                result = search()
                self._check_view(self.read())
                return result, before
            if before.writing and not self._abandoned(before):
                self._wait_or_give_up(deadline, wait)
                continue
            try:
                result, failure = search(), None
            except InternalError as exc:  # an id another process removed meanwhile: searched again below
                result, failure = None, exc
            if self.read() == before:
                if failure is not None:
                    raise failure
                return result, before  # type: ignore[return-value]
            self._wait_or_give_up(deadline, wait)

    def _check_view(self, version: Version) -> None:
        """Refuse an embedded store's collection another process writes or wrote since this process last saw it
        (a write of this process moves the generation this process holds first, so it is never newer)."""
        viewed = _viewed.get(self._key, version.generation)
        foreign_write = version.writing and version.writer != os.getpid()
        if self.embedded and (version.generation > viewed or foreign_write):
            raise StaleStoreError(
                f"collection {self.name!r} of this embedded Chroma store was changed by another process (version "
                f"{version.generation}, this process holds {viewed}), and an embedded store's vector index is "
                "held in each process's memory: share a Chroma server between processes (chroma run; mhop "
                "--chroma-host), or open the store again in a new process")

    def _abandoned(self, version: Version) -> bool:
        if not version.abandoned(time.time()):
            return False
        if not self._warned_abandoned:
            self._warned_abandoned = True
            logger.warning("collection %s: a write stopped half-way over %.0f s ago; searching it as it is until "
                           "the next sync (mhop index, sync_vector_index) completes it", self.name, ABANDONED_AFTER)
        return True

    def _wait_or_give_up(self, deadline: float, wait: float) -> None:
        if time.monotonic() > deadline:
            raise StoreBusyError(f"collection {self.name!r} has been written by another process for over "
                                 f"{wait:g} s; try again when its sync has finished")
        time.sleep(_POLL)
