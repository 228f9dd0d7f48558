"""What a query reads: one immutable :class:`RetrievalState` per graph version, the columns it reads by position,
and which version a query gets.

:class:`VersionedState` gives a query never a half-changed graph, nor one older than the last finished change:
writers hold its lock for a whole change, and a query meanwhile answers from the last finished version or waits.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from ..rules.ranking import PassageView
from ..stores.search import node_copy
from .json_files import load_array
from .walk.exact import DenseScores, all_products, best_first
from .walk.walk import WalkSettings

if TYPE_CHECKING:
    from .graph_stores import GraphStores
    from .knowledge_graph import KnowledgeGraph
    from .walk.exact import GraphWalk
    from .walk.int8_rows import ExactRows

__all__ = ["DenseVectors", "EmptyIndexError", "FactTriples", "NameLookup", "PassageRecords", "PassagesGoneError",
           "RetrievalState", "StateColumns", "StringColumn", "VectorSum", "VersionedState"]


#: Passages whose node and view a state keeps built (a query reads a few dozen; a node is a few kilobytes).
PASSAGES_KEPT = 2048


class EmptyIndexError(ValueError):
    """The index holds no passage to retrieve."""


class PassagesGoneError(ValueError):
    """Passages of the graph (``passage_ids``) are in none of its passage collections: they moved on without it."""

    def __init__(self, passage_ids: list[str], message: str) -> None:
        super().__init__(message)
        self.passage_ids = passage_ids


@dataclass
class RetrievalState:
    """Everything a query needs, loaded once per graph version; node order is the PageRank order, passages first.
    Ids and names are lists from the graph or file-mapped columns from a snapshot, read alike."""

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
    _built: OrderedDict[int, tuple[BaseNode, PassageView]] = field(default_factory=OrderedDict, init=False,
                                                                   repr=False)
    _built_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def num_nodes(self) -> int:
        return self.walk.num_nodes

    def linked_passages(self, node: int, limit: int) -> list[int]:
        """The ``limit`` passages with the heaviest edges to ``node`` (a title edge outweighs a mention), heaviest
        first, equal ones by row."""
        nodes, shares = self.walk.pagerank.neighbours(node)
        passages = nodes < len(self.passage_ids)
        return [int(nodes[passages][i]) for i in best_first(shares[passages], limit).tolist()]

    def passage_nodes(self, rows: Iterable[int]) -> dict[int, BaseNode]:
        """The nodes of the passages at ``rows`` (in the passage order), as the passage collection held them when
        this version was loaded: each a copy with its own metadata, which a postprocessor may change."""
        nodes = {}
        for row in rows:
            if row not in nodes:
                nodes[row] = node_copy(self._passage(row)[0])
        return nodes

    def passage_view(self, row: int) -> PassageView:
        """The passage at ``row`` as the ranking rules read it (its sentences and stems worked out once)."""
        return self._passage(row)[1]

    def _passage(self, row: int) -> tuple[BaseNode, PassageView]:
        """The node and view of the passage at ``row``, built once for the :data:`PASSAGES_KEPT` last asked."""
        with self._built_lock:
            built = self._built.get(row)
            if built is not None:
                self._built.move_to_end(row)
                return built
        metadata, text = self.passage_texts.record(row)
        node = metadata_dict_to_node(metadata, text=text)
        built = (node, PassageView.from_node(node))
        with self._built_lock:
            self._built[row] = built
            if len(self._built) > PASSAGES_KEPT:
                self._built.popitem(last=False)
        return built


def mapped_bytes(path: Path) -> np.ndarray:
    """A file's bytes mapped read-only (an empty file, which cannot be mapped: an empty array)."""
    return np.memmap(path, dtype=np.uint8, mode="r") if path.stat().st_size else np.zeros(0, dtype=np.uint8)


