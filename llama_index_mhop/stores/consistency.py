"""One writer per store folder across processes: an OS file lock naming its holder (:func:`store_lock`); the record
of a collection's last sync (:func:`sync_log`); the errors of a store that is locked, read-only, kept busy or stale.
How a search reads one whole version of a collection is :mod:`.search`'s."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

__all__ = ["DEFAULT_LOCK_TIMEOUT", "LOCK_FILE", "ReadOnlyStoreError", "StaleStoreError", "StoreBusyError",
           "StoreLockedError", "store_lock", "sync_log"]

logger = logging.getLogger(__name__)

#: Seconds a writer waits for another before giving up (a sync of a large corpus can take a while).
DEFAULT_LOCK_TIMEOUT = 600.0
LOCK_FILE = ".mhop-writer.lock"
HOLDER_FILE = ".mhop-writer.holder"


class StoreBusyError(RuntimeError):
    """Another process kept writing the collection, or syncs kept landing in a retrieval, for too long."""


class StaleStoreError(RuntimeError):
    """Another process changed a collection of the embedded Chroma store this process reads: its view is stale."""


class StoreLockedError(RuntimeError):
    """Another writer held the store's lock for longer than the wait allowed."""


class ReadOnlyStoreError(OSError):
    """The store's folder cannot be written: a change is refused before it writes anything."""

    @classmethod
    def of(cls, folder: Path, exc: OSError) -> ReadOnlyStoreError:
        return cls(exc.errno, f"{folder} cannot be written ({exc.strerror or type(exc).__name__}): "
                              "changing the store needs a writable folder; queries only read it")

    def __str__(self) -> str:
        return str(self.strerror)


def sync_log(client: Any, collection_name: str) -> Any:
    """The collection beside a passage collection holding the last sync's time and counts, and the version row
    (Chroma refuses metadata changes on a collection created with a distance function)."""
    return client.get_or_create_collection(f"{collection_name}.sync")


_file_locks: dict[str, FileLock] = {}
_file_locks_guard = threading.Lock()


@contextmanager
def store_lock(folder: str | os.PathLike[str], timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the writer lock of the store in ``folder`` (created if missing) for the ``with`` block: an OS file lock,
    released when its holder dies; readers never take it. Taken first, it refuses an unwritable folder early.

    Raises:
        StoreLockedError: another writer held it for ``timeout`` seconds; the message names it.
        ReadOnlyStoreError: the folder cannot be written; the message names it."""
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _file_locks_guard:  # one lock object per folder, thread-local: nested writers of a thread take it once
            key = str(folder.resolve())
            lock = _file_locks[key] = _file_locks.get(key) or FileLock(str(folder / LOCK_FILE), thread_local=True)
        outermost = not lock.is_locked
        lock.acquire(timeout=0)
    except Timeout:  # an OSError too: told apart first
        try:
            holder = (folder / HOLDER_FILE).read_text(encoding="utf-8", errors="replace").strip()[:200] or "unknown"
        except OSError:
            holder = "unknown"
        logger.warning("waiting for the writer lock of %s, held by %s", folder, holder)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise StoreLockedError(f"{folder} is being written by {holder} for over {timeout:g} s; "
                                   "try again when it has finished") from None
    except OSError as exc:
        raise ReadOnlyStoreError.of(folder, exc) from None
    try:
        if outermost:
            try:
                (folder / HOLDER_FILE).write_text(f"pid {os.getpid()}", encoding="utf-8")
            except OSError as exc:
                raise ReadOnlyStoreError.of(folder, exc) from None
        yield
    finally:
        lock.release()
