"""One writer per store across processes: a lock file in the store's folder that names its holder.

Readers never take it (they pin one saved version instead); writers (a sync, a delete, a graph save) hold it for
their whole change, so two ``mhop index`` runs on one store run one after the other. The lock is an OS file lock
(``filelock``), released by the OS when its holder dies, so a killed writer never leaves the store locked; the
holder's pid is written beside it only to say who is waited for.

Taking the lock is a writer's first write, so a folder that cannot be written (a read-only mount, a folder of
another user) is found there, before anything else is written, and refused in one line naming it
(:class:`ReadOnlyStoreError`). The write itself decides, not the permission bits, which root ignores.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

__all__ = ["DEFAULT_LOCK_TIMEOUT", "LOCK_FILE", "ReadOnlyStoreError", "StoreLockedError", "store_lock"]

logger = logging.getLogger(__name__)

LOCK_FILE = ".mhop-writer.lock"
HOLDER_FILE = ".mhop-writer.holder"
#: Seconds a writer waits for another before giving up (a sync of a large corpus can take a while).
DEFAULT_LOCK_TIMEOUT = 600.0

_registry_lock = threading.Lock()
_locks: dict[str, FileLock] = {}


class StoreLockedError(RuntimeError):
    """Another writer held the store's lock for longer than the wait allowed."""


class ReadOnlyStoreError(OSError):
    """The store's folder cannot be written: a change is refused before it writes anything."""

    @classmethod
    def of(cls, folder: Path, exc: OSError) -> ReadOnlyStoreError:
        reason = exc.strerror or type(exc).__name__
        return cls(exc.errno, f"{folder} cannot be written ({reason}): changing the store needs a writable folder; "
                              "queries only read it")

    def __str__(self) -> str:
        return str(self.strerror)


def _holder(folder: Path) -> str:
    try:
        return (folder / HOLDER_FILE).read_text(encoding="utf-8", errors="replace").strip()[:200] or "unknown"
    except OSError:
        return "unknown"


def _file_lock(folder: Path) -> FileLock:
    key = str(folder.resolve())
    with _registry_lock:
        if key not in _locks:
            # One re-entrant lock object per folder and thread: nested writers of one thread (a CLI command
            # around a sync) take it once; other threads and processes wait on the OS lock.
            _locks[key] = FileLock(str(folder / LOCK_FILE), thread_local=True)
        return _locks[key]


@contextmanager
def store_lock(folder: str | os.PathLike[str], timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the writer lock of the store in ``folder`` (created if missing) for the ``with`` block.

    Raises:
        StoreLockedError: another writer held it for ``timeout`` seconds; the message names it.
        ReadOnlyStoreError: the folder cannot be written; the message names it.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        lock = _file_lock(folder)
        outermost = not lock.is_locked
        lock.acquire(timeout=0)
    except Timeout:  # an OSError too: told apart first
        holder = _holder(folder)
        logger.warning("waiting for the writer lock of %s, held by %s", folder, holder)
        try:
            lock.acquire(timeout=timeout)
        except Timeout:
            raise StoreLockedError(
                f"{folder} is being written by {holder} for over {timeout:g} s; try again when it has finished"
            ) from None
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
