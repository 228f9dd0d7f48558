"""Loading a graph version's :class:`~.state.RetrievalState` and its query snapshot, filed as
``state_files/snapshot-<digest>/`` (the digest of its ``tables.json``): ``snapshot.json`` with every other file's
digest, string columns, ``.npy`` arrays and hard links to the vector and text files, written whole.
:func:`open_saved_state` checks each file first; a damaged snapshot is logged, removed and loaded from the graph
instead."""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, Field, StrictBool, StrictInt

from ..stores.chroma_batches import CHROMA_BATCH, get_records
from .graph_stores import GraphStores
from .json_files import check_model, load_array, read_json_object
from .knowledge_graph import KnowledgeGraph
from .state import (
    DenseVectors,
    EmptyIndexError,
    FactTriples,
    NameLookup,
    PassageRecords,
    PassagesGoneError,
    RetrievalState,
    StateColumns,
    StringColumn,
    VectorSum,
)
from .state_files import (
    SNAPSHOT_FORMAT,
    SNAPSHOT_LINKS,
    SNAPSHOT_MANIFEST,
    PassageTexts,
    VectorMatrix,
    check_folder_digests,
    normalised,
    open_csr,
    put_normalised,
    remove_files_of_kind,
    snapshot_folder,
    write_snapshot,
)
from .walk import GraphWalk, PageRankGraph, WalkSettings
from .walk.walk import WalkMatrices

__all__ = ["SNAPSHOT_FORMAT", "Snapshot", "build_state", "load_retrieval_state", "open_saved_state",
           "open_snapshot", "snapshot_folder", "write_snapshot"]

logger = logging.getLogger(__name__)

_Count = Annotated[StrictInt, Field(ge=0)]


class _Manifest(BaseModel):
    """``snapshot.json``: the digest of every other file, and the counts they are checked against."""

    files: dict[str, str]
    version: _Count
    passages: _Count
    entities: _Count
    facts: _Count
    edges: _Count
    symmetric: StrictBool | None
    fact_vectors: Literal["rows", "sum"]


@dataclass(frozen=True)
class Snapshot:
    """What a snapshot holds: a graph version's columns, matrices, texts and walk."""

    version: int
    columns: StateColumns
    passage_matrix: np.ndarray
    fact_matrix: np.ndarray | VectorSum  # the sum alone when facts are searched through the HNSW index
    passage_texts: PassageRecords
    walk: WalkMatrices  # the graph's walk, as its PageRank matrix holds it


def open_snapshot(state_folder: Path, digest: str) -> Snapshot | None:
    """The snapshot of the save ``digest``, every file mapped read-only; None when there is none, or it is damaged
    (logged)."""
    folder = snapshot_folder(state_folder, digest)
    if not (folder / SNAPSHOT_MANIFEST).is_file():
        return None
    try:
        return _open(folder)
    except (OSError, ValueError) as exc:
        logger.warning("query snapshot %s is damaged and removed: %s", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)  # the next load of this save files it again
        return None


def _open(folder: Path) -> Snapshot:
    where = str(folder / SNAPSHOT_MANIFEST)
    data = read_json_object(folder / SNAPSHOT_MANIFEST)
    if data.get("format") != SNAPSHOT_FORMAT:
        raise ValueError(f"{where}: unsupported snapshot format {data.get('format')!r}")
    check_model(_Manifest, data, where)
    manifest = _Manifest.model_validate(data)
    check_folder_digests(folder, manifest.files, SNAPSHOT_MANIFEST)
    passages, entities, facts, edges = manifest.passages, manifest.entities, manifest.facts, manifest.edges
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
    walk = WalkMatrices(open_csr(folder, "transition", nodes, edges), open_csr(folder, "walk", nodes, edges),
                        array("out_weight", np.float64, (nodes,)), manifest.symmetric)
    passage_matrix = load_array(folder / SNAPSHOT_LINKS["passage_matrix"], np.float32, 2, mmap=True)
    if manifest.fact_vectors == "sum":
        fact_matrix: np.ndarray | VectorSum = VectorSum(np.array(array("fact_total", np.float64,
                                                                       (passage_matrix.shape[1],))))
    else:
        fact_matrix = load_array(folder / SNAPSHOT_LINKS["fact_matrix"], np.float32, 2, mmap=True)
        if fact_matrix.shape[0] != facts:
            raise ValueError(f"{folder}: the fact matrix does not hold one row per fact")
    if passage_matrix.shape[0] != passages:
        raise ValueError(f"{folder}: the passage matrix does not hold one row per passage")
    texts = PassageRecords.mapped(folder / SNAPSHOT_LINKS["passage_texts"],
                                  array("passage_offsets", np.int64, (passages + 1,)))
    columns = StateColumns(strings["passage_ids"], strings["entity_ids"], strings["entity_names"], name_order,
                           array("passage_counts", np.float64, (nodes,)), strings["fact_ids"], strings["predicates"],
                           fact_nodes)
    return Snapshot(manifest.version, columns, passage_matrix, fact_matrix, texts, walk)


