"""One graph version's walk: the Personalized PageRank of a query's reset, and what a trace shows of it.

HippoRAG 2's reset (seeds/003, seeds/004) is a query's seeds (the recognised facts' entities, the entities the
query names: the retriever builds them) plus, on every passage node, its min-max normalised dense similarity to
the query times ``passage_weight``. :meth:`GraphWalk.rank` walks it and returns the best passages, the entities'
top scores and the reset's largest entries. It walks one of two ways, to one result:

* below :data:`~.ppr.PUSH_MIN_NODES` nodes (:attr:`~.ppr.PageRankGraph.method` ``"exact"``) the whole reset is
  built and walked by power iteration (:mod:`.ppr`);
* from there (``"push"``) a walk of the whole reset would sweep the graph at every query, so the dense share's
  PageRank is solved once per graph version (:mod:`.affine_ppr`, read from and written to a persisted index's
  folder by :mod:`.basis_files`), and a query pushes from its seeds alone (:mod:`.push_ppr`); its product with
  the solved basis reads an int8 estimate where :mod:`.row_products` can tell the best passages from it
  (:mod:`.int8_rows`). Past :data:`~.dense_search.HNSW_MIN_PASSAGES` the far passages share one similarity, so
  the near ones' excess over it joins the seeds.

Which passage similarities a query needs follows from the path: every one for the exact walk, the best and the
extremes for the solved one (:attr:`GraphWalk.needs_every_passage_score`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from .affine_ppr import AffineResetPageRank
from .basis_files import solved_walk
from .dense_search import DenseScores
from .int8_rows import INT8_MIN_ROWS, row_products
from .ppr import PageRankGraph
from .row_products import best_first
from .sparse_vector import SparseVector

__all__ = ["GraphWalk", "Ranking"]


@dataclass(frozen=True)
class Ranking:
    """The walk of one query's reset.

    Attributes:
        passages: the best passages (node numbers), best first; equal scores in increasing node order.
        scores: their PageRank probabilities.
        top_entities: the entities' largest scores as ``(node, score)``, best first (on the solved path the
            scores of the seeds' walk alone: the dense share's walk is solved over the passages only).
        reset_top: the reset's largest entries as ``(node, weight)``, best first, zeros left out.
    """

    passages: np.ndarray
    scores: np.ndarray
    top_entities: list[tuple[int, float]]
    reset_top: list[tuple[int, float]]


class GraphWalk:
    """The PageRank walk of one graph version: its matrix and, on a large graph, its solved dense share.

    Args:
        pagerank: the graph's matrix; its first ``num_passages`` nodes are the passages, the others entities.
        num_passages: how many of the first nodes are passages.
        affine: the dense share solved once (:mod:`.affine_ppr`), for a graph whose ``method`` is ``"push"``;
            None walks every reset whole by power iteration.
    """

    def __init__(self, pagerank: PageRankGraph, num_passages: int, affine: AffineResetPageRank | None = None) -> None:
        self.pagerank = pagerank
        self.num_passages = num_passages
        self.affine = affine

    @classmethod
    def load(cls, pagerank: PageRankGraph, num_passages: int, passage_vectors: np.ndarray | None,
             basis_folder: Path | None = None, int8_min_rows: int = INT8_MIN_ROWS,
             codes_folder: Path | None = None) -> GraphWalk:
        """The walk of a graph: on a graph that walks by push, with its dense share solved (read from
        ``basis_folder`` when saved there, else solved and saved there, :mod:`.basis_files`).

        Args:
            pagerank: the graph's matrix, passages first.
            num_passages: how many of the first nodes are passages.
            passage_vectors: the passages' normalised embeddings, one row each; None when the passages are
                searched through Chroma's HNSW index (:mod:`.dense_search`).
            basis_folder: where the solved dense share is kept; None: solved in memory.
            int8_min_rows: from this many passages the solved basis gets an int8 estimate (:mod:`.int8_rows`).
            codes_folder: where that int8 estimate is shared with the index's other processes (None: held in
                the heap).
        """
        if pagerank.method != "push":
            return cls(pagerank, num_passages)
        return cls(pagerank, num_passages, solved_walk(
            pagerank, num_passages, passage_vectors, basis_folder,
            row_products=partial(row_products, int8_min_rows=int8_min_rows, codes_folder=codes_folder,
                                 codes_kind="basis-int8")))

    @property
    def damping(self) -> float:
        return self.pagerank.damping

    @property
    def num_nodes(self) -> int:
        return self.pagerank.n_nodes

    @property
    def needs_every_passage_score(self) -> bool:
        """Whether :meth:`rank` reads every passage's similarity (``DenseScores.scores``), or only the best
        passages' and the extremes."""
        return self.affine is None

    def rank(self, seeds: SparseVector, dense: DenseScores, query: np.ndarray, passage_weight: float, top_k: int,
             trace_top: int) -> Ranking:
        """The best ``top_k`` passages by the PageRank of the reset ``seeds`` + ``passage_weight`` times each
        passage's normalised similarity, and the ``trace_top`` largest entity scores and reset entries.

        Args:
            seeds: the reset's sparse part: non-negative weights at a few nodes (entities, or passages).
            dense: the query's passage similarities, with every score when :attr:`needs_every_passage_score`;
                ``dense.top`` holds at least the best ``trace_top`` passages.
            query: the normalised query embedding.
            passage_weight: the factor of each passage's normalised similarity in the reset.
            top_k: how many passages to return.
            trace_top: how many entities and reset entries to return.
        """
        passages = self.num_passages
        k = min(top_k, passages)
        if self.affine is None:
            scores = self.pagerank.run(self.reset(seeds, dense, passage_weight))
            passage_scores, entity_scores, exact = scores[:passages], SparseVector.from_dense(scores[passages:]), None
        else:
            passage_scores, entity_scores, exact = self._walk_solved(seeds, dense, query, passage_weight, top_k)
        # Only the exact passages can be among the best (an estimated one is bounded below them).
        order = best_first(passage_scores, k) if exact is None else exact[best_first(passage_scores[exact], k)]
        top_entities = [(passages + int(entity_scores.nodes[i]), float(entity_scores.values[i]))
                        for i in best_first(entity_scores.values, trace_top).tolist()]
        return Ranking(order, passage_scores[order], top_entities,
                       self.reset_top(seeds, dense, passage_weight, trace_top))

    def reset(self, seeds: SparseVector, dense: DenseScores, passage_weight: float) -> np.ndarray:
        """The whole reset: the seeds, and every passage's min-max normalised similarity times ``passage_weight``
        (``dense`` with every score)."""
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
        """The ``count`` largest entries of the reset (:meth:`reset`) as (node, weight), best first. A passage's
        dense share grows with its similarity, so the seeds and the most similar passages (``dense.top``, at
        least ``count`` of them) are the only candidates."""
        nodes = np.union1d(seeds.nodes, dense.top)
        values = np.zeros(nodes.shape[0])
        values[np.searchsorted(nodes, seeds.nodes)] = seeds.values
        values[np.searchsorted(nodes, dense.top)] += dense.normalised(dense.top_scores) * passage_weight
        return [(int(nodes[i]), float(values[i])) for i in best_first(values, count).tolist() if values[i] > 0]

    def _walk_solved(self, seeds: SparseVector, dense: DenseScores, query: np.ndarray, passage_weight: float,
                     top_k: int) -> tuple[np.ndarray, SparseVector, np.ndarray | None]:
        """PageRank of the same reset as :meth:`reset` through the solved dense share: the passages' and the seeds'
        walk's entity scores, and the passages computed exactly (they hold the best ``top_k``; None: all)."""
        affine = self.affine
        assert affine is not None
        high, low = dense.high, dense.low
        # normalised = (s - low) / (high - low) = scale * s + uniform; all ones when every score is the same
        scale = passage_weight / (high - low) if high - low > 0 else 0.0
        uniform = -scale * low if scale > 0 else passage_weight
        q: np.ndarray | None = query
        if dense.near is not None:
            # HNSW search: the far passages share one similarity, the near ones differ from it by a few seeds.
            seeds = seeds.plus(dense.near, np.maximum(scale * (dense.scores[dense.near] - dense.rest), 0.0))
            uniform += scale * dense.rest
            scale, q = 0.0, None
        if not seeds.total() > 0 and not (scale > 0 or uniform > 0):
            uniform = 1.0  # every passage equally distant from the query: start everywhere
        walked = affine.run(seeds, uniform, scale, q, top_k=top_k)
        return walked.passages, walked.seed_entities, walked.exact_rows
