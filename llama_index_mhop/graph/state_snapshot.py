"""Query snapshots: one saved graph version's query state as a folder of files, so a query process opens it
without parsing the graph's tables or reading Chroma's records.

A process that loads the query state of a saved graph version (a graph unchanged since it was read from, or
written to, its ``tables.json``) files it under ``state_files/snapshot-<digest>/``, ``<digest>`` that
``tables.json``'s (:func:`~.graph_files.saved_tables_digest`):

* ``snapshot.json``: the format, the graph version, the counts every file is checked against and the digest of
  every other file of the folder (:func:`~.json_files.content_hash`), recorded when the folder is written;
* the node ids, entity names, fact ids and predicates as string columns (:class:`~.state_columns.StringColumn`);
* the entities' name order, the passage counts, the facts' node pairs and the walk's matrices (the transition
  matrix and its transpose as CSR arrays, the out-weights) as ``.npy`` arrays, mapped by every reader as the
  walk's own matrices;
* hard links to the state's passage and fact matrices and passage texts (:mod:`.state_files`), so that the
  files a later version publishes never remove them, with the texts' record offsets; facts searched through the
  HNSW index have no matrix, only the sum of their vectors.

The folder is written under a partial name and renamed whole, so a reader never sees half of one; a new one
removes the snapshots of other saves (a process still reading one keeps its maps). The digest ties a snapshot to
the exact bytes of a ``tables.json``: any save, even of the same graph version, files its own.

:func:`open_snapshot` checks every file against its recorded digest, maps it and checks kinds, shapes and
counts, so a damaged or substituted file (the passages' text among them) is never served: the snapshot is logged
and removed, and for it as for a missing one ``None`` is returned: the caller loads the state from the graph instead,
which files it again.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from .graph_arrays import load_array
from .json_files import check_field, read_json_object, write_json
from .state_columns import StateColumns, StringColumn
from .state_files import (
    PassageTexts,
    check_folder_digests,
    folder_digests,
    left_by_dead_process,
    write_folder,
)
from .walk.exact import WalkMatrices
from .walk.walk import VectorSum

__all__ = ["SNAPSHOT_FORMAT", "Snapshot", "open_snapshot", "snapshot_folder", "write_snapshot"]

logger = logging.getLogger(__name__)

SNAPSHOT_FORMAT = 2  # 2: the manifest records every file's digest
_PREFIX = "snapshot-"
_MANIFEST = "snapshot.json"
_STRINGS = ("passage_ids", "entity_ids", "entity_names", "fact_ids", "predicates")
_LINKED = {"passage_matrix": "passages.npy", "fact_matrix": "facts.npy", "passage_texts": "passage-texts.jsonl"}


@dataclass(frozen=True)
class Snapshot:
    """What a snapshot holds: a graph version's columns, matrices, texts and walk."""

    version: int
    columns: StateColumns
    passage_matrix: np.ndarray
    fact_matrix: np.ndarray | VectorSum  # the sum alone when facts are searched through the HNSW index
    passage_texts: PassageTexts
    walk: WalkMatrices  # the graph's walk, as its PageRank matrix holds it


def snapshot_folder(state_folder: Path, digest: str) -> Path:
    """Where the snapshot of the save whose ``tables.json`` has ``digest`` is filed."""
    return state_folder / f"{_PREFIX}{digest}"


def write_snapshot(state_folder: Path, digest: str, snapshot: Snapshot) -> Path | None:
    """File ``snapshot`` as the save ``digest``'s (kept when another process filed it first).

    Returns:
        The snapshot's folder, or None when its matrices or texts are not files of ``state_folder`` (they stayed
        in the heap) or the folder cannot be written (logged).
    """
    target = snapshot_folder(state_folder, digest)
    if target.is_dir():
        return target
    sources = {"passage_matrix": getattr(snapshot.passage_matrix, "filename", None),
               "passage_texts": snapshot.passage_texts.path}
    if not isinstance(snapshot.fact_matrix, VectorSum):
        sources["fact_matrix"] = getattr(snapshot.fact_matrix, "filename", None)
    if any(source is None for source in sources.values()):
        return None
    paths = {key: Path(source) for key, source in sources.items()}
    try:
        write_folder(state_folder, target.name, lambda folder: _write_files(folder, snapshot, paths), _MANIFEST)
    except OSError as exc:
        logger.warning("no query snapshot in %s: %s", state_folder, exc)
        return None
    _remove_others(state_folder, target)
    return target


