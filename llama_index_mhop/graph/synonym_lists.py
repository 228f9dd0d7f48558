"""Synonym lists of entities (:class:`SynonymLists`) and their refresh, exact or by Chroma's HNSW index."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ..stores.chroma_batches import get_records
from .graph_arrays import SynonymList

if TYPE_CHECKING:
    from .graph_stores import GraphStores
    from .knowledge_graph import KnowledgeGraph

__all__ = ["DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES", "SynonymLists", "SynonymyRefresher", "exact_neighbours",
           "may_have_synonyms"]

#: Up to this many entities synonymy is computed exactly (all pairs); beyond, from Chroma's HNSW index.
DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES = 20_000
_FIRST_NEIGHBOURS = 16

_Item = TypeVar("_Item")

_SIM_DECIMALS = 6  # similarities are stored rounded: block shapes change the last float bits
_MAX_SIMILARITIES = 1 << 26  # similarities computed at once (256 MB of float32), however many entities there are
_NO_SYNONYMS = SynonymList()
_APPLY_BATCH = 4096  # entities whose new lists are applied (and their edges moved) at once


def _batches(items: Iterable[_Item], size: int) -> Iterator[list[_Item]]:
    iterator = iter(items)
    while batch := list(islice(iterator, size)):
        yield batch


def may_have_synonyms(key: str, min_chars: int) -> bool:
    """Whether a key gets synonymy edges: ``min_chars`` letters or digits, one a letter (not a year)."""
    return len(re.sub(r"[^a-z0-9]", "", key)) >= min_chars and bool(re.search(r"[a-z]", key))


def exact_neighbours(ids: Sequence[str], vectors: np.ndarray, eligible: np.ndarray, rows: Sequence[int],
                     threshold: float, block_size: int) -> Iterator[tuple[str, list[tuple[str, float]]]]:
    """``(id, [(neighbour id, similarity), ...])`` for each row in ``rows``: the ``eligible`` entities whose cosine
    with it is at least ``threshold``."""
    block_rows = max(1, min(block_size, _MAX_SIMILARITIES // max(1, len(ids))))
    for start in range(0, len(rows), block_rows):
        block = list(rows[start : start + block_rows])
        sims = vectors[block] @ vectors.T
        sims[:, ~eligible] = -np.inf
        hit_rows, hit_cols = np.nonzero(sims >= threshold)
        values = sims[hit_rows, hit_cols]
        per_row: dict[int, list[tuple[str, float]]] = {r: [] for r in range(len(block))}
        for r, c, v in zip(hit_rows.tolist(), hit_cols.tolist(), values.tolist(), strict=True):
            per_row[r].append((ids[c], float(v)))
        for r, row in enumerate(block):
            yield ids[row], per_row[r]


class SynonymLists:
    """The synonym lists of a knowledge graph's entities (a mixin of :class:`~.knowledge_graph.KnowledgeGraph`)."""

    entity_names: dict[str, str]
    synonyms: dict[str, SynonymList]
    _stale_synonyms: set[str]
    synonymy_threshold: float
    synonymy_top_k: int
    synonymy_min_chars: int
    synonymy_block_size: int
    _bump: Callable[[], None]
    _set_synonymy_edges: Callable[[Mapping[tuple[str, str], float], Mapping[tuple[str, str], float]], None]
    _synonymy_edge_count: Callable[[], int]

    @property
    def stale_synonyms(self) -> set[str]:
        """Entities whose list :meth:`update_synonymy` must (re)compute: new ones, full lists that lost one."""
        return set(self._stale_synonyms)

    def _drop_synonyms_of(self, gone: set[str]) -> dict[tuple[str, str], float]:
        """Drop the ``gone`` entities' lists and entries (full lists go stale); the weights of the lost pairs."""
        holders = [other for other, neighbours in self.synonyms.items() if not gone.isdisjoint(neighbours.ids)]
        pairs = {(min(a, b), max(a, b)) for a in gone for b in self.synonyms.get(a, _NO_SYNONYMS).ids}
        pairs.update((min(a, b), max(a, b)) for b in holders for a in self.synonyms[b].ids if a in gone)
        lost = {pair: self._synonymy(*pair) for pair in pairs}  # weighed before any list changes
        for entity_id in gone:
            self._stale_synonyms.discard(entity_id)
            self.synonyms.pop(entity_id, None)
        for other in [h for h in holders if h not in gone]:
            neighbours = self.synonyms[other]
            if len(neighbours) >= self.synonymy_top_k:
                self._stale_synonyms.add(other)
            kept = SynonymList((e, s) for e, s in neighbours if e not in gone)
            if kept:
                self.synonyms[other] = kept
            else:
                del self.synonyms[other]
        return lost

    def _eligible(self, entity_id: str) -> bool:
        return may_have_synonyms(self.entity_names.get(entity_id, ""), self.synonymy_min_chars)

    def update_synonymy(self, entity_ids: Sequence[str], vectors: np.ndarray,
                        changed: Iterable[str] | None = None) -> int:
        """Compute the synonym lists of new, stale and ``changed`` entities exactly from ``vectors`` and merge them
        into the others' lists; the synonymy edge count (a ``ValueError`` for vectors out of step)."""
        ids = list(entity_ids)
        if set(ids) != set(self.entity_names) or len(ids) != len(self.entity_names):
            raise ValueError(f"update_synonymy needs the embeddings of exactly the graph's {len(self.entity_names)} "
                             f"entities, got {len(ids)}")
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(ids):
            raise ValueError(f"vectors must have shape ({len(ids)}, dim), got {matrix.shape}")
        queries = self._pending(changed)
        norms = np.linalg.norm(matrix, axis=1, keepdims=True)
        matrix = matrix / np.where(norms > 0, norms, 1.0)
        eligible = np.array([self._eligible(e) for e in ids], dtype=bool)
        position = {e: i for i, e in enumerate(ids)}
        rows = sorted(position[e] for e in queries if eligible[position[e]])
        found = exact_neighbours(ids, matrix, eligible, rows, self.synonymy_threshold, self.synonymy_block_size)
        return self._apply_synonyms(queries, found)

    def update_synonymy_by_search(self, search: Callable[[list[str]], list[list[tuple[str, float]]]],
                                  changed: Iterable[str] | None = None, batch_size: int = 1024) -> int:
        """:meth:`update_synonymy` for large graphs, ``search(ids)`` giving each entity's nearest ``(id, cosine)``."""
        queries = self._pending(changed)
        ordered = sorted(e for e in queries if self._eligible(e))
        def candidates() -> Iterable[tuple[str, list[tuple[str, float]]]]:
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

    def _apply_synonyms(self, queries: set[str], rows: Iterable[tuple[str, list[tuple[str, float]]]]) -> int:
        """Set the lists of ``queries`` from their candidates, :data:`_APPLY_BATCH` rows at a time (as one pass)."""
        found = set()
        for batch in _batches(rows, _APPLY_BATCH):
            found.update(source for source, _ in batch)
            self._apply_batch(queries, batch)
        # queries without a row (not eligible for synonyms) keep no list
        for batch in _batches(((e, []) for e in sorted(queries - found)), _APPLY_BATCH):
            self._apply_batch(queries, batch)
        self._bump()
        return self._synonymy_edge_count()

    def _apply_batch(self, queries: set[str], rows: list[tuple[str, list[tuple[str, float]]]]) -> None:
        touched: dict[str, SynonymList] = {}  # entity -> its list before this batch (lists are immutable)
        merges: dict[str, dict[str, float]] = {}
        for source, found in rows:
            touched.setdefault(source, self.synonyms.get(source, _NO_SYNONYMS))
            kept = [(target, round(sim, _SIM_DECIMALS)) for target, sim in found if target != source]
            self.synonyms[source] = self._top_k(kept)
            for target, sim in kept:
                if target not in queries:
                    merges.setdefault(target, {})[source] = sim
        for target, candidates in merges.items():
            touched.setdefault(target, self.synonyms.get(target, _NO_SYNONYMS))
            current = dict(self.synonyms.get(target, _NO_SYNONYMS))
            current.update(candidates)
            self.synonyms[target] = self._top_k(list(current.items()))
        for entity_id in touched:
            if not self.synonyms.get(entity_id):
                self.synonyms.pop(entity_id, None)
        self._sync_synonymy_edges(touched)

    def _top_k(self, candidates: list[tuple[str, float]]) -> SynonymList:
        candidates.sort(key=lambda item: (-item[1], item[0]))
        return SynonymList(candidates[: self.synonymy_top_k])

    def _sync_synonymy_edges(self, touched: Mapping[str, SynonymList]) -> None:
        """Move the synonymy edges of the touched entities from their lists before (``touched``) to now."""
        pairs: set[tuple[str, str]] = set()
        for entity_id, before in touched.items():
            for other in (*before.ids, *self.synonyms.get(entity_id, _NO_SYNONYMS).ids):
                if other in self.entity_names and entity_id in self.entity_names:
                    pairs.add((min(entity_id, other), max(entity_id, other)))
        old = {(a, b): self._synonymy(a, b, lambda e: touched.get(e, self.synonyms.get(e, _NO_SYNONYMS)))
               for a, b in pairs}
        self._set_synonymy_edges(old, {(a, b): self._synonymy(a, b) for a, b in pairs})

    def _synonymy(self, a: str, b: str, lists: Callable[[str], SynonymList] | None = None) -> float:
        """The synonymy weight of a pair: the larger similarity either entity's list holds for the other."""
        lists = lists or (lambda e: self.synonyms.get(e, _NO_SYNONYMS))
        found = [s for e, s in lists(a) if e == b] + [s for e, s in lists(b) if e == a]
        return max(found) if found else 0.0


