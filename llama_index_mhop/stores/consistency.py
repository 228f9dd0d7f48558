"""Every read of a passage collection sees one whole version of it, in this process and across processes.

- In a process, a readers-writer lock per collection: queries share the read side, a sync holds the write side.
- Across processes, the collection's version row (a seqlock kept in Chroma, :class:`VersionMarker`).
- One writer per store folder across processes: an OS file lock naming its holder (:func:`store_lock`).
- A retrieval of several searches runs again while a sync landed between two of them (:func:`read_one_version`),
  rather than hold the read side, and stall every sync, across its LM calls.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from filelock import FileLock, Timeout

__all__ = ["DEFAULT_LOCK_TIMEOUT", "LOCK_FILE", "ReadOnlyStoreError", "StaleStoreError", "StoreBusyError",
           "StoreLockedError", "VersionMarker", "aread_one_version", "collection_lock", "read_guarded",
           "read_one_version", "store_lock", "sync_log", "version_marker"]

logger = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")

#: Seconds without a renewed heartbeat after which a marked write counts as abandoned (its writer died).
ABANDONED_AFTER = 60.0
#: Seconds a read waits for other processes' writes (and a retrieval for syncs landing in it) before giving up.
READER_WAIT = 600.0
#: Seconds a writer waits for another before giving up (a sync of a large corpus can take a while).
DEFAULT_LOCK_TIMEOUT = 600.0
LOCK_FILE = ".mhop-writer.lock"
HOLDER_FILE = ".mhop-writer.holder"
VERSION_ROW = "version"
_POLL = 0.02


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
        reason = exc.strerror or type(exc).__name__
        return cls(exc.errno, f"{folder} cannot be written ({reason}): changing the store needs a writable folder; "
                              "queries only read it")

    def __str__(self) -> str:
        return str(self.strerror)


class ReadWriteLock:
    """Many readers or one writer, re-entrant in its thread; a waiting writer blocks new readers (no starving)."""

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
        with self._cond:  # a writer may read what it is writing
            self._cond.wait_for(lambda: self._writer == me or (self._writer is None and not self._writers_waiting))
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
            if self._writer != me:
                self._writers_waiting += 1
                self._cond.wait_for(lambda: self._writer is None and not self._readers)
                self._writers_waiting -= 1
                self._writer = me
            self._writer_depth += 1
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
_file_locks: dict[str, FileLock] = {}


def collection_lock(collection: object) -> ReadWriteLock:
    """The process-wide lock of a Chroma collection, keyed by the collection's id (stable across clients)."""
    key = str(getattr(collection, "id", id(collection)))
    with _registry_lock:
        return _locks.setdefault(key, ReadWriteLock())


#: The last generation of each collection (by its sync log's id) this process's view holds: the one found when it
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


class VersionMarker:
    """The version row of collection ``name`` in its sync log ``log``. A writer marks it ``writing`` before its first
    change and sets the next ``generation`` after its last; a search that found it unmarked and unchanged before and
    after read one whole version, else it waits and searches again. A mark whose ``heartbeat`` went unrenewed for
    :data:`ABANDONED_AFTER` seconds is a killed writer's, searched through (with a warning) until the next sync.
    An embedded store holds its vector index in each process's memory: a reader refuses one another process
    changed (:class:`StaleStoreError`), as processes must share a Chroma server."""

    def __init__(self, log: Any, name: str, embedded: bool = False) -> None:
        self.log = log
        self.name = name
        self.embedded = embedded
        self._warned_abandoned = False
        self._depth, self._generation = 0, 0  # writes nest (a sync's batches): the outermost marks, from this one
        self._key = str(getattr(log, "id", name))
        with _viewed_lock:
            if self._key not in _viewed:
                _viewed[self._key] = self.read().generation

    def read(self) -> Version:
        rows = self.log.get(ids=[VERSION_ROW], include=["metadatas"])["metadatas"]
        return Version(**rows[0]) if rows and rows[0] else Version()

    def _write(self, version: Version) -> None:
        self.log.upsert(ids=[VERSION_ROW], embeddings=[[0.0]], metadatas=[asdict(version)])

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Mark a write for the ``with`` block (one inside another, a sync's batch, renews the outer's heartbeat).
        The caller holds the collection's write lock, so one thread marks at a time."""
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
            if self._depth == 0:  # a failed write ends too: what it wrote is a version (a sync resumes from it)
                with _viewed_lock:  # first: a reader of this process must never find a version it did not see
                    _viewed[self._key] = self._generation + 1
                try:
                    self._write(Version(self._generation + 1, False, time.time(), os.getpid()))
                except Exception:
                    if not failed:
                        raise  # else the heartbeat lets readers on, and the write's own error is the one to report
                    logger.warning("collection %s: could not mark the end of a failed write", self.name)

    def read_whole(self, search: Callable[[], T]) -> tuple[T, Version]:
        """``search()`` run until it began and ended on one unmarked version (waiting while a write runs), and
        that version.

        Raises:
            StoreBusyError: another process kept writing for :data:`READER_WAIT` seconds.
            StaleStoreError: another process changed the collection of this embedded store.
        """
        from chromadb.errors import InternalError

        deadline = time.monotonic() + READER_WAIT
        while True:
            before = self.read()
            self._check_view(before)
            if self.embedded:
                # Only this process writes an embedded store it reads, kept out by the collection's lock, which
                # the search takes; another's write is refused above, or below when it began during the search.
                result = search()
                self._check_view(self.read())
                return result, before
            if before.writing and not self._abandoned(before):
                self._wait_or_give_up(deadline)
                continue
            try:
                result, failure = search(), None
            except InternalError as exc:  # an id another process removed meanwhile: searched again below
                result, failure = None, exc
            if self.read() == before:
                if failure is not None:
                    raise failure
                return result, before  # type: ignore[return-value]
            self._wait_or_give_up(deadline)

    def _check_view(self, version: Version) -> None:
        """Refuse an embedded store's collection another process writes or wrote since this process saw it."""
        viewed = _viewed.get(self._key, version.generation)
        foreign_write = version.writing and version.writer != os.getpid()
        if self.embedded and (version.generation > viewed or foreign_write):
            raise StaleStoreError(
                f"collection {self.name!r} of this embedded Chroma store was changed by another process (version "
                f"{version.generation}, this process holds {viewed}), and an embedded store's vector index is "
                "held in each process's memory: share a Chroma server between processes (chroma run; mhop "
                "--chroma-host), or open the store again in a new process")

    def _abandoned(self, version: Version) -> bool:
        if not version.writing or time.time() - version.heartbeat <= ABANDONED_AFTER:
            return False
        if not self._warned_abandoned:
            self._warned_abandoned = True
            logger.warning("collection %s: a write stopped half-way over %.0f s ago; searching it as it is until "
                           "the next sync (mhop index, sync_vector_index) completes it", self.name, ABANDONED_AFTER)
        return True

    def _wait_or_give_up(self, deadline: float) -> None:
        if time.monotonic() > deadline:
            raise StoreBusyError(f"collection {self.name!r} has been written by another process for over "
                                 f"{READER_WAIT:g} s; try again when its sync has finished")
        time.sleep(_POLL)


