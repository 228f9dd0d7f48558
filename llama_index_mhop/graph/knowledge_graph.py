"""The HippoRAG 2 knowledge graph: entity and passage nodes, fact, passage and synonymy edges (networkx).

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import numpy as np

from .ppr import DEFAULT_DAMPING, PageRankGraph

__all__ = [
    "DEFAULT_SYNONYMY_BLOCK_SIZE",
    "DEFAULT_SYNONYMY_MIN_CHARS",
    "DEFAULT_SYNONYMY_THRESHOLD",
    "DEFAULT_SYNONYMY_TOP_K",
    "DEFAULT_TITLE_EDGE_WEIGHT",
    "ENTITY",
    "GRAPH_FORMAT_VERSION",
    "PASSAGE",
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
_SIM_DECIMALS = 6  # similarities are stored rounded: block shapes change the last float bits


@dataclass(frozen=True)
class PassageRecord:
    """What one passage contributes: its entity ids (title entities among them), fact ids, and source document."""

    entities: tuple[str, ...]
    facts: tuple[str, ...]
    ref_doc_id: str | None = None
    title: str = field(default="", compare=False)
    title_entities: tuple[str, ...] = ()


class KnowledgeGraph:
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
        self.graph = nx.Graph()
        self.entity_names: dict[str, str] = {}
        self.facts: dict[str, tuple[str, str, str]] = {}  # fact id -> (subject id, predicate, object id)
        self.passages: dict[str, PassageRecord] = {}
        self.entity_passages: dict[str, set[str]] = {}
        self.fact_passages: dict[str, set[str]] = {}
        self.synonyms: dict[str, list[tuple[str, float]]] = {}
        self._stale_synonyms: set[str] = set()
        self.version = 0
        self._pagerank: PageRankGraph | None = None

    # ------------------------------------------------------------------ structure

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    @property
    def num_entities(self) -> int:
        return len(self.entity_names)

    @property
    def num_facts(self) -> int:
        return len(self.facts)

    @property
    def num_passages(self) -> int:
        return len(self.passages)

    def _bump(self) -> None:
        self.version += 1
        self._pagerank = None

    def _add_weight(self, u: str, v: str, kind: str, amount: float) -> None:
        if self.graph.has_edge(u, v):
            data = self.graph.edges[u, v]
        else:
            self.graph.add_edge(u, v, facts=0, synonymy=0.0, passage=0.0, weight=0.0)
            data = self.graph.edges[u, v]
        data[kind] += amount
        self._reweigh(u, v)

    def _set_weight(self, u: str, v: str, kind: str, value: float) -> None:
        if not self.graph.has_edge(u, v):
            if not value:
                return
            self.graph.add_edge(u, v, facts=0, synonymy=0.0, passage=0.0, weight=0.0)
        self.graph.edges[u, v][kind] = value
        self._reweigh(u, v)

    def _reweigh(self, u: str, v: str) -> None:
        data = self.graph.edges[u, v]
        weight = data["facts"] + data["synonymy"] + data["passage"]
        if weight <= 0:
            self.graph.remove_edge(u, v)
        else:
            data["weight"] = float(weight)

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
            ValueError: the passage is already in the graph, or a fact names an entity not in ``entities``.
        """
        if passage_id in self.passages:
            raise ValueError(f"passage {passage_id!r} is already in the graph")
        for fact_id, (subject, _, obj) in facts.items():
            if subject not in entities or obj not in entities:
                raise ValueError(f"fact {fact_id!r} links an entity that is not among the passage's entities")
        own = tuple(e for e in dict.fromkeys(title_entities) if e in entities)
        new_entities = [e for e in entities if e not in self.entity_names]
        new_facts = [f for f in facts if f not in self.facts]
        self.graph.add_node(passage_id, kind=PASSAGE, name=title)
        for entity_id, name in entities.items():
            if entity_id not in self.entity_names:
                self.entity_names[entity_id] = name
                self.graph.add_node(entity_id, kind=ENTITY, name=name)
                self._stale_synonyms.add(entity_id)  # its synonyms come with the next update_synonymy
            self.entity_passages.setdefault(entity_id, set()).add(passage_id)
            self._add_weight(passage_id, entity_id, "passage", self.title_edge_weight if entity_id in own else 1.0)
        for fact_id in facts:
            if fact_id not in self.facts:
                subject, predicate, obj = facts[fact_id]
                self.facts[fact_id] = (subject, predicate, obj)
                if subject != obj:
                    self._add_weight(subject, obj, "facts", 1)
            self.fact_passages.setdefault(fact_id, set()).add(passage_id)
        self.passages[passage_id] = PassageRecord(tuple(entities), tuple(facts), ref_doc_id, title, own)
        self._bump()
        return new_entities, new_facts

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
            supporters = self.fact_passages[fact_id]
            supporters.discard(passage_id)
            if not supporters:
                del self.fact_passages[fact_id]
                subject, _, obj = self.facts.pop(fact_id)
                if subject != obj:
                    self._add_weight(subject, obj, "facts", -1)
                removed_facts.append(fact_id)
        removed_entities = []
        for entity_id in record.entities:
            supporters = self.entity_passages[entity_id]
            supporters.discard(passage_id)
            if not supporters:
                removed_entities.append(entity_id)
        self.graph.remove_node(passage_id)
        for entity_id in removed_entities:
            del self.entity_passages[entity_id]
            del self.entity_names[entity_id]
            self._drop_synonyms_of(entity_id)
            self.graph.remove_node(entity_id)
        self._bump()
        return removed_entities, removed_facts

    def _drop_synonyms_of(self, entity_id: str) -> None:
        self.synonyms.pop(entity_id, None)
        self._stale_synonyms.discard(entity_id)
        for other, neighbours in self.synonyms.items():
            if any(e == entity_id for e, _ in neighbours):
                if len(neighbours) >= self.synonymy_top_k:
                    self._stale_synonyms.add(other)  # a neighbour beyond the old top-k may now qualify
                self.synonyms[other] = [(e, s) for e, s in neighbours if e != entity_id]

    def passages_of_document(self, ref_doc_id: str) -> list[str]:
        """Ids of the passages that came from the document ``ref_doc_id``."""
        return [pid for pid, record in self.passages.items() if record.ref_doc_id == ref_doc_id]

    @property
    def stale_synonyms(self) -> set[str]:
        """Entities whose synonym list :meth:`update_synonymy` must (re)compute: new ones, and full lists that lost
        a neighbour."""
        return set(self._stale_synonyms)

    # ------------------------------------------------------------------ synonymy

    def _eligible(self, entity_id: str) -> bool:
        key = self.entity_names.get(entity_id, "")
        return len(re.sub(r"[^a-z0-9]", "", key)) >= self.synonymy_min_chars and bool(re.search(r"[a-z]", key))

    def update_synonymy(
        self, entity_ids: Sequence[str], vectors: np.ndarray, changed: Iterable[str] | None = None
    ) -> int:
        """Compute the synonym lists of new and stale entities (:attr:`stale_synonyms`) and of ``changed`` ones,
        exactly (blocked dot products), and merge them into the other entities' lists.

        The top-k of an unchanged entity over the old entities plus the changed ones is the top-k of its old list
        plus the changed candidates, so only the changed rows of the similarity matrix are computed, in blocks.

        Args:
            entity_ids: every entity of the graph, in the row order of ``vectors``.
            vectors: one embedding per entity (normalised here).
            changed: more entities whose synonyms to recompute (all of them for a full rebuild).

        Returns:
            The number of synonymy edges in the graph afterwards.

        Raises:
            ValueError: ``entity_ids`` is not exactly the graph's entities, or ``vectors`` has the wrong shape.
        """
        ids = list(entity_ids)
        if set(ids) != set(self.entity_names) or len(ids) != len(self.entity_names):
            raise ValueError(
                f"update_synonymy needs the embeddings of exactly the graph's {len(self.entity_names)} entities, "
                f"got {len(ids)}"
            )
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise ValueError(f"vectors must have shape ({len(ids)}, dim), got {matrix.shape}")
        queries = self._pending(changed)
        if not ids:
            return self._apply_synonyms(queries, [])
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms > 0, norms, 1.0)
        eligible = np.array([self._eligible(e) for e in ids], dtype=bool)
        position = {e: i for i, e in enumerate(ids)}
        rows = sorted(position[e] for e in queries if eligible[position[e]])
        # At most about 64M similarities (256 MB) at once, however many entities there are.
        block_rows = max(1, min(self.synonymy_block_size, (1 << 26) // max(1, len(ids))))
        threshold = self.synonymy_threshold

        def candidates() -> Iterator[tuple[str, list[tuple[str, float]]]]:
            for start in range(0, len(rows), block_rows):
                block = rows[start : start + block_rows]
                sims = matrix[block] @ matrix.T
                sims[:, ~eligible] = -np.inf
                hit_rows, hit_cols = np.nonzero(sims >= threshold)
                values = sims[hit_rows, hit_cols]
                per_row: dict[int, list[tuple[str, float]]] = {r: [] for r in range(len(block))}
                for r, c, v in zip(hit_rows.tolist(), hit_cols.tolist(), values.tolist(), strict=True):
                    per_row[r].append((ids[c], float(v)))
                for r, row in enumerate(block):
                    yield ids[row], per_row[r]

        return self._apply_synonyms(queries, candidates())

    def update_synonymy_by_search(
        self,
        search: Callable[[list[str]], list[list[tuple[str, float]]]],
        changed: Iterable[str] | None = None,
        batch_size: int = 1024,
    ) -> int:
        """Like :meth:`update_synonymy`, with the neighbours found by ``search`` (e.g. an HNSW vector index).

        For large graphs: the all-pairs similarity of :meth:`update_synonymy` grows with the square of the number
        of entities. ``search(ids)`` returns, for each entity id, its nearest entities as ``(id, cosine)``; it
        must return at least every neighbour above the threshold among the ``synonymy_top_k`` nearest. A pair is
        found from the new entity's side only, so an old entity can miss a new synonym that is not among the
        new entity's own top-k (possible only when more than ``synonymy_top_k`` entities are that similar).
        """
        queries = self._pending(changed)
        ordered = sorted(e for e in queries if self._eligible(e))

        def candidates() -> Iterator[tuple[str, list[tuple[str, float]]]]:
            for start in range(0, len(ordered), batch_size):
                batch = ordered[start : start + batch_size]
                for source, found in zip(batch, search(batch), strict=True):
                    yield source, [(e, float(v)) for e, v in found
                                   if v >= self.synonymy_threshold and e in self.entity_names and self._eligible(e)]

        return self._apply_synonyms(queries, candidates())

    def _pending(self, changed: Iterable[str] | None) -> set[str]:
        queries = {e for e in (changed or ()) if e in self.entity_names}
        queries |= self._stale_synonyms & set(self.entity_names)
        self._stale_synonyms.clear()
        return queries

    def _apply_synonyms(
        self, queries: set[str], rows: Iterable[tuple[str, list[tuple[str, float]]]]
    ) -> int:
        """Replace the lists of ``queries`` by their candidates (top-k) and merge them into the others' lists."""
        touched: dict[str, list[tuple[str, float]]] = {}  # entity -> its list before this update

        def remember(entity_id: str) -> None:
            if entity_id not in touched:
                touched[entity_id] = list(self.synonyms.get(entity_id, []))

        for e in queries:
            remember(e)
            self.synonyms.pop(e, None)
        merges: dict[str, dict[str, float]] = {}
        for source, found in rows:
            kept = [(target, round(sim, _SIM_DECIMALS)) for target, sim in found if target != source]
            self.synonyms[source] = self._top_k(kept)
            for target, sim in kept:
                if target not in queries:
                    merges.setdefault(target, {})[source] = sim
        for target, candidates in merges.items():
            remember(target)
            current = {e: s for e, s in self.synonyms.get(target, [])}
            current.update(candidates)
            self.synonyms[target] = self._top_k(list(current.items()))
        for entity_id in list(self.synonyms):
            if not self.synonyms[entity_id]:
                del self.synonyms[entity_id]
        self._sync_synonymy_edges(touched)
        self._bump()
        return sum(1 for _, _, d in self.graph.edges(data=True) if d["synonymy"])

    def _top_k(self, candidates: list[tuple[str, float]]) -> list[tuple[str, float]]:
        candidates.sort(key=lambda item: (-item[1], item[0]))
        return candidates[: self.synonymy_top_k]

    def _sync_synonymy_edges(self, touched: Mapping[str, list[tuple[str, float]]]) -> None:
        pairs: set[tuple[str, str]] = set()
        for entity_id, before in touched.items():
            for other, _ in before:
                pairs.add((entity_id, other))
            for other, _ in self.synonyms.get(entity_id, []):
                pairs.add((entity_id, other))
        for a, b in pairs:
            if a not in self.entity_names or b not in self.entity_names:
                continue
            sim = self._synonymy(a, b)
            self._set_weight(a, b, "synonymy", sim)

    def _synonymy(self, a: str, b: str) -> float:
        found = [s for e, s in self.synonyms.get(a, []) if e == b] + [s for e, s in self.synonyms.get(b, []) if e == a]
        return max(found) if found else 0.0

    # ------------------------------------------------------------------ PageRank

    def pagerank_graph(self, damping: float = DEFAULT_DAMPING) -> PageRankGraph:
        """The cached PageRank matrix of this graph version (built on first use after each change).

        Node order: passages (sorted by id), then entities (sorted by id).
        """
        if self._pagerank is None or self._pagerank.damping != damping:
            nodes = self.node_order()
            self._pagerank = PageRankGraph.from_networkx(
                self.graph, weight="weight", nodelist=nodes, damping=damping, version=self.version
            )
        return self._pagerank

    def node_order(self) -> list[str]:
        """Passage ids then entity ids, each sorted: the row order of :meth:`pagerank_graph`."""
        return sorted(self.passages) + sorted(self.entity_names)

    # ------------------------------------------------------------------ persistence

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
        return {
            "format_version": GRAPH_FORMAT_VERSION,
            "config": self.config(),
            "version": self.version,
            "entities": dict(sorted(self.entity_names.items())),
            "facts": {f: list(t) for f, t in sorted(self.facts.items())},
            "passages": {
                pid: {"entities": list(r.entities), "facts": list(r.facts), "ref_doc_id": r.ref_doc_id,
                      "title": r.title, "title_entities": list(r.title_entities)}
                for pid, r in sorted(self.passages.items())
            },
            "synonyms": {e: [[o, s] for o, s in lst] for e, lst in sorted(self.synonyms.items())},
            "stale_synonyms": sorted(self._stale_synonyms),
            "nodes": [[n, d["kind"], d.get("name", "")] for n, d in sorted(self.graph.nodes(data=True))],
            "edges": sorted(
                [min(u, v), max(u, v), d["facts"], d["synonymy"], d["passage"]]
                for u, v, d in self.graph.edges(data=True)
            ),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KnowledgeGraph:
        """Rebuild a graph from :meth:`to_dict` output.

        Raises:
            ValueError: an unknown format version, or node and edge lists that disagree with the records.
        """
        version = data.get("format_version")
        if version != GRAPH_FORMAT_VERSION:
            raise ValueError(f"unsupported graph format version {version!r} (this code reads {GRAPH_FORMAT_VERSION})")
        graph = cls(**data.get("config", {}))
        graph.entity_names = {str(k): str(v) for k, v in data["entities"].items()}
        graph.facts = {str(k): (str(s), str(p), str(o)) for k, (s, p, o) in data["facts"].items()}
        for pid, rec in data["passages"].items():
            record = PassageRecord(
                tuple(rec["entities"]), tuple(rec["facts"]), rec.get("ref_doc_id"), rec.get("title", ""),
                tuple(rec.get("title_entities", ())),
            )
            graph.passages[pid] = record
            for e in record.entities:
                graph.entity_passages.setdefault(e, set()).add(pid)
            for f in record.facts:
                graph.fact_passages.setdefault(f, set()).add(pid)
        graph.synonyms = {e: [(str(o), float(s)) for o, s in lst] for e, lst in data.get("synonyms", {}).items()}
        graph._stale_synonyms = set(data.get("stale_synonyms", []))
        for node, kind, name in data["nodes"]:
            graph.graph.add_node(node, kind=kind, name=name)
        for u, v, facts, synonymy, passage in data["edges"]:
            graph.graph.add_edge(
                u, v, facts=int(facts), synonymy=float(synonymy), passage=float(passage),
                weight=float(facts + synonymy + passage),
            )
        expected_nodes = set(graph.passages) | set(graph.entity_names)
        if set(graph.graph.nodes) != expected_nodes:
            raise ValueError("graph file is inconsistent: its node list does not match its passages and entities")
        graph.version = int(data.get("version", 0))
        return graph

    def edge_list(self) -> list[tuple[str, str, int, float, float]]:
        """Every edge as ``(u, v, facts, synonymy, passage)`` with ``u < v``, sorted (for comparisons)."""
        return [tuple(e) for e in self.to_dict()["edges"]]  # type: ignore[misc]

    def __repr__(self) -> str:
        return (
            f"KnowledgeGraph(passages={self.num_passages}, entities={self.num_entities}, facts={self.num_facts}, "
            f"edges={self.graph.number_of_edges()}, version={self.version})"
        )
