"""Query-state vectors and passage texts as files every query process of a persisted index maps read-only, so N
workers share one page-cache copy. Chroma stays the source of truth: each load writes its own file, names it by
content, and drops it for another process's byte-equal file (a differing one is replaced). Without a writable
folder the records stay in the heap."""

from __future__ import annotations

import filecmp
import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.lib.format import open_memmap
from scipy import sparse

from .json_files import DamagedFileError, check_file_digest, content_hash, file_digest, load_array, write_json

if TYPE_CHECKING:
    from .state import PassageRecords
    from .state_load import Snapshot

__all__ = ["SNAPSHOT_FORMAT", "SNAPSHOT_LINKS", "SNAPSHOT_MANIFEST", "STATE_FOLDER", "PassageTexts", "VectorMatrix",
           "check_folder_digests", "folder_digests", "left_by_dead_process", "normalised", "open_csr",
           "put_normalised", "remove_files_of_kind", "snapshot_folder", "write_folder", "write_snapshot",
           "write_string_column"]

logger = logging.getLogger(__name__)

STATE_FOLDER = "state_files"  # under an index's persist_dir
_KEY_DIGITS = 2 * content_hash().digest_size  # of the content hash that names a file


def _partial_path(folder: Path, kind: str, suffix: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for abandoned in folder.glob(f".{kind}.*.partial{suffix}"):
        if left_by_dead_process(abandoned):
            abandoned.unlink(missing_ok=True)
    return folder / f".{kind}.{os.getpid()}.{uuid.uuid4().hex}.partial{suffix}"


def write_folder(parent: Path, name: str, write: Callable[[Path], None], done_file: str) -> Path:
    """Write the folder ``parent/name`` whole or not at all (another process's finished copy stays). Raises OSError
    when the folder cannot be written."""
    parent.mkdir(parents=True, exist_ok=True)
    partial = parent / f".{name}.{os.getpid()}.{uuid.uuid4().hex}.partial"
    partial.mkdir()
    try:
        write(partial)
        try:
            os.rename(partial, parent / name)
        except OSError:  # another process wrote the same folder first: its copy is as good
            if not (parent / name / done_file).is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return parent / name


def folder_digests(folder: Path, manifest: str) -> dict[str, str]:
    """The digest of every file of a folder but its ``manifest``, which records them when the folder is written."""
    return {path.name: file_digest(path) for path in sorted(folder.iterdir()) if path.name != manifest}


def check_folder_digests(folder: Path, digests: object, manifest: str) -> None:
    """Check that the folder holds exactly the files ``manifest`` lists, with their digests. Raises DamagedFileError
    for a file missing, added, or changed."""
    where = folder / manifest
    if not isinstance(digests, dict) or {path.name for path in folder.iterdir()} - {manifest} != set(digests):
        raise DamagedFileError(f"{where}: the folder's files are not those it lists")
    for name, digest in digests.items():
        check_file_digest(folder / name, str(digest))


def left_by_dead_process(partial: Path) -> bool:
    """Whether a partial file or folder, named ``.<kind>.<pid>.<...>``, was left by a process that is gone."""
    pid = partial.name.split(".")[2]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def _publish(partial: Path, kind: str, suffix: str) -> Path:
    """Publish ``partial`` under its content name (or adopt an equal existing file); older ``kind`` files removed.
    Raises OSError when the folder cannot be written."""
    key = file_digest(partial)
    target = partial.with_name(f"{kind}-{key}{suffix}")
    try:
        os.link(partial, target)
    except FileExistsError:
        if filecmp.cmp(target, partial, shallow=False):
            partial.unlink()
            return target
        logger.warning("replacing %s: it does not hold what its name says", target)
        os.replace(partial, target)
    partial.unlink(missing_ok=True)
    remove_files_of_kind(target.parent, kind, suffix, keep=target)
    return target


def remove_files_of_kind(folder: Path, kind: str, suffix: str, keep: Path | None = None) -> None:
    """Remove the published files of ``kind`` in ``folder`` but ``keep`` (a process that maps one keeps its map)."""
    # The key's exact length in the pattern: "passages-*" would also match the "passages-int8-" files.
    for older in folder.glob(f"{kind}-{'[0-9a-f]' * _KEY_DIGITS}{suffix}"):
        if older != keep:
            older.unlink(missing_ok=True)


def _kept_in_memory(kind: str, folder: Path | None, exc: OSError) -> None:
    logger.warning("the %s stay in this process's memory: %s cannot be written (%s)", kind, folder, exc)


class VectorMatrix:
    """A float32 (or int8 code) matrix filled a block of rows at a time, then shared as a file of ``folder``
    (None: held in the heap); ``kind`` prefixes the file name, a new file removing older ones of its kind."""

    def __init__(self, rows: int, dimension: int, folder: Path | None, kind: str,
                 dtype: type = np.float32) -> None:
        self.kind = kind
        self.folder = folder
        self.dtype = dtype
        self._partial: Path | None = None
        if folder is not None:
            try:
                self._partial = _partial_path(folder, kind, ".npy")
                self.rows: np.ndarray = open_memmap(self._partial, mode="w+", dtype=dtype, shape=(rows, dimension))
                return
            except OSError as exc:
                _kept_in_memory(f"{kind} vectors", folder, exc)
                self.discard()
        self.rows = np.zeros((rows, dimension), dtype=dtype)

    def finish(self, used: int) -> np.ndarray:
        """The matrix of the first ``used`` rows: mapped read-only from the folder's file of the same content
        when there is one, else from this one (or the heap's matrix, without a folder)."""
        if self._partial is None:
            return self.rows if used == self.rows.shape[0] else self.rows[:used].copy()
        try:
            if used != self.rows.shape[0]:  # records were missing: the file holds only the rows found
                shorter = _partial_path(self._partial.parent, self.kind, ".npy")
                copy = open_memmap(shorter, mode="w+", dtype=self.dtype, shape=(used, self.rows.shape[1]))
                copy[:] = self.rows[:used]
                self.discard()
                self._partial, self.rows = shorter, copy
            self.rows.flush()
            return load_array(_publish(self._partial, self.kind, ".npy"), self.dtype, 2, mmap=True)
        except OSError as exc:
            _kept_in_memory(f"{self.kind} vectors", self.folder, exc)
            kept = np.array(self.rows[:used])
            self.discard()
            return kept

    def discard(self) -> None:
        """Drop the rows and their partial file (a load that fails)."""
        self.rows = np.empty((0, 0), dtype=self.dtype)
        if self._partial is not None:
            self._partial.unlink(missing_ok=True)
            self._partial = None


class PassageTexts:
    """Passages' text and metadata as JSON records in one byte file, appended a block at a time, then shared as
    :class:`~.state.PassageRecords` (``folder`` None: held in the heap)."""

    kind = "passage-texts"

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._ends: list[np.ndarray] = []
        self._size = 0
        self._partial: Path | None = None
        self._heap = bytearray()
        self._file: Any = None
        if folder is not None:
            try:
                self._partial = _partial_path(folder, self.kind, ".jsonl")
                self._file = open(self._partial, "wb")  # noqa: SIM115 - closed by finish or discard
            except OSError as exc:
                _kept_in_memory("passage texts", folder, exc)
                self.discard()

    def append(self, records: Iterable[tuple[dict[str, Any], str]]) -> None:
        """Add passages after the last one, each as ``(metadata, text)`` as its Chroma collection holds it."""
        # Keys sorted: Chroma returns a metadata dict in no fixed order, and equal records must be equal bytes.
        block = b"".join(json.dumps([metadata, text], ensure_ascii=False, sort_keys=True).encode() + b"\n"
                         for metadata, text in records)
        # One array a block, not an int a record: small objects kept between blocks of freed records would pin
        # the allocator's arenas, and the process would keep the records' memory.
        self._ends.append(np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == ord("\n")) + (self._size + 1))
        self._size += len(block)
        if self._file is not None:
            self._file.write(block)
        else:
            self._heap += block

    def finish(self) -> PassageRecords:
        """The records, mapped read-only from the folder's file of the same content when there is one."""
        # imported here: the state imports the walk, whose large-graph tier imports this module
        from .state import PassageRecords, mapped_bytes
        offsets = np.concatenate([np.zeros(1, dtype=np.int64), *self._ends])
        partial = self._partial  # set while the file is open
        if partial is not None:
            try:
                self._file.close()
                self._file = None
                path = _publish(partial, self.kind, ".jsonl")
                self._partial = None
                return PassageRecords(mapped_bytes(path), offsets)
            except OSError as exc:
                _kept_in_memory("passage texts", self.folder, exc)
                self._heap = bytearray(partial.read_bytes())
                self.discard()
        return PassageRecords(np.frombuffer(self._heap, dtype=np.uint8), offsets)

    def discard(self) -> None:
        """Drop the partial file (a load that fails)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._partial is not None:
            self._partial.unlink(missing_ok=True)
            self._partial = None


def open_csr(folder: Path, name: str, nodes: int, edges: int) -> sparse.csr_matrix:
    """The ``nodes x nodes`` CSR matrix ``name`` of ``edges`` entries, its arrays mapped (never copied)."""
    data = load_array(folder / f"{name}_data.npy", np.float64, 1, mmap=True)
    indices, indptr = (_index_array(folder / f"{name}_{part}.npy") for part in ("indices", "indptr"))
    if len(data) != edges or len(indices) != edges or len(indptr) != nodes + 1 or indices.dtype != indptr.dtype:
        raise ValueError(f"{folder / name}: expected {edges} entries over {nodes} rows")
    if indptr[0] != 0 or indptr[-1] != edges or np.any(np.diff(indptr) < 0) or (
            edges and (indices.min() < 0 or indices.max() >= nodes)):
        raise ValueError(f"{folder / name}: not a CSR matrix of {nodes} rows")
    matrix = sparse.csr_matrix((data, indices, indptr), shape=(nodes, nodes), copy=False)
    matrix.has_sorted_indices = True  # as the graph that saved it sorted them
    return matrix


def _index_array(path: Path) -> np.ndarray:
    """A CSR index array as scipy saved it: int32, or int64 past 2**31 entries."""
    try:
        return load_array(path, np.int32, 1, mmap=True)
    except ValueError:
        return load_array(path, np.int64, 1, mmap=True)


SNAPSHOT_FORMAT = 2  # 2: the manifest records every file's digest
_PREFIX = "snapshot-"
SNAPSHOT_MANIFEST = "snapshot.json"
_STRINGS = ("passage_ids", "entity_ids", "entity_names", "fact_ids", "predicates")
SNAPSHOT_LINKS = {"passage_matrix": "passages.npy", "fact_matrix": "facts.npy", "passage_texts": "passage-texts.jsonl"}


def snapshot_folder(state_folder: Path, digest: str) -> Path:
    """Where the snapshot of the save whose ``tables.json`` has ``digest`` is filed."""
    return state_folder / f"{_PREFIX}{digest}"


def write_snapshot(state_folder: Path, digest: str, snapshot: Snapshot) -> Path | None:
    """File ``snapshot`` as the save ``digest``'s; returns its folder, or None when it could not be filed."""
    target = snapshot_folder(state_folder, digest)
    if target.is_dir():
        return target
    sources = {"passage_matrix": getattr(snapshot.passage_matrix, "filename", None),
               "passage_texts": snapshot.passage_texts.path}
    if isinstance(snapshot.fact_matrix, np.ndarray):
        sources["fact_matrix"] = getattr(snapshot.fact_matrix, "filename", None)
    if any(source is None for source in sources.values()):
        return None
    paths = {key: Path(source) for key, source in sources.items()}
    try:
        write_folder(state_folder, target.name, lambda folder: _write_files(folder, snapshot, paths), SNAPSHOT_MANIFEST)
    except OSError as exc:
        logger.warning("no query snapshot in %s: %s", state_folder, exc)
        return None
    _remove_others(state_folder, target)
    return target


