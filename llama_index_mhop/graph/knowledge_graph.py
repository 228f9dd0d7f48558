"""The HippoRAG 2 knowledge graph: entity and passage nodes, fact, passage and synonymy edges.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", seeds 003/004) links the OpenIE output of a corpus
into one graph that Personalized PageRank walks at query time:

* **nodes**: one per entity (keyed by :func:`~llama_index_mhop.graph.extraction.entity_key`) and one per passage;
* **fact edges** between the subject and the object of every triple;
* **passage edges** between a passage and each entity it contains;
* **synonymy edges** between entities whose embeddings are similar (cosine >= ``synonymy_threshold``, 0.8),
  among each entity's ``synonymy_top_k`` nearest neighbours.

Edge weights, and how they differ from HippoRAG's public code (which stores an igraph ``Graph`` built from a
dict of *ordered* node pairs):

* The graph is undirected and each node pair has **one** edge. HippoRAG adds both ``(a, b)`` and ``(b, a)`` for
  every fact pair (and for every synonymy pair found from both sides) to an undirected igraph graph, so those
  edges exist twice (their weight counts double in the walk) while passage edges, added in one direction only,
  count once. Here every kind of edge counts once: a fact edge is not worth two passage edges by accident of
  bookkeeping.
* A **fact edge** weighs the number of *distinct* facts (subject, predicate, object) that link the two entities.
  HippoRAG adds 1 per triple occurrence, so a fact repeated by ten passages weighs ten. Here the edge mirrors
  the fact store, which holds each fact once: boilerplate repeated across passages does not dominate the walk,
  and the graph after any sequence of inserts and deletes equals a fresh build of the remaining passages.
* A **synonymy edge** weighs the cosine similarity, once per pair: the pair is linked when either entity is among
  the other's top-k neighbours. Both entities need a key of at least ``synonymy_min_chars`` letters or digits
  (HippoRAG's rule: more than 2) and at least one letter: years and numbers embed close to one another
  ("1961" and "1962") and would otherwise form a clique that links every dated passage.
* When a pair has both a fact and a synonymy relation the weights add (HippoRAG's dict overwrites the fact count
  with the similarity).
* A **passage edge** weighs 1. A passage links to every entity its extraction names, in its entity list or its
  triples (HippoRAG links only triple entities): the title entity of a passage and the mentions of that title
  in other passages meet at one node, the strongest LLM-free signal on encyclopedic corpora.
* The edge between a passage and its own **title entity** weighs ``title_edge_weight`` (10; 1 is HippoRAG's
  plain passage edge). A page is the canonical node of the entity it is titled by: a walk that reaches the entity
  "Delbert Mann" should mostly continue to the page "Delbert Mann", not to the passages that merely mention him.
  HippoRAG has no titles in its graph. On HotpotQA-100 LLM-free it lifts recall@5 from 86 to 88 on its own and
  from 89 to 92.5 with the retriever's query entities.

Synonyms are computed exactly (blocked dot products, :meth:`KnowledgeGraph.update_synonymy`) or, for large graphs,
from a nearest-neighbour search such as Chroma's HNSW index (:meth:`KnowledgeGraph.update_synonymy_by_search`);
either way only new entities and entities whose full top-k list lost a member are searched again.

The structure changes only through :meth:`KnowledgeGraph.add_passage`, :meth:`KnowledgeGraph.remove_passage` and
:meth:`KnowledgeGraph.update_synonymy`; each bumps :attr:`KnowledgeGraph.version`, which keys the cached
PageRank matrix (:meth:`KnowledgeGraph.pagerank_graph`).

Storage is arrays, not a graph library (:mod:`.graph_arrays`): nodes are integer slots, edges integer channels
summed from appended changes, so the graph costs about 24 bytes per edge and saves as ``.npy`` files that query
processes memory-map (:meth:`KnowledgeGraph.save`, :meth:`KnowledgeGraph.load`). networkx is an export only
(:meth:`KnowledgeGraph.to_networkx`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from .graph_arrays import FACTS, PLAIN, SYNONYMY, SYNONYMY_SCALE, TITLE, EdgeStore, NodeTable, PassageRecord
from .graph_files import (
    fill_graph_from_dict,
    graph_to_dict,
    graph_to_networkx,
    load_graph,
    open_graph_files,
    save_graph,
)
from .synonym_lists import SynonymLists
from .walk.ppr import DEFAULT_DAMPING, PageRankGraph

__all__ = [
    "DEFAULT_SYNONYMY_BLOCK_SIZE",
    "DEFAULT_SYNONYMY_MIN_CHARS",
    "DEFAULT_SYNONYMY_THRESHOLD",
    "DEFAULT_SYNONYMY_TOP_K",
    "DEFAULT_TITLE_EDGE_WEIGHT",
    "ENTITY",
    "GRAPH_FORMAT_VERSION",
    "PASSAGE",
    "EdgeWeights",
    "KnowledgeGraph",
    "PassageRecord",
]

DEFAULT_SYNONYMY_THRESHOLD = 0.8  # HippoRAG 2's synonymy_edge_sim_threshold
DEFAULT_SYNONYMY_TOP_K = 100  # HippoRAG caps each entity's synonyms at about 100 neighbours
DEFAULT_SYNONYMY_MIN_CHARS = 3
DEFAULT_SYNONYMY_BLOCK_SIZE = 1024
DEFAULT_TITLE_EDGE_WEIGHT = 10.0
GRAPH_FORMAT_VERSION = 1
ENTITY = "entity"
PASSAGE = "passage"
_KIND_CODE = {PASSAGE: 1, ENTITY: 2}
_CHANNEL_NAMES = {FACTS: "fact", PLAIN: "passage", TITLE: "title"}


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
    """Entity and passage nodes with fact, passage and synonymy edges (see the module docstring for weights).

    Args:
        synonymy_threshold: minimum cosine similarity of two entity embeddings for a synonymy edge.
        synonymy_top_k: each entity keeps at most this many synonyms (its nearest neighbours above the threshold).
        synonymy_min_chars: entities whose key has fewer letters and digits get no synonymy edge.
        synonymy_block_size: entity rows compared at once when computing similarities (memory bound).
        title_edge_weight: weight of the edge between a passage and its own title entity (1: a plain passage edge).

    Attributes:
        version: bumped by every change; the PageRank matrix is rebuilt once per version.
    """

    def __init__(
        self,
        synonymy_threshold: float = DEFAULT_SYNONYMY_THRESHOLD,
        synonymy_top_k: int = DEFAULT_SYNONYMY_TOP_K,
        synonymy_min_chars: int = DEFAULT_SYNONYMY_MIN_CHARS,
        synonymy_block_size: int = DEFAULT_SYNONYMY_BLOCK_SIZE,
        title_edge_weight: float = DEFAULT_TITLE_EDGE_WEIGHT,
    ) -> None:
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
        self.synonyms: dict[str, list[tuple[str, float]]] = {}
        self._stale_synonyms: set[str] = set()
        self._nodes = NodeTable()
        self._edges = EdgeStore()
        self.version = 0
        self._pagerank: PageRankGraph | None = None

    # ------------------------------------------------------------------ structure

    @property
    def num_entities(self) -> int:
        return len(self.entity_names)

    @property
    def num_facts(self) -> int:
        return len(self.facts)

    @property
    def num_passages(self) -> int:
        return len(self.passages)

    @property
    def num_nodes(self) -> int:
        return len(self._nodes)

    @property
    def num_edges(self) -> int:
        """Undirected edges of positive weight."""
        return int((self._edge_weights()[2] > 0).sum())

    def _bump(self) -> None:
        self.version += 1
        self._pagerank = None

    def add_passage(
        self,
        passage_id: str,
        entities: Mapping[str, str],
        facts: Mapping[str, tuple[str, str, str]],
        ref_doc_id: str | None = None,
        title: str = "",
        title_entities: Iterable[str] = (),
    ) -> tuple[list[str], list[str]]:
        """Add a passage node, its entities, facts and edges (synonymy edges come from :meth:`update_synonymy`).

        Args:
            passage_id: the passage's id (also its node id).
            entities: ``{entity id: entity key}`` of every entity the passage names.
            facts: ``{fact id: (subject id, predicate, object id)}``; subjects and objects must be in ``entities``.
            ref_doc_id: the id of the document the passage comes from (for :meth:`passages_of_document`).
            title: the passage's title (kept for traces).
            title_entities: the ids (among ``entities``) of the entities the title names; their passage edges
                weigh ``title_edge_weight``.

        Returns:
            The ids of the entities and of the facts that are new to the graph.

        Raises:
            ValueError: the passage is already in the graph, its id is an entity's, or a fact names an entity not
                in ``entities``.
        """
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
        self._link(passage_id, record, new_entities, new_facts)
        self._bump()
        return new_entities, new_facts

    def _link(self, passage_id: str, record: PassageRecord, new_entities: Sequence[str],
              new_facts: Sequence[str]) -> None:
        """Add the passage's node, its new entity nodes, its passage edges and the edges of its new facts."""
        passage = self._nodes.add(passage_id, _KIND_CODE[PASSAGE])
        for entity_id in new_entities:
            self._nodes.add(entity_id, _KIND_CODE[ENTITY])
        for entity_id in record.entities:
            self.entity_passages.setdefault(entity_id, set()).add(passage_id)
        for fact_id in record.facts:
            self.fact_support[fact_id] = self.fact_support.get(fact_id, 0) + 1
        self._passage_edges(passage, record, 1)
        self._fact_edges(new_facts, 1)

    def _passage_edges(self, passage: int, record: PassageRecord, delta: int) -> None:
        own = set(record.title_entities)
        for channel, chosen in ((PLAIN, [e for e in record.entities if e not in own]), (TITLE, record.title_entities)):
            self._edges.add(passage, self._nodes.slots(chosen), channel, delta)

    def _fact_edges(self, fact_ids: Iterable[str], delta: int) -> None:
        pairs = [(s, o) for s, _, o in (self.facts[f] for f in fact_ids) if s != o]
        if pairs:
            self._edges.add(self._nodes.slots(p[0] for p in pairs), self._nodes.slots(p[1] for p in pairs),
                            FACTS, delta)

    def remove_passage(self, passage_id: str) -> tuple[list[str], list[str]]:
        """Remove a passage, its edges, and the facts and entities no other passage supports.

        Synonym lists that lose a neighbour while full are marked stale: pass the entity embeddings to
        :meth:`update_synonymy` to recompute them (a neighbour beyond the old top-k may now qualify).

        Returns:
            The ids of the removed entities and of the removed facts.

        Raises:
            KeyError: the passage is not in the graph.
        """
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
        gone = set(removed_entities)
        lost_pairs = {tuple(sorted((e, o))) for e in removed_entities for o in self._synonym_partners(e)}
        self._set_synonymy_edges({pair: self._synonymy(*pair) for pair in lost_pairs}, dict.fromkeys(lost_pairs, 0.0))
        for entity_id in removed_entities:
            del self.entity_passages[entity_id]
            del self.entity_names[entity_id]
            self._drop_synonyms_of(entity_id, gone)
            self._nodes.remove(entity_id)
        self._bump()
        return removed_entities, removed_facts

    def passages_of_document(self, ref_doc_id: str) -> list[str]:
        """Ids of the passages that came from the document ``ref_doc_id``."""
        return [pid for pid, record in self.passages.items() if record.ref_doc_id == ref_doc_id]

    # ------------------------------------------------------------------ edges and PageRank

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
        return PASSAGE if self._nodes.kind(self._nodes.slot(key)) == _KIND_CODE[PASSAGE] else ENTITY

    def pagerank_graph(self, damping: float = DEFAULT_DAMPING) -> PageRankGraph:
        """The cached PageRank matrix of this graph version (built on first use after each change).

        Node order: passages (sorted by id), then entities (sorted by id).
        """
        if self._pagerank is None or self._pagerank.damping != damping:
            nodes = self.node_order()
            position = np.full(self._nodes.capacity, -1, dtype=np.int64)
            position[self._nodes.slots(nodes)] = np.arange(len(nodes))
            pairs, _, weight = self._edge_weights()
            keep = weight > 0
            edges = np.stack([position[pairs[keep, 0]], position[pairs[keep, 1]]], axis=1)
            self._pagerank = PageRankGraph.from_edges(
                len(nodes), edges, weight[keep], nodes=nodes, damping=damping, version=self.version
            )
        return self._pagerank

    def node_order(self) -> list[str]:
        """Passage ids then entity ids, each sorted: the row order of :meth:`pagerank_graph`."""
        return sorted(self.passages) + sorted(self.entity_names)

    # ------------------------------------------------------------------ persistence and export

    _kind_code = staticmethod(_KIND_CODE.__getitem__)

    def _rebuild_structure(self) -> None:
        """Nodes and edges from the tables alone (passages, facts, synonym lists), as a fresh build makes them."""
        self._nodes, self._edges = NodeTable(), EdgeStore()
        for pid in sorted(self.passages):
            self._nodes.add(pid, _KIND_CODE[PASSAGE])
        for entity_id in sorted(self.entity_names):
            self._nodes.add(entity_id, _KIND_CODE[ENTITY])
        for pid, record in self.passages.items():
            self._passage_edges(self._nodes.slot(pid), record, 1)
        self._fact_edges(self.facts, 1)
        pairs = {(min(a, b), max(a, b)) for a, lst in self.synonyms.items() for b, _ in lst if b in self.entity_names}
        self._set_synonymy_edges({}, {pair: self._synonymy(*pair) for pair in sorted(pairs)})
        self._pagerank = None

    def check_edges(self) -> None:
        """Check the edge table against the tables it was built from: each passage links exactly the entities its
        record names (its title entities on their own channel) and each entity pair carries one count per fact
        between them. A saved table edited or mixed up (two passage keys swapped, say) is refused rather than
        walked. Vectorised over the whole table: about as long as reading the tables.

        Raises:
            ValueError: the channel whose edges disagree.
        """
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
            passage, own = self._nodes.slot(pid), set(record.title_entities)
            for channel, chosen in ((PLAIN, [e for e in record.entities if e not in own]),
                                    (TITLE, record.title_entities)):
                ends[channel][0].extend([passage] * len(chosen))
                ends[channel][1].extend(chosen)
        fact_pairs = [(s, o) for s, _, o in self.facts.values() if s != o]
        edges = {channel: (np.asarray(slots, dtype=np.int64), self._nodes.slots(entities))
                 for channel, (slots, entities) in ends.items()}
        edges[FACTS] = (self._nodes.slots(s for s, _ in fact_pairs), self._nodes.slots(o for _, o in fact_pairs))
        return edges

    def config(self) -> dict[str, Any]:
        return {
            "synonymy_threshold": self.synonymy_threshold,
            "synonymy_top_k": self.synonymy_top_k,
            "synonymy_min_chars": self.synonymy_min_chars,
            "synonymy_block_size": self.synonymy_block_size,
            "title_edge_weight": self.title_edge_weight,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable form: config, records, synonym lists, and the node and edge lists."""
        return graph_to_dict(self, GRAPH_FORMAT_VERSION)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KnowledgeGraph:
        """Rebuild a graph from :meth:`to_dict` output.

        Raises:
            ValueError: an unknown format version, or node and edge lists that disagree with the records.
        """
        if (version := data.get("format_version")) != GRAPH_FORMAT_VERSION:
            raise ValueError(f"unsupported graph format version {version!r} (this code reads {GRAPH_FORMAT_VERSION})")
        graph = cls(**data.get("config", {}))
        fill_graph_from_dict(graph, data)
        return graph

    def save(self, folder: str | Path, attached: Mapping[str, Any] | None = None) -> Path:
        """Write this version to ``folder`` as ``tables.json`` and ``.npy`` arrays, with ``attached`` JSON values
        inside ``tables.json`` (see :mod:`.graph_files`)."""
        return save_graph(self, folder, attached)

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> KnowledgeGraph:
        """Read a graph written by :meth:`save`; with ``mmap`` the edge arrays are memory-mapped read-only (shared
        by every process that loads the folder; a change writes new arrays in memory, never the files).

        Raises:
            ValueError: a missing, malformed or inconsistent file.
        """
        tables, arrays = open_graph_files(folder, mmap)
        graph = cls(**tables.get("config", {}))
        load_graph(graph, folder, tables, arrays)
        return graph

    def to_networkx(self) -> Any:
        """This version as a ``networkx.Graph`` (nodes: ``kind``, ``name``; edges: ``facts``, ``synonymy``,
        ``passage``, ``weight``); ``networkx.write_graphml(graph.to_networkx(), path)`` writes GraphML."""
        return graph_to_networkx(self)

    @property
    def graph(self) -> Any:
        """:meth:`to_networkx`, built on each access (for counts use :attr:`num_nodes` and :attr:`num_edges`)."""
        return self.to_networkx()

    def __repr__(self) -> str:
        return (
            f"KnowledgeGraph(passages={self.num_passages}, entities={self.num_entities}, facts={self.num_facts}, "
            f"edges={self.num_edges}, version={self.version})"
        )
