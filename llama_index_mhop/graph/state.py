"""What a query reads: one immutable :class:`RetrievalState` per graph version, and the rule for which version.

A :class:`RetrievalState` holds the arrays a query needs (passage and fact embeddings, searched exactly or through
Chroma's HNSW index by size (:mod:`.walk.walk`), node order, and the graph's walk
(:class:`~.walk.walk.GraphWalk`)), loaded from Chroma once per graph version, never per query. Beside a
persisted index the vectors and the passages' text are files every process of the index maps
(:mod:`.state_files`), and a query builds nodes only for the passages it returns.
:class:`VersionedState` decides which one a query gets while writers change the graph: writers hold its lock for a
whole change; a query in another thread meanwhile answers from the loaded state if it is the version the last
finished change left, else waits for the running change; the first query after a change loads the new version.
Never a half-changed graph, never one older than the last finished change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.schema import BaseNode
from llama_index.core.vector_stores.utils import metadata_dict_to_node

from ..stores.chroma_batches import CHROMA_BATCH, get_records
from .graph_stores import GraphStores
from .knowledge_graph import KnowledgeGraph
from .state_columns import FactTriples, NameLookup, StateColumns
from .state_files import PassageTexts, VectorMatrix, remove_files_of_kind
from .state_snapshot import Snapshot, open_snapshot, write_snapshot
from .walk import DenseVectors, GraphWalk, PageRankGraph, VectorSum, WalkSettings

__all__ = [
    "EmptyIndexError",
    "PassagesGoneError",
    "RetrievalState",
    "VersionedState",
    "build_state",
    "load_retrieval_state",
    "open_saved_state",
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
    (:mod:`.state_snapshot`); a query reads both alike.
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
    passage_texts: PassageTexts

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


def _normalised(vectors: list[np.ndarray]) -> np.ndarray:
    """``vectors`` scaled to unit length (a zero vector stays zero), as float32 rows."""
    block = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(block, axis=1, keepdims=True)
    return block / np.where(norms > 0, norms, 1.0)


def _put_normalised(matrix: np.ndarray, start: int, vectors: list[np.ndarray]) -> None:
    """Write ``vectors`` normalised (:func:`_normalised`) into ``matrix`` from row ``start``."""
    if vectors:
        matrix[start : start + len(vectors)] = _normalised(vectors)


def _passage_rows(stores: GraphStores, passage_ids: list[str],
                  folder: Path | None) -> tuple[PassageTexts, np.ndarray]:
    """The passages' text and metadata, and their normalised embeddings in one float32 matrix, read a batch of
    records at a time (never every record at once), shared through ``folder`` when given
    (:mod:`.state_files`).

    Raises:
        PassagesGoneError: passages of the graph are in none of its passage collections.
    """
    matrix: VectorMatrix | None = None
    texts = PassageTexts(folder)
    missing: list[str] = []
    try:
        for start in range(0, len(passage_ids), CHROMA_BATCH):
            batch = passage_ids[start : start + CHROMA_BATCH]
            rows = stores.passage_records(batch, ["embeddings", "documents", "metadatas"])
            missing += [p for p in batch if p not in rows]
            if missing:
                continue  # the load fails: only the missing ids are still wanted
            texts.append((rows[p]["metadatas"], rows[p]["documents"]) for p in batch)
            vectors = [rows[p]["embeddings"] for p in batch]
            if matrix is None:
                matrix = VectorMatrix(len(passage_ids), len(vectors[0]), folder, "passages")
            _put_normalised(matrix.rows, start, vectors)
        if missing:
            where = " or ".join(repr(c.name) for c in stores.passage_collections())
            raise PassagesGoneError(missing, f"{len(missing)} passages of the graph are gone from Chroma "
                                             f"collection {where} (e.g. {missing[0]!r})")
    except BaseException:
        texts.discard()
        if matrix is not None:
            matrix.discard()
        raise
    assert matrix is not None  # the graph holds passages
    return texts.finish(), matrix.finish(len(passage_ids))


def _fact_rows(facts: Any, fact_ids: list[str], dimension: int, folder: Path | None,
               rows: bool) -> tuple[list[str], np.ndarray | VectorSum]:
    """The facts of ``fact_ids`` the collection holds and their normalised embeddings, read a batch at a time
    into one float32 matrix, shared through ``folder`` when given (:mod:`.state_files`); without ``rows`` (facts
    searched through the HNSW index) only their sum."""
    found: list[str] = []
    matrix = VectorMatrix(len(fact_ids), dimension, folder, "facts") if rows else None
    if matrix is None and folder is not None and folder.is_dir():
        remove_files_of_kind(folder, "facts", ".npy")  # a version below the threshold left them
    total = np.zeros(dimension, dtype=np.float64)
    try:
        for start in range(0, len(fact_ids), CHROMA_BATCH):
            records = get_records(facts, fact_ids[start : start + CHROMA_BATCH], ["embeddings"])
            batch = [f for f in fact_ids[start : start + CHROMA_BATCH] if f in records]
            vectors = [records[f]["embeddings"] for f in batch]
            if matrix is not None:
                _put_normalised(matrix.rows, len(found), vectors)
            elif vectors:
                total += _normalised(vectors).sum(axis=0, dtype=np.float64)
            found += batch
    except BaseException:
        if matrix is not None:
            matrix.discard()
        raise
    return found, VectorSum(total) if matrix is None else matrix.finish(len(found))


def load_retrieval_state(graph: KnowledgeGraph, stores: GraphStores, damping: float,
                         walk: WalkSettings | None = None, basis_folder: Path | None = None,
                         state_folder: Path | None = None, snapshot_digest: str | None = None) -> RetrievalState:
    """The retrieval state of the graph as it is now, its passage and fact embeddings read from Chroma (the paths
    its searches and walk take past a size are ``walk``'s, see :mod:`.walk.walk`). On a large graph the walk's
    solved dense share is read from ``basis_folder`` when saved there, else solved and saved there
    (:meth:`GraphWalk.load`). With a ``state_folder`` the passage and fact matrices, their int8 copies (and the
    walk basis's) and the passages' text are files there that every process of the index maps
    (:mod:`.state_files`), and with a ``snapshot_digest`` (the graph is the save whose ``tables.json`` has this
    digest) the state is filed there as that save's query snapshot (:mod:`.state_snapshot`).

    Raises:
        EmptyIndexError: the graph holds no passage.
        PassagesGoneError: passages of the graph are in none of its passage collections.
    """
    if graph.num_passages == 0:
        raise EmptyIndexError(f"index {stores.name!r} holds no passage: insert documents before retrieving")
    walk = walk or WalkSettings(name=stores.name)
    nodes = graph.node_order()
    passage_ids = nodes[: graph.num_passages]
    entity_ids = nodes[graph.num_passages :]
    passage_texts, passage_matrix = _passage_rows(stores, passage_ids, state_folder)
    entity_node = {e: graph.num_passages + i for i, e in enumerate(entity_ids)}
    counts = np.zeros(len(nodes), dtype=np.float64)
    for e, i in entity_node.items():
        counts[i] = len(graph.entity_passages.get(e, ()))
    fact_ids, fact_matrix = _fact_rows(stores.facts, sorted(graph.facts), passage_matrix.shape[1], state_folder,
                                       rows=graph.num_facts < walk.minimum("hnsw_min_facts"))
    fact_nodes = np.zeros((len(fact_ids), 2), dtype=np.int64)
    for i, f in enumerate(fact_ids):
        s_id, _, o_id = graph.facts[f]
        fact_nodes[i] = (entity_node[s_id], entity_node[o_id])
    entity_names = [graph.entity_names[e] for e in entity_ids]
    predicates = [graph.facts[f][1] for f in fact_ids]
    columns = StateColumns(passage_ids, entity_ids, entity_names, NameLookup.sorted_order(entity_names), counts,
                           fact_ids, predicates, fact_nodes)
    state = build_state(graph.version, columns, passage_matrix, fact_matrix, passage_texts,
                        graph.pagerank_graph(damping=damping), stores, walk=walk, basis_folder=basis_folder,
                        state_folder=state_folder)
    if state_folder is not None and snapshot_digest is not None:
        write_snapshot(state_folder, snapshot_digest, Snapshot(graph.version, columns, passage_matrix, fact_matrix,
                                                               passage_texts, state.walk.pagerank.matrices))
    return state


def open_saved_state(state_folder: Path, digest: str, stores: GraphStores, damping: float,
                     basis_folder: Path | None = None, walk: WalkSettings | None = None) -> RetrievalState | None:
    """The retrieval state of the save whose ``tables.json`` has ``digest``, from its query snapshot in
    ``state_folder`` (:mod:`.state_snapshot`): the same state :func:`load_retrieval_state` loaded for it, without
    the graph's tables or Chroma's records. None when no usable snapshot is filed."""
    snapshot = open_snapshot(state_folder, digest)
    if snapshot is None:
        return None
    columns = snapshot.columns
    pagerank = PageRankGraph(snapshot.walk, damping=damping, version=snapshot.version)
    return build_state(snapshot.version, columns, snapshot.passage_matrix, snapshot.fact_matrix,
                       snapshot.passage_texts, pagerank, stores, walk=walk, basis_folder=basis_folder,
                       state_folder=state_folder)


def build_state(version: int, columns: StateColumns, passage_matrix: np.ndarray,
                fact_matrix: np.ndarray | VectorSum,
                passage_texts: PassageTexts, pagerank: PageRankGraph, stores: GraphStores, *,
                walk: WalkSettings | None = None, basis_folder: Path | None = None,
                state_folder: Path | None = None) -> RetrievalState:
    """The state of a graph version from its columns, matrices, texts and PageRank matrix: the searches of its
    vectors and its walk (the arguments are :func:`load_retrieval_state`'s)."""
    first_entity = len(columns.passage_ids)
    settings = walk or WalkSettings(name=stores.name)
    int8_min_rows = settings.minimum("int8_min_rows")
    passage_vectors = DenseVectors(columns.passage_ids, passage_matrix, stores.passage_collections(),
                                   settings.minimum("hnsw_min_passages"), settings.hnsw_top_n, int8_min_rows,
                                   state_folder, "passages-int8")
    fact_vectors = DenseVectors(columns.fact_ids, fact_matrix, [stores.facts], settings.minimum("hnsw_min_facts"),
                                settings.hnsw_top_n, int8_min_rows, state_folder, "facts-int8")
    graph_walk = GraphWalk.load(pagerank, first_entity, passage_vectors.matrix, settings, basis_folder, state_folder)
    settings.log_paths(passage_vectors, fact_vectors, graph_walk)
    return RetrievalState(
        version=version,
        passage_ids=columns.passage_ids,
        passage_vectors=passage_vectors,
        entity_ids=columns.entity_ids,
        entity_names=columns.entity_names,
        entity_key_node=NameLookup(columns.entity_names, columns.name_order, first_entity),
        passage_counts=columns.passage_counts,
        fact_ids=columns.fact_ids,
        fact_triples=FactTriples(columns.entity_names, columns.predicates, columns.fact_nodes, first_entity),
        fact_nodes=columns.fact_nodes,
        fact_vectors=fact_vectors,
        walk=graph_walk,
        passage_texts=passage_texts,
    )


class VersionedState:
    """The loaded :class:`RetrievalState` of one graph and the lock its writers hold.

    Args:
        graph: the graph whose versions are served.
        stores: the Chroma collections holding its passage and fact embeddings.
        before_load: called under the lock before a state is loaded (to bring synonymy edges up to date).
        basis_folder: where the walk's solved dense share is kept (read when it is the graph's, else written),
            asked at each load; None: solved in memory.
        state_folder: where the passage and fact matrices and the passages' text are shared with the index's
            other processes, asked at each load; None: each load holds its own. A load of a graph unchanged since
            its last save also files its query snapshot there (:mod:`.state_snapshot`).
        drop_gone: called under the lock with the passages a load found in no collection, to take them out of
            the graph in memory, so that no query serves them; the load then runs again.
        walk: the paths the index's walk and searches take (default :class:`~.walk.WalkSettings`).
    """

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
