"""What a query reads: one immutable :class:`RetrievalState` per graph version, and the columns it reads by position.

A :class:`RetrievalState` holds the arrays a query needs (passage and fact embeddings, searched exactly or through
Chroma's HNSW index by size (:mod:`.walk.walk`), node order, and the graph's walk
(:class:`~.walk.walk.GraphWalk`)), loaded once per graph version, never per query (:mod:`.state_load`).
Its ids and names are lists when loaded from the graph and columns mapped from a query snapshot's files
(:class:`StringColumn`, :class:`NameLookup`, :class:`FactTriples`) when opened from one; a query reads both alike
and builds nodes only for the passages it returns.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from .json_files import load_array

if TYPE_CHECKING:
    from .walk import DenseVectors, GraphWalk

__all__ = [
    "EmptyIndexError",
    "FactTriples",
    "NameLookup",
    "PassageRecords",
    "PassagesGoneError",
    "RetrievalState",
    "StateColumns",
    "StringColumn",
]


class EmptyIndexError(ValueError):
    """The index holds no passage to retrieve."""


class PassagesGoneError(ValueError):
    """Passages of the graph are in none of its passage collections: the collections moved on without it.

    Attributes:
        passage_ids: the passages that are gone.
    """

    def __init__(self, passage_ids: list[str], message: str) -> None:
        super().__init__(message)
        self.passage_ids = passage_ids


@dataclass
class RetrievalState:
    """Everything a query needs, loaded once per graph version (never per query).

    Node order is the PageRank order: the first ``len(passage_ids)`` nodes are the passages. The ids and names
    are lists when loaded from the graph, columns mapped from files when opened from a snapshot
    (:mod:`.state_load`); a query reads both alike.
    """

    version: int
    passage_ids: Sequence[str]
    passage_vectors: DenseVectors
    entity_ids: Sequence[str]
    entity_names: Sequence[str]
    #: The node of an entity by its key (its name as the graph keys it).
    entity_key_node: NameLookup
    passage_counts: np.ndarray  # per node: number of passages containing the entity (0 for passage nodes)
    fact_ids: Sequence[str]
    fact_triples: FactTriples
    fact_nodes: np.ndarray  # (facts, 2): node index of subject and object
    fact_vectors: DenseVectors
    #: The graph's PageRank walk: what ranks a query's passages from its seeds and dense scores.
    walk: GraphWalk
    #: The passages' text and metadata, read back for the few passages a query returns.
    passage_texts: PassageRecords

    @property
    def num_nodes(self) -> int:
        return self.walk.num_nodes

    def passage_nodes(self, rows: Iterable[int]) -> dict[int, BaseNode]:
        """The nodes of the passages at ``rows`` (in the passage order), as the passage collection held them when
        this version was loaded."""
        nodes = {}
        for row in rows:
            if row not in nodes:
                metadata, text = self.passage_texts.record(row)
                nodes[row] = metadata_dict_to_node(metadata, text=text)
        return nodes


def mapped_bytes(path: Path) -> np.ndarray:
    """A file's bytes mapped read-only (an empty file, which cannot be mapped: an empty array)."""
    return np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, dtype=np.uint8)


class PassageRecords:
    """The passages' text and metadata as Chroma returns them, one JSON record each in one byte buffer (a file
    every query process maps, or the heap: written by :class:`~.state_files.PassageTexts`), read back by row.

    Args:
        data: the records' bytes.
        offsets: where each record starts, and the end of the last one.
    """

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self._bytes = data
        self.offsets = offsets

    @classmethod
    def mapped(cls, path: Path, offsets: np.ndarray) -> PassageRecords:
        """The records of a finished file, with its ``offsets``, mapped read-only.

        Raises:
            ValueError: offsets that do not match the file.
        """
        data = mapped_bytes(path)
        if offsets.ndim != 1 or not len(offsets) or offsets[0] != 0 or offsets[-1] != len(data):
            raise ValueError(f"{path}: the record offsets do not match the file")
        return cls(data, offsets)

    @property
    def path(self) -> Path | None:
        """The file the records are mapped from (None: they are in the heap)."""
        return Path(self._bytes.filename) if isinstance(self._bytes, np.memmap) else None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def record(self, row: int) -> tuple[dict[str, Any], str]:
        """The ``(metadata, text)`` of the passage at ``row``."""
        metadata, text = json.loads(self._bytes[self.offsets[row] : self.offsets[row + 1]].tobytes())
        return metadata, text