def _passage_rows(stores: GraphStores, passage_ids: list[str],
                  folder: Path | None) -> tuple[PassageRecords, np.ndarray]:
    """The passages' texts and metadata, and their normalised embeddings as one float32 matrix, read in batches.
    Raises PassagesGoneError when passages of the graph are in none of its passage collections."""
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
            put_normalised(matrix.rows, start, vectors)
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
                put_normalised(matrix.rows, len(found), vectors)
            elif vectors:
                total += normalised(vectors).sum(axis=0, dtype=np.float64)
            found += batch
    except BaseException:
        if matrix is not None:
            matrix.discard()
        raise
    return found, VectorSum(total) if matrix is None else matrix.finish(len(found))


def load_retrieval_state(graph: KnowledgeGraph, stores: GraphStores, damping: float,
                         walk: WalkSettings | None = None, basis_folder: Path | None = None,
                         state_folder: Path | None = None, snapshot_digest: str | None = None) -> RetrievalState:
    """The retrieval state of the graph as it is now, its embeddings read from Chroma; files shared in
    ``state_folder``, the snapshot filed as the save ``snapshot_digest``'s when given. Raises EmptyIndexError for a
    graph without passages, PassagesGoneError when its passages left Chroma."""
    if graph.num_passages == 0:
        raise EmptyIndexError(f"index {stores.name!r} holds no passage: insert documents before retrieving")
    walk = walk or WalkSettings(name=stores.name)
    nodes = graph.node_order()
    passage_ids = nodes[: graph.num_passages]
    entity_ids = nodes[graph.num_passages :]
    passage_texts, passage_matrix = _passage_rows(stores, passage_ids, state_folder)
    entity_node = {e: graph.num_passages + i for i, e in enumerate(entity_ids)}
    counts = np.zeros(len(nodes), dtype=np.float64)
    counts[graph.num_passages :] = [len(graph.entity_passages.get(e, ())) for e in entity_ids]
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
    """The retrieval state :func:`load_retrieval_state` loaded for the save ``digest``, from its query snapshot in
    ``state_folder``; None when no usable snapshot is filed."""
    snapshot = open_snapshot(state_folder, digest)
    if snapshot is None:
        return None
    pagerank = PageRankGraph(snapshot.walk, damping=damping, version=snapshot.version)
    return build_state(snapshot.version, snapshot.columns, snapshot.passage_matrix, snapshot.fact_matrix,
                       snapshot.passage_texts, pagerank, stores, walk=walk, basis_folder=basis_folder,
                       state_folder=state_folder)


def build_state(version: int, columns: StateColumns, passage_matrix: np.ndarray, fact_matrix: np.ndarray | VectorSum,
                passage_texts: PassageRecords, pagerank: PageRankGraph, stores: GraphStores, *,
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
        version=version, passage_ids=columns.passage_ids, passage_vectors=passage_vectors, walk=graph_walk,
        entity_ids=columns.entity_ids, entity_names=columns.entity_names, passage_counts=columns.passage_counts,
        entity_key_node=NameLookup(columns.entity_names, columns.name_order, first_entity), fact_ids=columns.fact_ids,
        fact_triples=FactTriples(columns.entity_names, columns.predicates, columns.fact_nodes, first_entity),
        fact_nodes=columns.fact_nodes, fact_vectors=fact_vectors, passage_texts=passage_texts)
