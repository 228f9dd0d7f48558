"""The walk's solved dense share on disk, solved by the first process that needs it and read by every other: kept in
``persist_dir/walk_basis/<key>/`` (key: a hash of what the solve reads), memory-mapped and checked against
``basis.json``'s digests; a damaged one is logged and solved again."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...rules.text import escape_controls
from ..json_files import load_array, read_json_object, write_json
from ..state_files import check_folder_digests, folder_digests, write_folder
from .affine import DEFAULT_BASIS_TOL, AffineResetPageRank, SolvedBasis, solve_basis
from .exact import PageRankGraph
from .int8_rows import ExactRows

__all__ = ["BASIS_FOLDER", "basis_key", "load_basis", "save_basis", "solved_walk"]

logger = logging.getLogger(__name__)

BASIS_FOLDER = "walk_basis"  # under an index's persist_dir
_INFO = "basis.json"


def basis_key(pagerank: PageRankGraph, passage_vectors: np.ndarray | None, tol: float) -> str:
    """The content key of a graph's basis: what the solve reads, hashed."""
    digest = hashlib.blake2b(digest_size=16)
    m = pagerank.transition
    digest.update(json.dumps([m.shape[0], pagerank.damping, tol, None if passage_vectors is None
                              else list(passage_vectors.shape)]).encode())
    for array in (m.indptr, m.indices, m.data) + (() if passage_vectors is None else (passage_vectors,)):
        digest.update(str(array.dtype).encode())
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def load_basis(folder: Path, key: str) -> SolvedBasis | None:
    """The basis saved under ``key``, memory-mapped, or None; raises ValueError for unreadable files."""
    where = folder / key
    if not (where / _INFO).is_file():
        return None
    info = read_json_object(where / _INFO)
    if info.get("key") != key or not isinstance(info.get("iterations"), int) \
            or not isinstance(info.get("seconds"), (int, float)) or not isinstance(info.get("has_basis"), bool):
        raise ValueError(f"{where / _INFO}: not a basis description this package wrote")
    if "files" in info:  # recorded since digests are (an older basis is read as it is)
        check_folder_digests(where, info["files"], _INFO)
    basis = load_array(where / "basis.npy", np.float32, 2, mmap=True) if info["has_basis"] else None
    uniform_response = load_array(where / "uniform_response.npy", np.float64, 1, mmap=False)
    node_totals = load_array(where / "node_totals.npy", np.float64, 1, mmap=False)
    for name, array in (("basis", basis), ("uniform_response", uniform_response), ("node_totals", node_totals)):
        if array is not None and not bool(np.isfinite(array).all()):
            raise ValueError(f"{where}: {name} holds a NaN or infinite value")
    return SolvedBasis(basis, uniform_response, node_totals, info["iterations"], float(info["seconds"]))


def save_basis(folder: Path, key: str, solved: SolvedBasis) -> None:
    """Write ``solved`` under ``key`` whole, removing other keys' folders; raises OSError when unwritable."""
    def write(partial: Path) -> None:
        if solved.basis is not None:
            np.save(partial / "basis.npy", np.asarray(solved.basis, dtype=np.float32), allow_pickle=False)
        np.save(partial / "uniform_response.npy", solved.uniform_response, allow_pickle=False)
        np.save(partial / "node_totals.npy", solved.node_totals, allow_pickle=False)
        write_json(partial / _INFO, {"key": key, "has_basis": solved.basis is not None, "iterations": solved.iterations,
                                     "seconds": solved.seconds, "files": folder_digests(partial, _INFO)})

    write_folder(folder, key, write, _INFO)
    for other in folder.iterdir():
        # A worker still reading an older graph keeps its memory map: removing the files leaves open maps intact.
        if other.name != key and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)


def solved_walk(pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None,
                folder: Path | None, row_products: Callable[[np.ndarray], ExactRows] = ExactRows,
                tol: float = DEFAULT_BASIS_TOL) -> AffineResetPageRank:
    """The graph's :class:`~.affine.AffineResetPageRank`, its basis read from ``folder`` when saved there, else
    solved (and saved there, when given)."""
    if folder is None:
        return AffineResetPageRank(pagerank, num_passages, passage_vectors, tol, row_products)
    key = basis_key(pagerank, passage_vectors, tol)
    try:
        saved = load_basis(folder, key)
        if saved is not None:
            walk = AffineResetPageRank(pagerank, num_passages, passage_vectors, tol, row_products, solved=saved)
            logger.info("PageRank basis read from %s", folder / key)
            return walk
    except ValueError as exc:
        # The reason may quote the saved files, which are read as untrusted input.
        logger.warning("solving the PageRank basis again: the saved one is unusable (%s)", escape_controls(exc))
        shutil.rmtree(folder / key, ignore_errors=True)
    solved = solve_basis(pagerank, num_passages, passage_vectors, tol)
    try:
        save_basis(folder, key, solved)
    except OSError as exc:
        logger.warning("the PageRank basis could not be saved in %s (%s): each process solves its own", folder, exc)
    return AffineResetPageRank(pagerank, num_passages, passage_vectors, tol, row_products, solved=solved)