def _write_files(folder: Path, snapshot: Snapshot, sources: dict[str, Path]) -> None:
    columns = snapshot.columns
    for name in _STRINGS:
        StringColumn.write(folder, name, getattr(columns, name))
    walk = snapshot.walk
    arrays = {"name_order": columns.name_order, "passage_counts": columns.passage_counts,
              "fact_nodes": columns.fact_nodes, "passage_offsets": snapshot.passage_texts.offsets,
              "out_weight": walk.out_weight}
    if isinstance(snapshot.fact_matrix, VectorSum):
        arrays["fact_total"] = snapshot.fact_matrix.total
    for matrix in ("transition", "walk"):
        csr = getattr(walk, matrix)
        arrays.update({f"{matrix}_data": csr.data, f"{matrix}_indices": csr.indices, f"{matrix}_indptr": csr.indptr})
    for name, array in arrays.items():
        np.save(folder / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
    for key, source in sources.items():
        os.link(source, folder / _LINKED[key])
    write_json(folder / _MANIFEST, {"files": folder_digests(folder, _MANIFEST),
        "format": SNAPSHOT_FORMAT, "version": snapshot.version, "passages": len(columns.passage_ids),
        "entities": len(columns.entity_ids), "facts": len(columns.fact_ids), "edges": int(walk.transition.nnz),
        "symmetric": walk.symmetric, "fact_vectors": "sum" if isinstance(snapshot.fact_matrix, VectorSum) else "rows"})


def _remove_others(state_folder: Path, keep: Path) -> None:
    """Remove the snapshots of other saves, and partial ones of processes that died."""
    for other in state_folder.glob(f"{_PREFIX}*"):
        if other != keep and other.is_dir():
            shutil.rmtree(other, ignore_errors=True)
    for partial in state_folder.glob(f".{_PREFIX}*.partial"):
        if left_by_dead_process(partial):
            shutil.rmtree(partial, ignore_errors=True)


def open_snapshot(state_folder: Path, digest: str) -> Snapshot | None:
    """The snapshot of the save ``digest``, every file mapped read-only; None when there is none, or it is damaged
    (logged)."""
    folder = snapshot_folder(state_folder, digest)
    if not (folder / _MANIFEST).is_file():
        return None
    try:
        return _open(folder)
    except (OSError, ValueError) as exc:
        logger.warning("query snapshot %s is damaged and removed: %s", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)  # the next load of this save files it again
        return None


def _open(folder: Path) -> Snapshot:
    where = str(folder / _MANIFEST)
    manifest = read_json_object(folder / _MANIFEST)
    if manifest.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{where}: unsupported snapshot format {manifest.get('format')!r}")
    check_folder_digests(folder, manifest.get("files"), _MANIFEST)
    version, passages, entities, facts, edges = (_count(manifest, key, where)
                                                 for key in ("version", "passages", "entities", "facts", "edges"))
    lengths = {"passage_ids": passages, "entity_ids": entities, "entity_names": entities, "fact_ids": facts,
               "predicates": facts}
    strings = {name: StringColumn.open(folder, name, length) for name, length in lengths.items()}

    def array(name: str, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
        loaded = load_array(folder / f"{name}.npy", dtype, len(shape), mmap=True)
        if loaded.shape != shape:
            raise ValueError(f"{folder / name}.npy: expected shape {shape}, got {loaded.shape}")
        return loaded

    name_order = array("name_order", np.int64, (entities,))
    fact_nodes = array("fact_nodes", np.int64, (facts, 2))
    nodes = passages + entities
    if (entities and (name_order.min() < 0 or name_order.max() >= entities)) or (
            facts and (fact_nodes.min() < passages or fact_nodes.max() >= nodes)):
        raise ValueError(f"{folder}: node numbers out of range")
    symmetric = check_field(manifest, "symmetric", (bool, type(None)), where)
    walk = WalkMatrices(_csr(folder, "transition", nodes, edges), _csr(folder, "walk", nodes, edges),
                        array("out_weight", np.float64, (nodes,)), symmetric)
    passage_matrix = load_array(folder / _LINKED["passage_matrix"], np.float32, 2, mmap=True)
    fact_vectors = check_field(manifest, "fact_vectors", str, where)
    if fact_vectors == "sum":
        fact_matrix: np.ndarray | VectorSum = VectorSum(np.array(array("fact_total", np.float64,
                                                                       (passage_matrix.shape[1],))))
    elif fact_vectors == "rows":
        fact_matrix = load_array(folder / _LINKED["fact_matrix"], np.float32, 2, mmap=True)
        if fact_matrix.shape[0] != facts:
            raise ValueError(f"{folder}: the fact matrix does not hold one row per fact")
    else:
        raise ValueError(f"{where}: fact_vectors: expected \"rows\" or \"sum\", got {fact_vectors!r}")
    if passage_matrix.shape[0] != passages:
        raise ValueError(f"{folder}: the passage matrix does not hold one row per passage")
    texts = PassageTexts.mapped(folder / _LINKED["passage_texts"], array("passage_offsets", np.int64, (passages + 1,)))
    columns = StateColumns(strings["passage_ids"], strings["entity_ids"], strings["entity_names"], name_order,
                           array("passage_counts", np.float64, (nodes,)), strings["fact_ids"], strings["predicates"],
                           fact_nodes)
    return Snapshot(version, columns, passage_matrix, fact_matrix, texts, walk)


def _csr(folder: Path, name: str, nodes: int, edges: int) -> sparse.csr_matrix:
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


def _count(manifest: dict[str, object], key: str, where: str) -> int:
    value = check_field(manifest, key, int, where)
    if isinstance(value, bool) or value < 0:
        raise ValueError(f"{where}: {key}: expected a count >= 0, got {value}")
    return value