class PassageRecords:
    """The passages' text and metadata as Chroma returns them, one JSON record each in one byte buffer ``data`` (a
    file every query process maps, or the heap: written by :class:`~.state_files.PassageTexts`), read back by row;
    ``offsets``: where each record starts, and the end of the last one."""

    def __init__(self, data: np.ndarray, offsets: np.ndarray) -> None:
        self._bytes = data
        self.offsets = offsets

    @classmethod
    def mapped(cls, path: Path, offsets: np.ndarray) -> PassageRecords:
        """The records of a finished file, with its ``offsets``, mapped read-only; ValueError: offsets that do not
        match the file."""
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
    """Strings stored as one JSON line each (``<name>.jsonl``, the bytes ``lines``) with ``ends``, the offset just
    past each line's newline (``<name>.ends.npy``, int64, non-decreasing, the last one ``len(lines)``)."""

    def __init__(self, lines: np.ndarray, ends: np.ndarray) -> None:
        # plain views of the mapped files: indexing an np.memmap costs a Python call per index, and a lookup
        # (a binary search over a sorted column) indexes about 20 times
        self._lines = lines.view(np.ndarray)
        self._ends = ends.view(np.ndarray)

    @classmethod
    def open(cls, folder: Path, name: str, length: int) -> StringColumn:
        """The column ``name`` of ``folder``, mapped read-only, checked to hold ``length`` strings; ValueError: a
        missing file, or ends that do not match the lines."""
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
    """Positions of names, found by binary search over ``order`` (sorted here when None), plus ``offset``."""

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
    """Each fact as ``(subject name, predicate, object name)``, from its ``(facts, 2)`` node pairs."""

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


@dataclass(frozen=True)
class VectorSum:
    """The sum of a collection's normalised vectors (float64): all an HNSW search needs of them besides the
    collection's index, so a state past the threshold never holds the rows themselves."""

    total: np.ndarray


class DenseVectors:
    """The normalised vectors of one collection's records for one graph version, searched exactly or by HNSW
    (from ``hnsw_min_records``), estimated from an int8 copy first from ``int8_min_records``."""

    def __init__(self, ids: Sequence[str], vectors: np.ndarray | VectorSum, collections: list[Any],
                 hnsw_min_records: int, top_n: int = WalkSettings.hnsw_top_n,
                 int8_min_records: int = WalkSettings.int8_min_rows, codes_folder: Path | None = None,
                 codes_kind: str = "int8") -> None:
        self.size = len(ids)
        summed = isinstance(vectors, VectorSum)
        #: The vectors' dimension (0 when there are none).
        self.dimension = (len(vectors.total) if summed else int(vectors.shape[1]) if vectors.ndim == 2 else 0
                          ) if self.size else 0
        self.top_n = top_n
        self.method = "hnsw" if summed or self.size >= max(1, hnsw_min_records) else "exact"
        self.matrix: np.ndarray | None = None
        self.products: ExactRows | None = None
        if self.method == "exact":
            from .walk.int8_rows import row_products  # imports the large-graph tier: a load, never a query

            assert isinstance(vectors, np.ndarray)
            self.matrix = vectors
            self.products = row_products(vectors, int8_min_records, codes_folder, codes_kind)
            return
        self._ids = ids
        self._total = vectors.total if summed else vectors.sum(axis=0, dtype=np.float64)
        self._held = [(collection, collection.count()) for collection in collections]

    def _row(self, record_id: str) -> int | None:
        """The row of ``record_id`` among the sorted ids, or None."""
        row = bisect.bisect_left(self._ids, record_id)
        return row if row < len(self._ids) and self._ids[row] == record_id else None

    def search(self, query: np.ndarray, top_k: int = 0, every: bool = True,
               top_n: int | None = None) -> DenseScores:
        """The ``top_k`` records most similar to ``query`` (normalised), the highest and lowest similarity, and
        (``every``) every record's; past the HNSW threshold the ``top_n`` nearest are exact and the others share
        the mean of the rest."""
        if self.size == 0:
            empty = np.zeros(0, dtype=np.float32)
            return DenseScores(np.zeros(0, dtype=np.int64), empty, 0.0, 0.0, empty if every else None)
        if self.matrix is None or self.products is None:
            return self._search_hnsw(query, top_k, top_n)
        if every or self.products.method == "exact":
            exact = all_products(self.matrix, query)
            top = best_first(exact, top_k)
            return DenseScores(top, exact[top], float(exact.max()), float(exact.min()), exact)
        from .walk.int8_rows import lowest_candidates, top_candidates  # the large-graph tier only

        estimate = self.products.estimate(query)
        top, _ = top_candidates(estimate.values, estimate.bounds, estimate.max_bound, max(1, top_k))
        rows = np.union1d(top, lowest_candidates(estimate.values, estimate.bounds, estimate.max_bound))
        exact = self.products.exact(query, rows)
        best = best_first(exact, max(1, top_k))
        return DenseScores(rows[best[:top_k]], exact[best[:top_k]], float(exact[best[0]]), float(exact.min()))

    def _search_hnsw(self, query: np.ndarray, top_k: int, top_n: int | None) -> DenseScores:
        n_results = min(top_n or self.top_n, self.size)
        near_by_row: dict[int, float] = {}
        farthest: list[float] = []
        for collection, held in self._held:
            if not held:
                continue
            found = collection.query(query_embeddings=[query.tolist(), (-query).tolist()],
                                     n_results=min(n_results, held), include=["distances"])
            # a record added after this version was loaded, or not the graph's, has no row
            near = ((self._row(i), 1.0 - d) for i, d in zip(found["ids"][0], found["distances"][0], strict=True))
            near_by_row.update((row, similarity) for row, similarity in near if row is not None)
            # cosine distance to -q is 1 + similarity to q: the nearest to -q is the least similar to q
            farthest += [d - 1.0 for i, d in zip(found["ids"][1], found["distances"][1], strict=True)
                         if self._row(i) is not None][:1]
        pairs = sorted(near_by_row.items(), key=lambda pair: -pair[1])[:n_results]
        rows = np.array([r for r, _ in pairs], dtype=np.int64)
        near = np.array([s for _, s in pairs], dtype=np.float64)
        rest = self.size - len(rows)
        mean_rest = (float(self._total @ query) - float(near.sum())) / rest if rest else 0.0
        scores = np.full(self.size, mean_rest, dtype=np.float64)
        scores[rows] = near
        top = best_first(scores, top_k)
        return DenseScores(top, scores[top], float(scores.max()), min([float(scores.min()), *farthest]), scores,
                           rows, mean_rest)


