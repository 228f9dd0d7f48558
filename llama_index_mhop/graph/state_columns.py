"""The query state's ids and names as columns a query reads by position, in the heap or mapped from files.

* :class:`StringColumn`: strings read by position from one JSON line each in a byte buffer (a mapped file of a
  query snapshot, :mod:`.state_snapshot`), with their line ends as an array: no Python object per string until one
  is read.
* :class:`NameLookup`: the position of a name, by binary search over the names' sorted order (an int array), so a
  query looks an entity up without a dict of every name.
* :class:`StateColumns`: all of them for one graph version, as the query state is built from them.
* :class:`FactTriples`: each fact as ``(subject name, predicate, object name)``, read from the entity names, the
  predicates and the facts' node pairs.

A list of strings serves wherever a column does: the state loaded from the graph holds lists, the state opened
from a snapshot holds columns, and a query reads both the same way.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

import numpy as np

from .graph_arrays import load_array

__all__ = ["FactTriples", "NameLookup", "StateColumns", "StringColumn"]


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

    @staticmethod
    def write(folder: Path, name: str, strings: Iterable[str]) -> None:
        """Write ``strings`` as the column ``name`` in ``folder``."""
        ends: list[int] = []
        size = 0
        with open(folder / f"{name}.jsonl", "wb") as out:
            for text in strings:
                line = json.dumps(text, ensure_ascii=False).encode() + b"\n"
                out.write(line)
                size += len(line)
                ends.append(size)
        np.save(folder / f"{name}.ends.npy", np.asarray(ends, dtype=np.int64), allow_pickle=False)

    @classmethod
    def open(cls, folder: Path, name: str, length: int) -> StringColumn:
        """The column ``name`` of ``folder``, mapped read-only, checked to hold ``length`` strings.

        Raises:
            ValueError: a missing file, or ends that do not match the lines.
        """
        ends = load_array(folder / f"{name}.ends.npy", np.int64, 1, mmap=True)
        path = folder / f"{name}.jsonl"
        try:
            size = path.stat().st_size
            lines = np.memmap(path, dtype=np.uint8, mode="r") if size else np.zeros(0, dtype=np.uint8)
        except OSError as exc:
            raise ValueError(f"{path}: not readable ({exc})") from exc
        if len(ends) != length or (length and (ends[-1] != size or np.any(np.diff(ends) <= 0) or ends[0] <= 0)):
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