class SynonymyRefresher:
    """Keeps a graph's synonymy edges in step with its entity collection (exact up to a size)."""

    def __init__(self, stores: GraphStores, exact_max_entities: int = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES) -> None:
        self.stores = stores
        self.exact_max_entities = exact_max_entities
        self._vectors: dict[str, np.ndarray] = {}

    def remember(self, vectors: Mapping[str, np.ndarray]) -> None:
        """Cache entity vectors just stored, so the next refresh need not read them back."""
        self._vectors.update(vectors)

    def forget(self, entity_ids: Sequence[str]) -> None:
        """Drop the cached vectors of removed entities."""
        for entity_id in entity_ids:
            self._vectors.pop(entity_id, None)

    def refresh(self, graph: KnowledgeGraph) -> bool:
        """Synonymy edges for the graph's new and stale entities; False when there was nothing to do."""
        if not graph.stale_synonyms:
            return False
        if graph.num_entities <= self.exact_max_entities:
            ids, matrix = self._entity_matrix(graph)
            graph.update_synonymy(ids, matrix)
        else:
            graph.update_synonymy_by_search(lambda ids: self._nearest_entities(graph, ids))
            self._vectors.clear()  # only the new entities' vectors were needed: do not hold them all
        return True

    def _load(self, graph: KnowledgeGraph, ids: Sequence[str]) -> None:
        """Cache the vectors of ``ids``: from Chroma, or embedded again when Chroma lost them."""
        missing = [e for e in ids if e not in self._vectors]
        if not missing:
            return
        for entity_id, row in get_records(self.stores.entities, missing, ["embeddings"]).items():
            self._vectors[entity_id] = np.asarray(row["embeddings"], dtype=np.float32)
        lost = [e for e in missing if e not in self._vectors]
        if lost:
            vectors = self.stores.embed([graph.entity_names[e] for e in lost], short=True)
            self._vectors.update(zip(lost, vectors, strict=True))

    def _entity_matrix(self, graph: KnowledgeGraph) -> tuple[list[str], np.ndarray]:
        ids = sorted(graph.entity_names)
        self._load(graph, ids)
        for gone in set(self._vectors) - set(graph.entity_names):
            del self._vectors[gone]
        return ids, np.vstack([self._vectors[e] for e in ids]) if ids else np.zeros((0, 1), dtype=np.float32)

    def _nearest_entities(self, graph: KnowledgeGraph, ids: list[str]) -> list[list[tuple[str, float]]]:
        """Each entity's nearest entities by HNSW: 16, and ``synonymy_top_k`` + 1 when the 16th qualifies."""
        collection = self.stores.entities
        wanted = min(graph.synonymy_top_k + 1, collection.count())
        first = min(_FIRST_NEIGHBOURS, wanted)
        self._load(graph, ids)
        vectors = np.vstack([self._vectors[e] for e in ids])
        threshold = graph.synonymy_threshold
        def query(rows: np.ndarray, n: int) -> list[list[tuple[str, float]]]:
            found = collection.query(query_embeddings=rows, n_results=n, include=["distances"])
            return [[(e, 1.0 - float(d)) for e, d in zip(i, dist, strict=True)]
                    for i, dist in zip(found["ids"], found["distances"], strict=True)]
        results = query(vectors, first) if first else [[] for _ in ids]
        again = [i for i, r in enumerate(results) if first < wanted and len(r) == first and r[-1][1] >= threshold]
        if again:
            for i, r in zip(again, query(vectors[again], wanted), strict=True):
                results[i] = r
        return results