class VersionedState:
    """The loaded :class:`RetrievalState` of one graph and the lock its writers hold; ``before_load`` and
    ``drop_gone`` run under the lock (a load that found passages gone drops them and runs again)."""

    def __init__(self, graph: KnowledgeGraph, stores: GraphStores, before_load: Callable[[], None],
                 basis_folder: Callable[[], Path | None] = lambda: None,
                 state_folder: Callable[[], Path | None] = lambda: None,
                 drop_gone: Callable[[list[str]], None] | None = None, walk: WalkSettings | None = None) -> None:
        self.graph = graph
        self.stores = stores
        self._before_load = before_load
        self._basis_folder = basis_folder
        self._state_folder = state_folder
        self._drop_gone = drop_gone
        self.walk = walk or WalkSettings(name=stores.name)
        self.lock = threading.RLock()
        self._state: RetrievalState | None = None
        self._finished_version = graph.version
        self._changes_running = 0

    @property
    def changing(self) -> bool:
        """Whether a change is running (a query from its batch hook must not start another)."""
        return self._changes_running > 0

    def invalidate(self) -> None:
        """Forget the loaded state: the next query loads the graph again (its collections changed under it)."""
        with self.lock:
            self._state = None

    @contextmanager
    def change(self) -> Iterator[None]:
        """Hold the write lock for one change; when it ends, its graph version is the finished one."""
        with self.lock:
            self._changes_running += 1
            try:
                yield
            finally:
                self._changes_running -= 1
                self._finished_version = self.graph.version

    def get(self, damping: float) -> RetrievalState:
        """The state a query reads now (see the module docstring for which version)."""
        state = self._state
        if state is not None and state.walk.damping == damping:
            if state.version == self.graph.version:
                return state
            if not self.lock.acquire(blocking=False):
                if state.version == self._finished_version:
                    return state  # a change is running: answer from the graph as the last finished change left it
                self.lock.acquire()  # the loaded state predates the last finished change: wait for this one
        else:
            self.lock.acquire()
        try:
            return self._load_current(damping)
        finally:
            self.lock.release()

    def _load_current(self, damping: float) -> RetrievalState:
        state = self._state
        if state is not None and state.version == self.graph.version and state.walk.damping == damping:
            return state  # loaded by another query while this one waited
        if self.graph.num_passages == 0:
            raise EmptyIndexError(f"index {self.stores.name!r} holds no passage: insert documents before retrieving")
        self._before_load()
        from .state_load import load_retrieval_state  # loading reads Chroma and snapshots: never a warm query

        try:
            state = load_retrieval_state(self.graph, self.stores, damping, self.walk, basis_folder=self._basis_folder(),
                                         state_folder=self._state_folder(),
                                         snapshot_digest=None if self._changes_running else self.graph.save_digest)
        except PassagesGoneError as gone:
            if self._drop_gone is None:
                raise
            self._drop_gone(gone.passage_ids)
            return self._load_current(damping)
        if not self._changes_running:  # a query from inside a change (a batch hook) sees it but does not keep it
            self._state = state
            self._finished_version = self.graph.version  # no change is running: this graph is a finished one
        return state
