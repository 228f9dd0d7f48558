"""A graph version's walk and dense searches, and the settings that choose their paths by size.

Below every size of :class:`WalkSettings` a query takes the exact path (:mod:`.exact`). Past them: the dense
share solved once and a push from the seeds (:mod:`.affine`, :mod:`.push`); products estimated from an int8 copy
first (:mod:`.int8_rows`); a collection searched through Chroma's HNSW index, its ``hnsw_top_n`` nearest exact,
every other record at the exact mean of the rest, the least similar the nearest to ``-q``. Sharing that mean
lost 6.3 points of recall@21 at 1M passages (docs/SCALING.md), hence the high passage threshold.
"""

from __future__ import annotations

import bisect
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from .affine import AffineResetPageRank
from .basis_files import solved_walk
from .exact import DenseScores, PageRankGraph, SparseVector, all_products, best_first
from .int8_rows import ExactRows, lowest_candidates, row_products, top_candidates

__all__ = ["DenseVectors", "GraphWalk", "Ranking", "VectorSum", "WalkMode", "WalkSettings"]

logger = logging.getLogger(__name__)

WalkMode = Literal["auto", "exact"]
_MODES = ("auto", "exact")


@dataclass
class WalkSettings:
    """Which paths an index's walk and searches take: ``walk="exact"`` always the exact one; ``"auto"`` the
    large-graph tier from ``push_min_nodes`` nodes, ``int8_min_rows`` rows, ``hnsw_min_facts`` facts and
    ``hnsw_min_passages`` passages (the module docstring), each path logged once at INFO for the index ``name``.
    ``hnsw_top_n`` records of an HNSW search are exact.

    Raises:
        ValueError: an unknown ``walk``, or a size below 0.
    """

    walk: WalkMode = "auto"
    push_min_nodes: int = 50_000
    int8_min_rows: int = 50_000
    hnsw_min_facts: int = 500_000
    hnsw_min_passages: int = 4_000_000
    hnsw_top_n: int = 256
    name: str = ""
    _logged: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.walk not in _MODES:
            raise ValueError(f"walk must be one of {_MODES}, got {self.walk!r}")
        sizes = (self.push_min_nodes, self.int8_min_rows, self.hnsw_min_facts, self.hnsw_min_passages, self.hnsw_top_n)
        if min(sizes) < 0:
            raise ValueError(f"walk sizes must be >= 0, got {sizes}")

    def minimum(self, size: str) -> int:
        """The value of the threshold field ``size``: none is ever reached on the exact walk."""
        return sys.maxsize if self.walk == "exact" else getattr(self, size)

    def log_paths(self, passages: DenseVectors, facts: DenseVectors, walk: GraphWalk) -> None:
        """Log, once per path, which large-graph paths a loaded version takes."""
        basis = None if walk.affine is None else walk.affine.basis_products
        taken = {"push walk": walk.affine is not None, "HNSW passage search": passages.method == "hnsw",
                 "HNSW fact search": facts.method == "hnsw",
                 "int8 row products": any(p is not None and p.method == "int8"
                                          for p in (passages.products, facts.products, basis))}
        for path in [p for p, on in taken.items() if on and p not in self._logged]:
            self._logged.add(path)
            logger.info("index %r: the %s is on (walk settings %s)", self.name, path, self)


@dataclass(frozen=True)
class Ranking:
    """The walk of one query's reset: the best ``passages`` (node numbers, best first, ties by node) and their
    ``scores``; the ``top_entities`` as ``(node, score)`` (on the push path the seeds' walk alone); the reset's
    largest entries ``reset_top`` as ``(node, weight)``, zeros left out."""

    passages: np.ndarray
    scores: np.ndarray
    top_entities: list[tuple[int, float]]
    reset_top: list[tuple[int, float]]