def _write_files(folder: Path, snapshot: Snapshot, sources: dict[str, Path]) -> None:
    columns = snapshot.columns
    for name in _STRINGS:
        write_string_column(folder, name, getattr(columns, name))
    walk = snapshot.walk
    arrays = {"name_order": columns.name_order, "passage_counts": columns.passage_counts,
              "fact_nodes": columns.fact_nodes, "passage_offsets": snapshot.passage_texts.offsets,
              "out_weight": walk.out_weight}
    if not isinstance(snapshot.fact_matrix, np.ndarray):
        arrays["fact_total"] = snapshot.fact_matrix.total
    for matrix in ("transition", "walk"):
        csr = getattr(walk, matrix)
        arrays.update({f"{matrix}_data": csr.data, f"{matrix}_indices": csr.indices, f"{matrix}_indptr": csr.indptr})
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
    for key, source in sources.items():
        os.link(source, folder / SNAPSHOT_LINKS[key])
    write_json(folder / SNAPSHOT_MANIFEST, {"files": folder_digests(folder, SNAPSHOT_MANIFEST),
        "format": SNAPSHOT_FORMAT, "version": snapshot.version, "passages": len(columns.passage_ids),
        "entities": len(columns.entity_ids), "facts": len(columns.fact_ids), "edges": int(walk.transition.nnz),
        "symmetric": walk.symmetric, "fact_vectors": "rows" if isinstance(snapshot.fact_matrix, np.ndarray) else "sum"})