class StringColumn(Sequence[str]):
    """Strings stored as one JSON line each (``<name>.jsonl``) with the end of every line (``<name>.ends.npy``).

    Args:
        lines: the bytes of the lines.
        ends: the offset just past each line's newline (int64, non-decreasing, the last one ``len(lines)``).
    """

    def __init__(self, lines: np.ndarray, ends: np.ndarray) -> None:
        # plain views of the mapped files: indexing an np.memmap costs a Python call per index, and a lookup
        # (a binary search over a sorted column) indexes about 20 times
        self._lines = lines.view(np.ndarray)
        self._ends = ends.view(np.ndarray)

    @classmethod
    def open(cls, folder: Path, name: str, length: int) -> StringColumn:
        """The column ``name`` of ``folder``, mapped read-only, checked to hold ``length`` strings.

        Raises:
            ValueError: a missing file, or ends that do not match the lines.
        """
        ends = load_array(folder / f"{name}.ends.npy", np.int64, 1, mmap=True)
        path = folder / f"{name}.jsonl"
        try:
            lines = mapped_bytes(path)
        except OSError as exc:
            raise ValueError(f"{path}: not readable ({exc})") from exc
        if len(ends) != length or (length and (ends[-1] != len(lines) or np.any(np.diff(ends) <= 0) or ends[0] <= 0)):
            raise ValueError(f"{path}: expected {length} lines ending where {name}.ends.npy says")
        return cls(lines, ends)

    def __len__(self) -> int:
        return len(self._ends)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"string column index {index} out of range")
        start = int(self._ends[index - 1]) if index else 0
        text = json.loads(self._lines[start : int(self._ends[index])].tobytes())
        if not isinstance(text, str):
            raise ValueError(f"line {index} of a string column holds no string")
        return text


class NameLookup:
    """Positions of names: :meth:`get` finds a name by binary search over their sorted order.

    Args:
        names: the names, by position.
        order: the positions sorted by name (positions of equal names in increasing order); None: sorted here.
        offset: added to every position :meth:`get` returns (the node of the first name).
    """

    def __init__(self, names: Sequence[str], order: np.ndarray | None = None, offset: int = 0) -> None:
        self.names = names
        self.order = self.sorted_order(names) if order is None else order
        self.offset = offset
        if len(self.order) != len(names):
            raise ValueError(f"the sorted order holds {len(self.order)} positions for {len(names)} names")

    @staticmethod
    def sorted_order(names: Sequence[str]) -> np.ndarray:
        """The positions of ``names`` sorted by name (a stable sort: equal names keep their order)."""
        return np.asarray(sorted(range(len(names)), key=names.__getitem__), dtype=np.int64)

    def get(self, name: str, default: int | None = None) -> int | None:
        """The position of ``name`` plus the offset (of the last of equal names, as a dict filled in order keeps
        it), else ``default``."""
        order, names = self.order, self.names
        end = bisect.bisect_right(range(len(order)), name, key=lambda i: names[int(order[i])])
        if end and names[int(order[end - 1])] == name:
            return self.offset + int(order[end - 1])
        return default


class FactTriples(Sequence[tuple[str, str, str]]):
    """Each fact as ``(subject name, predicate, object name)``.

    Args:
        entity_names: the entities' names, by entity position.
        predicates: each fact's predicate.
        fact_nodes: each fact's subject and object node, ``(facts, 2)``.
        first_entity_node: the node of the first entity (the passages' nodes come before).
    """

    def __init__(self, entity_names: Sequence[str], predicates: Sequence[str], fact_nodes: np.ndarray,
                 first_entity_node: int) -> None:
        if len(predicates) != len(fact_nodes):
            raise ValueError(f"{len(predicates)} predicates for {len(fact_nodes)} facts")
        self.entity_names = entity_names
        self.predicates = predicates
        self.fact_nodes = fact_nodes
        self.first_entity_node = first_entity_node

    def __len__(self) -> int:
        return len(self.predicates)

    @overload
    def __getitem__(self, index: int) -> tuple[str, str, str]: ...

    @overload
    def __getitem__(self, index: slice) -> list[tuple[str, str, str]]: ...

    def __getitem__(self, index: int | slice) -> tuple[str, str, str] | list[tuple[str, str, str]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        subject, obj = (int(n) - self.first_entity_node for n in self.fact_nodes[index])
        return self.entity_names[subject], self.predicates[index], self.entity_names[obj]


@dataclass(frozen=True)
class StateColumns:
    """A state's ids, names and node numbers (lists, or columns mapped from a snapshot's files)."""

    passage_ids: Sequence[str]
    entity_ids: Sequence[str]
    entity_names: Sequence[str]
    name_order: np.ndarray  # the entities' positions sorted by name (NameLookup.sorted_order)
    passage_counts: np.ndarray
    fact_ids: Sequence[str]
    predicates: Sequence[str]
    fact_nodes: np.ndarray
