"""A readers-writer lock, and one per Chroma collection, so a query never sees a sync half done.

Queries share the read side; a sync holds the write side for its whole change. A waiting writer blocks new
readers, so a stream of queries cannot starve a sync. Each finished write bumps the lock's ``generation``; a
retrieval of several searches notes the version each search read (:func:`tracking_reads`, :func:`note_read`), so
it can tell when a sync fell between two of its searches and run again on one version, without holding the read
side (and stalling every sync) across its LM calls.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock", "collection_lock", "note_read", "tracking_reads"]


class ReadWriteLock:
    """Many readers or one writer; the writer is re-entrant in its own thread."""

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
        with self._cond:
            if self._writer == me:  # a writer may read what it is writing
                self._readers += 1
            else:
                while self._writer is not None or self._writers_waiting:
                    self._cond.wait()
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
            if self._writer == me:
                self._writer_depth += 1
            else:
                self._writers_waiting += 1
                while self._writer is not None or self._readers:
                    self._cond.wait()
                self._writers_waiting -= 1
                self._writer, self._writer_depth = me, 1
        try:
            yield
        finally:
            with self._cond:
                self._writer_depth -= 1
                if self._writer_depth == 0:
                    self._writer = None
                    self.generation += 1
                self._cond.notify_all()


_registry_lock = threading.Lock()
_locks: dict[str, ReadWriteLock] = {}


def collection_lock(collection: object) -> ReadWriteLock:
    """The process-wide lock of a Chroma collection, keyed by the collection's id (stable across clients)."""
    key = str(getattr(collection, "id", id(collection)))
    with _registry_lock:
        return _locks.setdefault(key, ReadWriteLock())


#: The versions each lock's store was read at during the current retrieval (None: no retrieval is tracking).
_reads: contextvars.ContextVar[dict[int, set[tuple[int, ...]]] | None] = contextvars.ContextVar("mhop_reads",
                                                                                                default=None)


@contextmanager
def tracking_reads() -> Iterator[dict[int, set[tuple[int, ...]]]]:
    """Note, for the ``with`` block (threads it starts with a copy of the context included), the version of every
    store read through :func:`note_read`; the block saw one version of each store when every set has one element.
    A block inside another passes what it noted to the outer one when it ends."""
    seen: dict[int, set[tuple[int, ...]]] = {}
    outer = _reads.get()
    token = _reads.set(seen)
    try:
        yield seen
    finally:
        _reads.reset(token)
        if outer is not None:
            for key, versions in seen.items():
                outer.setdefault(key, set()).update(versions)


def note_read(lock: ReadWriteLock, *version: int) -> None:
    """Record that the caller read the store ``lock`` guards at ``version`` (the lock's generation, taken under its
    read side, then whatever else names the store's version, such as its cross-process generation)."""
    seen = _reads.get()
    if seen is not None:
        seen.setdefault(id(lock), set()).add(version)
