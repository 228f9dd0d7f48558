"""The edges of a knowledge graph: the weighted node pairs its records imply (in the integer channels of
:mod:`.graph_arrays`; :mod:`.knowledge_graph` gives the weights), and the PageRank matrix over them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import NamedTuple

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
from .walk.exact import DEFAULT_DAMPING, PageRankGraph

__all__ = ["ENTITY", "KIND_CODE", "PASSAGE", "EdgeWeights", "GraphEdges"]

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


class GraphEdges:
    """The nodes and weighted edges of a knowledge graph's records (a mixin of
    :class:`~.knowledge_graph.KnowledgeGraph`, which provides the attributes below): written, read back as weights,
    rebuilt from the records, and checked against them."""

    passages: dict[str, PassageRecord]
    entity_names: dict[str, str]
    facts: dict[str, tuple[str, str, str]]
    synonyms: dict[str, SynonymList]
    title_edge_weight: float
    version: int
    _nodes: NodeTable
    _edges: EdgeStore
    _pagerank: PageRankGraph | None
    _synonymy: Callable[..., float]

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
        """The cached PageRank matrix of this graph version (built on first use after each change), its rows in
        :meth:`node_order`."""
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
        """Check the edge table against the records (each passage links exactly the entities its record names,
        each entity pair carries one count per fact), so a saved table edited or mixed up is refused rather than
        walked; a ``ValueError`` names the channel whose edges disagree."""
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
