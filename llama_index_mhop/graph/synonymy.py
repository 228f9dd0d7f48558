"""Synonymy edges of a graph index: which entities' embeddings lie within the synonymy threshold of each other.

Up to ``exact_max_entities`` entities the similarities are computed exactly (all pairs); beyond, all-pairs grows
with the square of the entity count, so each new or stale entity's neighbours come from Chroma's HNSW index of
the entity collection. Entity vectors are cached between refreshes so that an insert does not read every entity
back from Chroma.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..stores.chroma_batches import get_records
from .graph_stores import GraphStores
from .knowledge_graph import KnowledgeGraph

__all__ = ["DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES", "SynonymyRefresher"]

#: Up to this many entities synonymy is computed exactly (all pairs); beyond, from Chroma's HNSW index.
DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES = 20_000
_FIRST_NEIGHBOURS = 16


class SynonymyRefresher:
    """Keeps a graph's synonymy edges up to date with its entity collection.

    Args:
        stores: the index's Chroma collections (entity vectors are read from, or embedded for, its entities).
        exact_max_entities: the largest entity count for which similarities are computed exactly.
    """

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
        if not ids:
            return ids, np.zeros((0, 1), dtype=np.float32)
        return ids, np.vstack([self._vectors[e] for e in ids])

    def _nearest_entities(self, graph: KnowledgeGraph, ids: list[str]) -> list[list[tuple[str, float]]]:
        """Each entity's nearest entities as (id, cosine), from Chroma's HNSW index of the entity collection.

        A first query asks for 16 neighbours; an entity whose 16th is still above the threshold is asked again for
        ``synonymy_top_k`` + 1 (itself included), so most entities cost one small query.
        """
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
