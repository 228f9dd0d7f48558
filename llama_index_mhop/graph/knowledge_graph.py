"""The HippoRAG 2 knowledge graph (Gutiérrez et al., 2025): entity and passage nodes, fact, passage and synonymy
edges, and the PageRank matrix over them. Unlike HippoRAG's code: one undirected edge per pair; a fact edge weighs
the *distinct* facts (inserts and deletes equal a fresh build); fact and synonymy weights add; a passage links to
every entity it names, and with ``title_edge_weight`` to its own title entity (HotpotQA-100 recall@5 86 -> 88)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .graph_arrays import (
    FACTS,
    PLAIN,
    SYNONYMY,
    SYNONYMY_SCALE,
    TITLE,
    EdgeStore,
    NodeTable,
    PassageRecord,
    SynonymList,
)
from .graph_files import (
    cycle_collection_paused,
    graph_to_networkx,
    open_graph_files,
    open_structure,
    save_graph,
)
from .json_files import GraphTables, check_listed
from .synonym_lists import SynonymLists
from .walk.exact import DEFAULT_DAMPING, PageRankGraph

__all__ = ["DEFAULT_SYNONYMY_BLOCK_SIZE", "DEFAULT_SYNONYMY_MIN_CHARS", "DEFAULT_SYNONYMY_THRESHOLD",
           "DEFAULT_SYNONYMY_TOP_K", "DEFAULT_TITLE_EDGE_WEIGHT", "ENTITY", "GRAPH_FORMAT_VERSION", "PASSAGE",
           "EdgeWeights", "KnowledgeGraph", "PassageRecord"]

DEFAULT_SYNONYMY_THRESHOLD = 0.8  # HippoRAG 2's synonymy_edge_sim_threshold
DEFAULT_SYNONYMY_TOP_K = 100  # HippoRAG caps each entity's synonyms at about 100 neighbours
DEFAULT_SYNONYMY_MIN_CHARS = 3
DEFAULT_SYNONYMY_BLOCK_SIZE = 1024
DEFAULT_TITLE_EDGE_WEIGHT = 10.0
GRAPH_FORMAT_VERSION = 1
_SETTINGS = ("synonymy_threshold", "synonymy_top_k", "synonymy_min_chars", "synonymy_block_size", "title_edge_weight")
ENTITY = "entity"
PASSAGE = "passage"
#: The node kind codes of the node table.
KIND_CODE = {PASSAGE: 1, ENTITY: 2}
_CHANNEL_NAMES = {FACTS: "fact", PLAIN: "passage", TITLE: "title"}


def _passage_channels(record: PassageRecord) -> tuple[tuple[int, Sequence[str]], ...]:
    """A passage's plain and title edge channels, each with the entities it links."""
    own = set(record.title_entities)
    return (PLAIN, [e for e in record.entities if e not in own]), (TITLE, record.title_entities)


def _micro(similarity: float) -> int:
    """A similarity rounded to 6 decimals, in millionths (exact: the stored floats are already rounded)."""
    return int(round(similarity * SYNONYMY_SCALE))


class EdgeWeights(NamedTuple):
    """One edge: distinct facts linking the pair, synonymy similarity, passage weight, and their sum."""

    facts: int
    synonymy: float
    passage: float
    weight: float