def sync_log(client: Any, collection_name: str) -> Any:
    """The collection beside a passage collection holding the last sync's time and counts, and the version row
    (Chroma refuses metadata changes on a collection created with a distance function)."""
    return client.get_or_create_collection(f"{collection_name}.sync")


def version_marker(client: Any, collection: Any) -> VersionMarker:
    """The version row of a passage collection, in its sync log in ``client``."""
    settings = client.get_settings()
    embedded = bool(settings.is_persistent and not settings.chroma_server_host)
    return VersionMarker(sync_log(client, collection.name), collection.name, embedded=embedded)


#: The versions each lock's collection was read at during the running retrieval (None: none is tracking).
_reads: contextvars.ContextVar[dict[int, set[tuple[int, ...]]] | None] = contextvars.ContextVar("mhop_reads",
                                                                                                default=None)


def read_guarded(collection: Any, marker: VersionMarker | None, read: Callable[[], T]) -> T:
    """``read()`` of a collection under its read lock and at one whole version across processes (``marker``;
    None: this process alone), noted for the running :func:`read_one_version`.

    Raises:
        StaleStoreError: another process changed the collection of this embedded store.
        StoreBusyError: another process kept writing it for longer than a read waits.
    """
    lock = collection_lock(collection)

    def locked() -> tuple[T, int]:
        with lock.read():
            return read(), lock.generation

    if marker is None:
        (result, generation), version = locked(), ()
    else:
        (result, generation), row = marker.read_whole(locked)
        version = (row.generation,)
    seen = _reads.get()
    if seen is not None:
        seen.setdefault(id(lock), set()).add((generation, *version))
    return result


@contextmanager
def _tracking(seen: dict[int, set[tuple[int, ...]]]) -> Iterator[None]:
    """Note in ``seen`` the versions read in the block (threads it starts with a copy of the context included);
    a block inside another passes them on to it."""
    outer = _reads.get()
    token = _reads.set(seen)
    try:
        yield
    finally:
        _reads.reset(token)
        if outer is not None:
            for key, versions in seen.items():
                outer.setdefault(key, set()).update(versions)


def _runs() -> Iterator[AbstractContextManager[None]]:
    """A retrieval's runs: another while the last read two versions of a collection, until READER_WAIT."""
    deadline = time.monotonic() + READER_WAIT
    while True:
        seen: dict[int, set[tuple[int, ...]]] = {}
        yield _tracking(seen)
        if all(len(versions) == 1 for versions in seen.values()):
            return
        if time.monotonic() > deadline:
            raise StoreBusyError(f"syncs kept changing the index during this retrieval for over {READER_WAIT:g} s")


def read_one_version(retrieve: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """``retrieve(...)``, run again (its LM steps included) while a sync landed between two of its reads of one
    collection, so what it returns was read from one version of each.

    Raises:
        StoreBusyError: syncs kept landing between its reads for :data:`READER_WAIT` seconds.
    """
    for run in _runs():
        with run:
            result = retrieve(*args, **kwargs)
    return result


async def aread_one_version(retrieve: Callable[P, Awaitable[T]], *args: P.args, **kwargs: P.kwargs) -> T:
    """:func:`read_one_version` of an awaited retrieval."""
    for run in _runs():
        with run:
            result = await retrieve(*args, **kwargs)
    return result


@contextmanager
def store_lock(folder: str | os.PathLike[str], timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the writer lock of the store in ``folder`` (created if missing) for the ``with`` block: an OS file lock,
    released when its holder dies; readers never take it. Taken first, it refuses an unwritable folder early.

    Raises:
        StoreLockedError: another writer held it for ``timeout`` seconds; the message names it.
        ReadOnlyStoreError: the folder cannot be written; the message names it.
    """
    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with _registry_lock:  # one lock object per folder, thread-local: nested writers of a thread take it once
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