def _remove_others(state_folder: Path, keep: Path) -> None:
    """Remove the snapshots of other saves, and partial ones of processes that died."""
    for other in state_folder.glob(f"{_PREFIX}*"):
        if other != keep and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    for partial in state_folder.glob(f".{_PREFIX}*.partial"):
        if left_by_dead_process(partial):
            shutil.rmtree(partial, ignore_errors=True)


def write_string_column(folder: Path, name: str, strings: Iterable[str]) -> None:
    """Write ``strings`` as the :class:`~.state.StringColumn` ``name`` in ``folder``: JSON lines and their ends."""
    ends: list[int] = []
    size = 0
    with open(folder / f"{name}.jsonl", "wb") as out:
        for text in strings:
            line = json.dumps(text, ensure_ascii=False).encode() + b"\n"
            out.write(line)
            size += len(line)
            ends.append(size)
    np.save(folder / f"{name}.ends.npy", np.asarray(ends, dtype=np.int64), allow_pickle=False)


def normalised(vectors: list[np.ndarray]) -> np.ndarray:
    """``vectors`` scaled to unit length (a zero vector stays zero), as float32 rows."""
    block = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    return block / np.where(norms > 0, norms, 1.0)


def put_normalised(matrix: np.ndarray, start: int, vectors: list[np.ndarray]) -> None:
    """Write ``vectors`` normalised (:func:`normalised`) into ``matrix`` from row ``start``."""
    if vectors:
        matrix[start : start + len(vectors)] = normalised(vectors)
