"""A readers-writer lock, and one per Chroma collection, so a query never sees a sync half done.

Queries share the read side; a sync holds the write side for its whole change. A waiting writer blocks new
readers, so a stream of queries cannot starve a sync.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["ReadWriteLock", "collection_lock"]


class ReadWriteLock:
    """Many readers or one writer; the writer is re-entrant in its own thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writer_depth = 0
        self._writers_waiting = 0

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
                self._cond.notify_all()


_registry_lock = threading.Lock()
_locks: dict[str, ReadWriteLock] = {}


def collection_lock(collection: object) -> ReadWriteLock:
    """The process-wide lock of a Chroma collection, keyed by the collection's id (stable across clients)."""
    key = str(getattr(collection, "id", id(collection)))
    with _registry_lock:
        return _locks.setdefault(key, ReadWriteLock())