class KnowledgeGraph(SynonymLists):
    """Entity and passage nodes with fact, passage and synonymy edges; every change bumps :attr:`version`."""

    def __init__(self, synonymy_threshold: float = DEFAULT_SYNONYMY_THRESHOLD,
                 synonymy_top_k: int = DEFAULT_SYNONYMY_TOP_K, synonymy_min_chars: int = DEFAULT_SYNONYMY_MIN_CHARS,
                 synonymy_block_size: int = DEFAULT_SYNONYMY_BLOCK_SIZE,
                 title_edge_weight: float = DEFAULT_TITLE_EDGE_WEIGHT) -> None:
        if not -1.0 <= synonymy_threshold <= 1.0:
            raise ValueError(f"synonymy_threshold must be a cosine similarity in [-1, 1], got {synonymy_threshold}")
        if synonymy_top_k < 0:
            raise ValueError(f"synonymy_top_k must be >= 0, got {synonymy_top_k}")
        if synonymy_block_size < 1:
            raise ValueError(f"synonymy_block_size must be >= 1, got {synonymy_block_size}")
        if not title_edge_weight > 0:
            raise ValueError(f"title_edge_weight must be > 0, got {title_edge_weight}")
        self.title_edge_weight = float(title_edge_weight)
        self.synonymy_threshold = float(synonymy_threshold)
        self.synonymy_top_k = int(synonymy_top_k)
        self.synonymy_min_chars = int(synonymy_min_chars)
        self.synonymy_block_size = int(synonymy_block_size)
        self.entity_names: dict[str, str] = {}
        self.facts: dict[str, tuple[str, str, str]] = {}  # fact id -> (subject id, predicate, object id)
        self.passages: dict[str, PassageRecord] = {}
        self.entity_passages: dict[str, set[str]] = {}
        self.fact_support: dict[str, int] = {}  # fact id -> how many passages state it
        self.synonyms: dict[str, SynonymList] = {}
        self._stale_synonyms: set[str] = set()
        self._nodes = NodeTable()
        self._edges = EdgeStore()
        self.version = 0
        self._saved: tuple[int, str] | None = None  # (version, digest of tables.json) of the last save read or written
        self._pagerank: PageRankGraph | None = None

    num_entities = property(lambda self: len(self.entity_names), doc="Entities in the graph.")
    num_facts = property(lambda self: len(self.facts), doc="Facts in the graph.")
    num_passages = property(lambda self: len(self.passages), doc="Passages in the graph.")

    @property
    def save_digest(self) -> str | None:
        """The digest of the ``tables.json`` last read or written, while the graph is unchanged since (else None)."""
        return self._saved[1] if self._saved is not None and self._saved[0] == self.version else None

    def _bump(self) -> None:
        self.version += 1
        self._pagerank = None

    def add_passage(self, passage_id: str, entities: Mapping[str, str], facts: Mapping[str, tuple[str, str, str]],
                    ref_doc_id: str | None = None, title: str = "",
                    title_entities: Iterable[str] = ()) -> tuple[list[str], list[str]]:
        """Add a passage node, its entities, facts and edges; the ids of the entities and facts new to the graph
        (a ``ValueError`` when the passage is already there or a fact names an unknown entity)."""
        if passage_id in self._nodes:
            raise ValueError(f"passage {passage_id!r} is already in the graph")
        if passage_id in entities:
            raise ValueError(f"passage {passage_id!r} has the id of one of its entities")
        for fact_id, (subject, _, obj) in facts.items():
            if subject not in entities or obj not in entities:
                raise ValueError(f"fact {fact_id!r} links an entity that is not among the passage's entities")
        own = tuple(e for e in dict.fromkeys(title_entities) if e in entities)
        new_entities = [e for e in entities if e not in self.entity_names]
        new_facts = [f for f in facts if f not in self.facts]
        for entity_id in new_entities:
            self.entity_names[entity_id] = entities[entity_id]
            self._stale_synonyms.add(entity_id)  # its synonyms come with the next update_synonymy
        for fact_id in new_facts:
            subject, predicate, obj = facts[fact_id]
            self.facts[fact_id] = (subject, predicate, obj)
        record = PassageRecord(tuple(entities), tuple(facts), ref_doc_id, title, own)
        self.passages[passage_id] = record
        passage = self._nodes.add(passage_id, KIND_CODE[PASSAGE])
        for entity_id in new_entities:
            self._nodes.add(entity_id, KIND_CODE[ENTITY])
        self._count_support(passage_id, record)
        self._passage_edges(passage, record, 1)
        self._fact_edges(new_facts, 1)
        self._bump()
        return new_entities, new_facts

    def _count_support(self, passage_id: str, record: PassageRecord) -> None:
        for entity_id in record.entities:
            self.entity_passages.setdefault(entity_id, set()).add(passage_id)
        for fact_id in record.facts:
            self.fact_support[fact_id] = self.fact_support.get(fact_id, 0) + 1

    def remove_passage(self, passage_id: str) -> tuple[list[str], list[str]]:
        """Remove one passage (:meth:`remove_passages`); a ``KeyError`` when the graph lacks it."""
        return self.remove_passages([passage_id])

    def remove_passages(self, passage_ids: Iterable[str]) -> tuple[list[str], list[str]]:
        """Remove passages and what only they supported; the removed entities, facts (``KeyError``: unknown)."""
        removed_entities: list[str] = []
        removed_facts: list[str] = []
        detached = False
        try:
            for passage_id in passage_ids:
                entities, facts = self._detach_passage(passage_id)
                detached = True
                removed_entities += entities
                removed_facts += facts
        finally:
            if detached:
                self._drop_entities(removed_entities)
                self._bump()
        return removed_entities, removed_facts

    def _detach_passage(self, passage_id: str) -> tuple[list[str], list[str]]:
        """Take out a passage, its edges and the facts only it supported; those facts and its lone entities."""
        if passage_id not in self.passages:
            raise KeyError(f"passage {passage_id!r} is not in the graph")
        record = self.passages.pop(passage_id)
        removed_facts = []
        for fact_id in record.facts:
            self.fact_support[fact_id] -= 1
            if not self.fact_support[fact_id]:
                del self.fact_support[fact_id]
                removed_facts.append(fact_id)
        self._fact_edges(removed_facts, -1)
        for fact_id in removed_facts:
            del self.facts[fact_id]
        self._passage_edges(self._nodes.slot(passage_id), record, -1)
        self._nodes.remove(passage_id)
        removed_entities = []
        for entity_id in record.entities:
            supporters = self.entity_passages[entity_id]
            supporters.discard(passage_id)
            if not supporters:
                removed_entities.append(entity_id)
        return removed_entities, removed_facts

    def _drop_entities(self, entity_ids: list[str]) -> None:
        """Remove entities no passage names any more, their synonymy edges and their places in other lists."""
        if not entity_ids:
            return
        lost_pairs = self._drop_synonyms_of(set(entity_ids))
        self._set_synonymy_edges(lost_pairs, dict.fromkeys(lost_pairs, 0.0))
        for entity_id in entity_ids:
            del self.entity_passages[entity_id]
            del self.entity_names[entity_id]
            self._nodes.remove(entity_id)

    def passages_of_document(self, ref_doc_id: str) -> list[str]:
        """Ids of the passages that came from the document ``ref_doc_id``."""
        return [pid for pid, record in self.passages.items() if record.ref_doc_id == ref_doc_id]

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    @property
    def num_edges(self) -> int:
        """Undirected edges of positive weight."""
        return int((self._edge_weights()[2] > 0).sum())

    def _passage_edges(self, passage: int, record: PassageRecord, delta: int) -> None:
        for channel, chosen in _passage_channels(record):
            self._edges.add(passage, self._nodes.slots(chosen), channel, delta)

    def _fact_edges(self, fact_ids: Iterable[str], delta: int) -> None:
        pairs = [(s, o) for s, _, o in (self.facts[f] for f in fact_ids) if s != o]
        if pairs:
            self._edges.add(self._nodes.slots(p[0] for p in pairs), self._nodes.slots(p[1] for p in pairs),
                            FACTS, delta)

    def _set_synonymy_edges(self, old: Mapping[tuple[str, str], float], new: Mapping[tuple[str, str], float]) -> None:
        deltas = {pair: _micro(new[pair]) - _micro(old.get(pair, 0.0)) for pair in new}
        changed = [(a, b, delta) for (a, b), delta in deltas.items() if delta]
        if changed:
            self._edges.add(self._nodes.slots(a for a, _, _ in changed), self._nodes.slots(b for _, b, _ in changed),
                            SYNONYMY, np.array([delta for _, _, delta in changed]))

    def _synonymy_edge_count(self) -> int:
        _, values, weight = self._edge_weights()
        return int(((values[:, SYNONYMY] != 0) & (weight > 0)).sum())

    def _edge_weights(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The edge table: slot pairs, channel values, and each edge's weight (facts + synonymy + passage)."""
        pairs, values = self._edges.table()
        return pairs, values, self._weights(values)[2]

    def _weights(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per row of channel values: the synonymy weight, the passage weight and the edge's total weight."""
        synonymy = values[:, SYNONYMY] / SYNONYMY_SCALE
        passage = values[:, PLAIN] * 1.0 + values[:, TITLE] * self.title_edge_weight
        return synonymy, passage, values[:, FACTS].astype(np.float64) + synonymy + passage

    def edge(self, u: str, v: str) -> EdgeWeights | None:
        """The edge between two nodes, or None when they are not linked."""
        if u not in self._nodes or v not in self._nodes:
            return None
        values = self._edges.channels_of(self._nodes.slot(u), self._nodes.slot(v))
        if values is None:
            return None
        synonymy, passage, weight = (float(w[0]) for w in self._weights(values[None, :]))
        return EdgeWeights(int(values[FACTS]), synonymy, passage, weight) if weight > 0 else None

    def edge_list(self) -> list[tuple[str, str, int, float, float]]:
        """Every edge as ``(u, v, facts, synonymy, passage)`` with ``u < v``, sorted (for comparisons)."""
        pairs, values = self._edges.table()
        synonymy, passage, weight = self._weights(values)
        keep = weight > 0
        keys = [self._nodes.key(slot) for slot in pairs[keep].ravel().tolist()]
        columns = (values[keep, FACTS].tolist(), synonymy[keep].tolist(), passage[keep].tolist())
        return sorted((min(a, b), max(a, b), f, s, p) for a, b, f, s, p in zip(keys[::2], keys[1::2], *columns,
                                                                                strict=True))

    def node_kind(self, key: str) -> str:
        """``"passage"`` or ``"entity"``."""
        return PASSAGE if self._nodes.kind(self._nodes.slot(key)) == KIND_CODE[PASSAGE] else ENTITY

    def pagerank_graph(self, damping: float = DEFAULT_DAMPING) -> PageRankGraph:
        """This graph version's PageRank matrix (built once per version), its rows in :meth:`node_order`."""
        if self._pagerank is None or self._pagerank.damping != damping:
            nodes = self.node_order()
            position = np.full(self._nodes.capacity, -1, dtype=np.int64)
            position[self._nodes.slots(nodes)] = np.arange(len(nodes))
            pairs, _, weight = self._edge_weights()
            keep = weight > 0
            edges = np.stack([position[pairs[keep, 0]], position[pairs[keep, 1]]], axis=1)
            self._pagerank = PageRankGraph.from_edges(len(nodes), edges, weight[keep], nodes=nodes, damping=damping,
                                                      version=self.version)
        return self._pagerank

    def node_order(self) -> list[str]:
        """Passage ids then entity ids, each sorted: the row order of :meth:`pagerank_graph`."""
        return sorted(self.passages) + sorted(self.entity_names)

    def _rebuild_structure(self) -> None:
        """Nodes and edges from the tables alone (passages, facts, synonym lists), as a fresh build makes them."""
        self._nodes, self._edges = NodeTable(), EdgeStore()
        for pid in sorted(self.passages):
            self._nodes.add(pid, KIND_CODE[PASSAGE])
        for entity_id in sorted(self.entity_names):
            self._nodes.add(entity_id, KIND_CODE[ENTITY])
        for pid, record in self.passages.items():
            self._passage_edges(self._nodes.slot(pid), record, 1)
        self._fact_edges(self.facts, 1)
        pairs = {(min(a, b), max(a, b)) for a, lst in self.synonyms.items() for b, _ in lst if b in self.entity_names}
        self._set_synonymy_edges({}, {pair: self._synonymy(*pair) for pair in sorted(pairs)})
        self._pagerank = None

    def check_edges(self) -> None:
        """Refuse (``ValueError``) an edge table that disagrees with the records (edited or mixed up)."""
        pairs, values = self._edges.table()
        table_keys = EdgeStore._key(pairs[:, 0], pairs[:, 1])
        for channel, (u, v) in self._record_edges().items():
            low, high = np.minimum(u, v), np.maximum(u, v)
            expected, counts = np.unique(EdgeStore._key(low, high), return_counts=True)
            present = values[:, channel] != 0
            if not (np.array_equal(table_keys[present], expected)
                    and np.array_equal(values[present, channel], counts)):
                raise ValueError(f"its {_CHANNEL_NAMES[channel]} edges disagree with the passages and facts")

    def _record_edges(self) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """The slot pairs each record channel (plain and title passage edges, facts) implies, once per record."""
        ends: dict[int, tuple[list[int], list[str]]] = {PLAIN: ([], []), TITLE: ([], [])}
        for pid, record in self.passages.items():
            passage = self._nodes.slot(pid)
            for channel, chosen in _passage_channels(record):
                ends[channel][0].extend([passage] * len(chosen))
                ends[channel][1].extend(chosen)
        fact_pairs = [(s, o) for s, _, o in self.facts.values() if s != o]
        edges = {channel: (np.asarray(slots, dtype=np.int64), self._nodes.slots(entities))
                 for channel, (slots, entities) in ends.items()}
        edges[FACTS] = (self._nodes.slots(s for s, _ in fact_pairs), self._nodes.slots(o for _, o in fact_pairs))
        return edges

    def config(self) -> dict[str, Any]:
        """The graph's settings, as its constructor takes them."""
        return {key: getattr(self, key) for key in _SETTINGS}

    def tables(self) -> GraphTables:
        """The graph's records as saved (settings, version, entities, facts, passages, synonym lists)."""
        return GraphTables(self.config(), self.version, self.entity_names, self.facts, self.passages, self.synonyms,
                           self.stale_synonyms)

    @classmethod
    def _with_records(cls, tables: GraphTables) -> KnowledgeGraph:
        """A graph holding these records, without nodes or edges yet."""
        graph = cls(**tables.config)
        graph.entity_names, graph.facts = dict(tables.entity_names), dict(tables.facts)
        for pid, record in tables.passages.items():
            graph.passages[pid] = record
            graph._count_support(pid, record)
        graph.synonyms = dict(tables.synonyms)  # immutable lists: shared, not copied
        graph._stale_synonyms = set(tables.stale_synonyms)
        graph.version = tables.version
        return graph

    @classmethod
    def from_files(cls, folder: str | Path, data: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                   digest: str | None = None) -> KnowledgeGraph:
        """A graph from the files :func:`~.graph_files.open_graph_files` opened, checked (``ValueError``)."""
        with cycle_collection_paused():
            graph = cls._with_records(GraphTables.from_json(data))
        kinds = {**dict.fromkeys(graph.passages, KIND_CODE[PASSAGE]),
                 **dict.fromkeys(graph.entity_names, KIND_CODE[ENTITY])}
        graph._nodes, graph._edges = open_structure(folder, data, arrays, kinds)
        try:
            graph.check_edges()
        except ValueError as exc:
            raise ValueError(f"{folder}: {exc}") from None
        graph._saved = None if digest is None else (graph.version, digest)
        return graph

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form: config, records, synonym lists, and the node and edge lists."""
        tables = self.tables()
        return {"format_version": GRAPH_FORMAT_VERSION, **tables.to_json(), "nodes": tables.node_list(),
                "edges": [list(e) for e in self.edge_list()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KnowledgeGraph:
        """Rebuild a graph from :meth:`to_dict` output (``ValueError``: unknown version, or lists that disagree)."""
        if (version := data.get("format_version")) != GRAPH_FORMAT_VERSION:
            raise ValueError(f"unsupported graph format version {version!r} (this code reads {GRAPH_FORMAT_VERSION})")
        graph = cls._with_records(GraphTables.from_json(data))
        try:
            graph._rebuild_structure()
        except KeyError as exc:
            raise ValueError(f"graph file is inconsistent: a passage or fact names an unknown entity ({exc})") from exc
        check_listed(data, graph.tables(), graph.edge_list())
        return graph

    def save(self, folder: str | Path, attached: Mapping[str, Any] | None = None) -> Path:
        """Write this version to ``folder`` (:func:`~.graph_files.save_graph`, with ``attached`` JSON values)."""
        digest = save_graph(folder, self.tables(), self._nodes, self._edges, attached)
        self._saved = (self.version, digest)
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> KnowledgeGraph:
        """Read a graph written by :meth:`save`, with ``mmap`` its arrays memory-mapped read-only."""
        return cls.from_files(folder, *open_graph_files(folder, mmap))

    def to_networkx(self) -> Any:
        """This version as a ``networkx.Graph`` (node ``kind``, ``name``; edge weights by kind and total)."""
        return graph_to_networkx(self.tables().node_list(), self.edge_list())

    @property
    def graph(self) -> Any:
        """:meth:`to_networkx`, built on each access (for counts use :attr:`num_nodes` and :attr:`num_edges`)."""
        return self.to_networkx()

    def __repr__(self) -> str:
        return (f"KnowledgeGraph(passages={self.num_passages}, entities={self.num_entities}, facts={self.num_facts}, "
                f"edges={self.num_edges}, version={self.version})")
