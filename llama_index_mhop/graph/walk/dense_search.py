"""A query's dense similarities to every passage or fact: exact products at small sizes, Chroma's HNSW index past
a size (:data:`HNSW_MIN_FACTS`, :data:`HNSW_MIN_PASSAGES`).

A query that needs only the best records and the lowest similarity (the facts always; the passages when the walk
has its dense share solved, :mod:`.affine_ppr`) asks for them alone, and from
:data:`~.int8_rows.INT8_MIN_ROWS` records they come from an int8 estimate with bounds, multiplied exactly where
it decides (:mod:`.row_products`): the same records and similarities, from a quarter of the bytes.

HippoRAG 2 scores the query against every fact (to pick the candidate facts) and every passage (each passage
node's reset weight is its min-max normalised similarity). Done exactly, that is a product over all vectors per
query, which past a size costs more than everything else a query does. Past the threshold only the ``top_n``
nearest records come from the collection's HNSW index, with their similarity; every other record is given the
**mean** similarity of the rest, which is exact (the query times the sum of the vectors, minus the top records'
share). The normalised weights of the rest therefore keep their exact total, so the balance between the reset's
dense part and its entity seeds is unchanged; only how that mass is spread over the far passages is lost. The
minimum of the min-max normalisation comes from the same HNSW index: the record nearest to the negated query is
the one least similar to the query. Below the threshold the scores are the exact products, so small indexes (and
every ranking the tests fix) are unchanged.

The thresholds are high because the approximation costs recall (docs/SCALING.md measures it): facts stay exact up
to :data:`HNSW_MIN_FACTS` (only their best few are ever read, and the nearest 256 hold them: no recall lost at
100k or 1M); passages, whose dense share HippoRAG 2's reset spreads over every passage node, stay exact up to
:data:`HNSW_MIN_PASSAGES`. Sharing one value among the far passages lost 6.3 points of recall@21 at 1M, and the
exact path there (int8 products and the walk's solved basis, every array a file the index's processes share) ranks
with exact search's recall. The threshold is where those shared files (3.8 KB a passage: float32 and int8 copies
of the passages and of the basis) would fill a 24 GB machine's page cache beside Chroma.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .int8_rows import INT8_MIN_ROWS, row_products
from .row_products import RowProducts, all_products, best_first, lowest_candidates, top_candidates

__all__ = ["HNSW_MIN_FACTS", "HNSW_MIN_PASSAGES", "HNSW_TOP_N", "DenseScores", "DenseVectors", "VectorSum"]

HNSW_MIN_FACTS = 500_000  # from this many facts the fact collection is searched through its HNSW index
HNSW_MIN_PASSAGES = 4_000_000  # the same for passages, whose approximation costs recall (module docstring)
HNSW_TOP_N = 256  # records whose similarity the HNSW search returns exactly


@dataclass(frozen=True)
class DenseScores:
    """One query's similarities.

    Attributes:
        top: the rows of the ``top_k`` most similar records asked for, best first (equal ones by row).
        top_scores: their similarities.
        high: the highest similarity.
        low: the lowest similarity (exact, or the HNSW index's farthest record), the minimum of the min-max
            normalisation.
        scores: one similarity per record (in the state's order); None when only the top and the extremes were
            asked for.
        near: after an HNSW search, the rows scored exactly (every other row of ``scores`` holds ``rest``); None
            after an exact search.
    """

    top: np.ndarray
    top_scores: np.ndarray
    high: float
    low: float
    scores: np.ndarray | None = None
    near: np.ndarray | None = None
    rest: float = 0.0

    def normalised(self, scores: np.ndarray) -> np.ndarray:
        """Similarities of this query (``scores``, any of them) scaled to [0, 1] by its extremes, ``low`` and
        ``high``: HippoRAG 2's min-max normalisation; all ones when the extremes agree."""
        if scores.size == 0:
            return scores
        if self.high - self.low <= 0:
            return np.ones_like(scores)
        return (scores - self.low) / (self.high - self.low)


@dataclass(frozen=True)
class VectorSum:
    """The sum of a collection's normalised vectors (float64): all an HNSW search needs of them besides the
    collection's index, so a state past the threshold never holds or writes the rows themselves."""

    total: np.ndarray


class DenseVectors:
    """The normalised vectors of one collection's records for one graph version, searched exactly or by HNSW.

    Args:
        ids: the records' ids, sorted, in the order of the scores returned (past ``hnsw_min_records`` a record
            found by the HNSW index is looked up among them by binary search).
        vectors: their normalised embeddings (one row each); or only their :class:`VectorSum`, and then the
            collection's HNSW index is searched whatever the number of records.
        collections: the Chroma collections holding them (searched past ``hnsw_min_records``; records of theirs
            not in ``ids`` are skipped).
        hnsw_min_records: from this many records, search the collection's HNSW index instead of all vectors.
        top_n: records whose similarity an HNSW search returns exactly (unless a query asks for another number).
        int8_min_records: from this many records (and below ``hnsw_min_records``), a search for the top alone
            estimates from an int8 copy first.
        codes_folder: where that int8 copy is shared with the other processes of a persisted index (None: held
            in the heap), as ``<codes_kind>-<hash>.npy``.
        codes_kind: the int8 copy's file name prefix.

    Attributes:
        matrix: the vectors, kept for exact search only (None when the HNSW index is searched).
        products: how a search for the top alone multiplies them (None when the HNSW index is searched).
    """

    def __init__(self, ids: Sequence[str], vectors: np.ndarray | VectorSum, collections: list[Any],
                 hnsw_min_records: int, top_n: int = HNSW_TOP_N, int8_min_records: int = INT8_MIN_ROWS,
                 codes_folder: Path | None = None, codes_kind: str = "int8") -> None:
        self.size = len(ids)
        summed = isinstance(vectors, VectorSum)
        #: The vectors' dimension (0 when there are none).
        self.dimension = (len(vectors.total) if summed else int(vectors.shape[1]) if vectors.ndim == 2 else 0
                          ) if self.size else 0
        self.top_n = top_n
        self.method = "hnsw" if summed or self.size >= max(1, hnsw_min_records) else "exact"
        self.matrix: np.ndarray | None = None
        self.products: RowProducts | None = None
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
        (``every``) the similarity of every record; past the HNSW threshold the ``top_n`` nearest are exact and the
        others share the mean of the rest (see the module docstring)."""
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