class GraphWalk:
    """The PageRank walk of one graph version: its matrix (first ``num_passages`` nodes the passages) and, on the
    push path, its solved dense share ``affine`` (None: every reset is walked whole by power iteration)."""

    def __init__(self, pagerank: PageRankGraph, num_passages: int, affine: AffineResetPageRank | None = None) -> None:
        self.pagerank = pagerank
        self.num_passages = num_passages
        self.affine = affine

    @classmethod
    def load(cls, pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None,
             settings: WalkSettings, basis_folder: Path | None = None, codes_folder: Path | None = None) -> GraphWalk:
        """The walk of a graph by ``settings``: from ``push_min_nodes`` nodes with its dense share solved (read
        from ``basis_folder`` when saved there, else solved and saved there), the int8 copy of that basis shared
        through ``codes_folder``; ``passage_vectors`` None when the passages are searched through HNSW."""
        if pagerank.n_nodes < settings.minimum("push_min_nodes"):
            return cls(pagerank.walking("exact"), num_passages)
        pagerank = pagerank.walking("push")
        return cls(pagerank, num_passages, solved_walk(
            pagerank, num_passages, passage_vectors, basis_folder,
            row_products=partial(row_products, int8_min_rows=settings.minimum("int8_min_rows"),
                                 codes_folder=codes_folder, codes_kind="basis-int8")))

    @property
    def damping(self) -> float:
        return self.pagerank.damping

    @property
    def num_nodes(self) -> int:
        return self.pagerank.n_nodes

    @property
    def needs_every_passage_score(self) -> bool:
        """Whether :meth:`rank` reads every passage's similarity, or only the best passages' and the extremes."""
        return self.affine is None

    def rank(self, seeds: SparseVector, dense: DenseScores, query: np.ndarray, passage_weight: float, top_k: int,
             trace_top: int) -> Ranking:
        """The best ``top_k`` passages by the PageRank of the reset ``seeds`` (a few non-negative node weights) +
        ``passage_weight`` times each passage's normalised similarity (``dense``: every score when
        :attr:`needs_every_passage_score`, at least ``trace_top`` in its top), and the ``trace_top`` largest entity
        scores and reset entries; ``query`` is the normalised query embedding."""
        passages = self.num_passages
        k = min(top_k, passages)
        if self.affine is None:
            scores = self.pagerank.run(self.reset(seeds, dense, passage_weight))
            passage_scores, entity_scores, exact = scores[:passages], SparseVector.from_dense(scores[passages:]), None
        else:
            walked = self.affine.rank(seeds, dense, query, passage_weight, top_k)
            passage_scores, entity_scores, exact = walked.passages, walked.seed_entities, walked.exact_rows
        # Only the exact passages can be among the best (an estimated one is bounded below them).
        order = best_first(passage_scores, k) if exact is None else exact[best_first(passage_scores[exact], k)]
        top_entities = [(passages + int(entity_scores.nodes[i]), float(entity_scores.values[i]))
                        for i in best_first(entity_scores.values, trace_top).tolist()]
        return Ranking(order, passage_scores[order], top_entities,
                       self.reset_top(seeds, dense, passage_weight, trace_top))

    def reset(self, seeds: SparseVector, dense: DenseScores, passage_weight: float) -> np.ndarray:
        """The whole reset: the seeds, and every passage's normalised similarity times ``passage_weight``."""
        if dense.scores is None:
            raise ValueError("the whole reset needs every passage's similarity (search with every=True)")
        passages = self.num_passages
        reset = seeds.to_dense(self.num_nodes)
        reset[:passages] += dense.normalised(dense.scores) * passage_weight
        if not reset.sum() > 0:  # every passage equally distant from the query: start everywhere
            reset[:passages] = 1.0
        return reset

    def reset_top(self, seeds: SparseVector, dense: DenseScores, passage_weight: float,
                  count: int) -> list[tuple[int, float]]:
        """The ``count`` largest entries of :meth:`reset` as (node, weight), best first: only the seeds and the
        most similar passages (``dense.top``, at least ``count`` of them) can be."""
        nodes = np.union1d(seeds.nodes, dense.top)
        values = np.zeros(nodes.shape[0])
        values[np.searchsorted(nodes, seeds.nodes)] = seeds.values
        values[np.searchsorted(nodes, dense.top)] += dense.normalised(dense.top_scores) * passage_weight
        return [(int(nodes[i]), float(values[i])) for i in best_first(values, count).tolist() if values[i] > 0]


@dataclass(frozen=True)
class VectorSum:
    """The sum of a collection's normalised vectors (float64): all an HNSW search needs of them besides the
    collection's index, so a state past the threshold never holds the rows themselves."""

    total: np.ndarray


class DenseVectors:
    """The normalised vectors of one collection's records for one graph version, searched exactly or by HNSW.

    Args:
        ids: the records' ids, sorted, in the order of the scores returned.
        vectors: their normalised rows; or their :class:`VectorSum`, searched by HNSW whatever their number.
        collections: the Chroma collections holding them (records not in ``ids`` are skipped).
        hnsw_min_records: from this many records, search the collections' HNSW index.
        top_n: records an HNSW search returns exactly.
        int8_min_records: from this many records, a search for the top alone estimates from an int8 copy first,
            shared through ``codes_folder`` as ``<codes_kind>-<hash>.npy`` (None: held in the heap).
    """

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
