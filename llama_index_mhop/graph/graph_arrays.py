"""The knowledge graph's node table and edge store in numpy arrays. Edges carry four integer channels (fact count,
synonymy similarity in millionths, plain and title passage links) so that any order of inserts and removals sums
exactly to a fresh build's table; :mod:`.knowledge_graph` gives the channels their meaning."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["FACTS", "NO_NODE", "PLAIN", "SYNONYMY", "SYNONYMY_SCALE", "TITLE", "EdgeStore", "NodeTable",
           "PassageRecord", "SynonymList"]

FACTS, SYNONYMY, PLAIN, TITLE = range(4)
_CHANNELS = 4
SYNONYMY_SCALE = 1_000_000  # synonymy similarities are kept in millionths (they are rounded to 6 decimals)
NO_NODE = 0  # kind code of a free slot


@dataclass(frozen=True)
class PassageRecord:
    """What one passage contributes: its entity ids (title entities among them), fact ids, and source document."""

    entities: tuple[str, ...]
    facts: tuple[str, ...]
    ref_doc_id: str | None = None
    title: str = field(default="", compare=False)
    title_entities: tuple[str, ...] = ()


class SynonymList(Sequence[tuple[str, float]]):
    """One entity's synonyms as ``(entity id, similarity)`` pairs, immutable; held as an id tuple and a float64
    array (16 bytes a synonym instead of about 90)."""

    __slots__ = ("ids", "similarities")

    def __init__(self, pairs: Iterable[tuple[str, float]] = ()) -> None:
        ids: list[str] = []
        self.similarities = array("d")
        for entity_id, similarity in pairs:
            ids.append(entity_id)
            self.similarities.append(similarity)
        self.ids = tuple(ids)

    @classmethod
    def from_columns(cls, ids: tuple[str, ...], similarities: array) -> SynonymList:
        """A synonym list of ids and their similarities (a float64 array of the same length), taken as they are."""
        if len(ids) != len(similarities) or similarities.typecode != "d":
            raise ValueError(f"{len(ids)} synonym ids need as many float64 similarities, got {len(similarities)}")
        packed = cls.__new__(cls)
        packed.ids, packed.similarities = ids, similarities
        return packed

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, float]]) -> SynonymList:
        """``pairs`` as a synonym list: itself when it is one already (it is immutable)."""
        return pairs if isinstance(pairs, SynonymList) else cls(pairs)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return SynonymList(zip(self.ids[index], self.similarities[index], strict=True))
        return self.ids[index], self.similarities[index]

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return zip(self.ids, self.similarities, strict=True)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SynonymList):
            return self.ids == other.ids and self.similarities == other.similarities
        if isinstance(other, Sequence) and not isinstance(other, str):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SynonymList({list(self)!r})"


class NodeTable:
    """Node keys <-> integer slots, with a kind code per slot (0: free) and a free list of removed slots."""

    def __init__(self) -> None:
        self._keys: list[str | None] = []
        self._slot: dict[str, int] = {}
        self._kinds = np.zeros(0, dtype=np.int8)
        self._free: list[int] = []

    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key: object) -> bool:
        return key in self._slot

    @property
    def capacity(self) -> int:
        """Slots in use or free: the size of slot-indexed arrays."""
        return len(self._keys)

    def slot(self, key: str) -> int:
        return self._slot[key]

    def slots(self, keys: Iterable[str]) -> np.ndarray:
        return np.fromiter((self._slot[k] for k in keys), dtype=np.int64)

    def key(self, slot: int) -> str:
        key = self._keys[slot]
        if key is None:
            raise KeyError(f"slot {slot} is free")
        return key

    def kind(self, slot: int) -> int:
        return int(self._kinds[slot])

    def add(self, key: str, kind: int) -> int:
        """The slot of a new node (a freed slot when there is one)."""
        if key in self._slot:
            raise ValueError(f"node {key!r} is already in the graph")
        if self._free:
            slot = self._free.pop()
            self._keys[slot] = key
        else:
            slot = len(self._keys)
            self._keys.append(key)
            if slot >= len(self._kinds):  # doubled, from 16
                self._kinds = np.concatenate([self._kinds, np.zeros(max(16, len(self._kinds)), dtype=np.int8)])
        self._kinds[slot] = kind
        self._slot[key] = slot
        return slot

    def remove(self, key: str) -> int:
        slot = self._slot.pop(key)
        self._keys[slot] = None
        self._kinds[slot] = NO_NODE
        self._free.append(slot)
        return slot

    def to_lists(self) -> tuple[list[str | None], list[int]]:
        """Keys per slot (None where free) and the free list, for a JSON table."""
        return list(self._keys), list(self._free)

    def kinds(self) -> np.ndarray:
        return self._kinds[: len(self._keys)]

    @classmethod
    def from_lists(cls, keys: Sequence[str | None], free: Sequence[int], kinds: np.ndarray) -> NodeTable:
        """Rebuild a table saved by :meth:`to_lists` and :meth:`kinds`; ValueError when they disagree."""
        table = cls()
        if len(kinds) != len(keys):
            raise ValueError(f"node table has {len(keys)} slots but {len(kinds)} kinds")
        table._keys = [None if k is None else str(k) for k in keys]
        table._slot = {k: i for i, k in enumerate(table._keys) if k is not None}
        table._kinds = np.array(kinds, dtype=np.int8)
        table._free = [int(s) for s in free]
        live = [i for i, k in enumerate(table._keys) if k is not None]
        if (len(table._slot) != len(live) or sorted(table._free) != [i for i, k in enumerate(table._keys) if k is None]
                or bool((table._kinds[live] == NO_NODE).any())):
            raise ValueError("node table is inconsistent: duplicate keys, or free and used slots disagree")
        return table


class _Growable:
    """A 1-D numpy buffer appended to in chunks, doubling its capacity."""

    def __init__(self, dtype: type) -> None:
        self.data = np.zeros(0, dtype=dtype)
        self.size = 0

    def extend(self, values: int | np.ndarray, count: int) -> None:
        """Append ``count`` values (an array of that length, or one value repeated)."""
        end = self.size + count
        if end > len(self.data):
            grown = np.zeros(max(end, 2 * len(self.data), 256), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end

    def view(self) -> np.ndarray:
        return self.data[: self.size]

    def clear(self) -> None:
        self.data = self.data[:0].copy()
        self.size = 0


class EdgeStore:
    """Undirected edges between node slots: a sorted ``u < v`` table (one int32 per channel) plus pending changes,
    summed in once they outnumber ``compact_every`` and the table's size."""

    def __init__(self, compact_every: int = 1 << 20) -> None:
        self.compact_every = compact_every
        self._pairs = np.zeros((0, 2), dtype=np.int32)
        self._values = np.zeros((0, _CHANNELS), dtype=np.int32)
        self._u = _Growable(np.int32)
        self._v = _Growable(np.int32)
        self._channel = _Growable(np.int8)
        self._delta = _Growable(np.int32)

    def add(self, u: int | np.ndarray, v: int | np.ndarray, channel: int, delta: int | np.ndarray) -> None:
        """Add ``delta`` to ``channel`` of the edges ``(u, v)`` (scalars or equal-length arrays; order free)."""
        us, vs = np.asarray(u, dtype=np.int32), np.asarray(v, dtype=np.int32)
        low = np.minimum(us, vs)
        if low.size == 0:
            return
        self._u.extend(low, low.size)
        self._v.extend(np.maximum(us, vs), low.size)
        self._channel.extend(channel, low.size)
        self._delta.extend(delta, low.size)
        if self._u.size > max(self.compact_every, len(self._pairs)):
            self.compact()

    def compact(self) -> None:
        """Sum the pending changes into the edge table; pairs whose channels all sum to 0 are dropped."""
        if self._u.size == 0:
            return
        n_old = len(self._pairs)
        keys = np.concatenate([self._key(self._pairs[:, 0], self._pairs[:, 1]), self._key(self._u.view(),
                                                                                          self._v.view())])
        unique, inverse = np.unique(keys, return_inverse=True)
        values = np.zeros((len(unique), _CHANNELS), dtype=np.int64)
        values[inverse[:n_old]] = self._values
        pending, channel, delta = inverse[n_old:], self._channel.view(), self._delta.view().astype(np.float64)
        for c in range(_CHANNELS):
            chosen = channel == c
            if chosen.any():  # integer sums carried exactly in float64 (far below 2**53)
                values[:, c] += np.rint(np.bincount(pending[chosen], weights=delta[chosen],
                                                    minlength=len(unique))).astype(np.int64)
        keep = values.any(axis=1)
        unique, values = unique[keep], values[keep]
        self._pairs = np.stack([unique >> 32, unique & 0xFFFFFFFF], axis=1).astype(np.int32)
        self._values = values.astype(np.int32)
        for buffer in (self._u, self._v, self._channel, self._delta):
            buffer.clear()

    @staticmethod
    def _key(u: np.ndarray, v: np.ndarray) -> np.ndarray:
        return (u.astype(np.int64) << 32) | v.astype(np.int64)

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """The compacted edge table: ``(pairs (m, 2) int32 with u < v, sorted; values (m, 4) int32)``."""
        self.compact()
        return self._pairs, self._values

    def channels_of(self, u: int, v: int) -> np.ndarray | None:
        """The four channel values of one edge, or None when there is no edge."""
        pairs, values = self.table()
        key = self._key(np.array([min(u, v)]), np.array([max(u, v)]))[0]
        keys = self._key(pairs[:, 0], pairs[:, 1])
        i = int(np.searchsorted(keys, key))
        return np.asarray(values[i]) if i < len(keys) and keys[i] == key else None

    @classmethod
    def from_arrays(cls, pairs: np.ndarray, values: np.ndarray, capacity: int, folder: Path) -> EdgeStore:
        """An edge table from the arrays :func:`load_array` read (changes never touch mapped files). Raises
        ValueError for malformed arrays or a slot outside ``[0, capacity)``."""
        store = cls()
        if pairs.shape[1:] != (2,) or values.shape != (len(pairs), _CHANNELS):
            raise ValueError(f"{folder}: edge arrays have shapes {pairs.shape} and {values.shape}")
        if len(pairs) and (pairs.min() < 0 or pairs.max() >= capacity or not (pairs[:, 0] < pairs[:, 1]).all()):
            raise ValueError(f"{folder}: edge pairs must be slot pairs u < v in [0, {capacity})")
        keys = cls._key(pairs[:, 0], pairs[:, 1])
        if len(keys) > 1 and not (np.diff(keys) > 0).all():
            raise ValueError(f"{folder}: edge pairs are not sorted and unique")
        store._pairs, store._values = pairs, values
        return store
