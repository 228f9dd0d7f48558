"""``HippoGraphRetriever``: HippoRAG 2's query flow over a :class:`~llama_index_mhop.graph.index.HippoGraphIndex`.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", seeds 003/004), one query:

1. The query embedding scores every fact (min-max normalised); the ``linking_top_k`` best facts are candidates.
2. Recognition memory (:class:`~llama_index_mhop.postprocessors.DSPyFactFilter`) keeps at most ``fact_top_n``.
   When it keeps none (and the query names no entity of the graph), the answer is dense passage retrieval.
3. The reset vector of Personalized PageRank: each kept fact adds its score, divided by the number of passages
   that contain the entity, to its subject and object entities (averaged over the facts naming the entity), and
   only the ``linking_top_k`` best entities keep their weight; every passage node adds its min-max normalised
   dense score times ``passage_node_weight``.
4. PageRank with ``damping`` over the entity/passage graph; passages are ranked by their PageRank probability.
   On a graph large enough to answer by push, the walk runs from the seeds alone and the dense share comes from
   its PageRank solved once per graph version (:mod:`~llama_index_mhop.graph.affine_ppr`): the same vector,
   without a sweep of the whole graph per query.

Two additions, both general, both settings of :class:`~llama_index_mhop.retrievers.hippo_config.HippoGraphConfig`
(0 turns either off):

* ``query_entity_weight`` (default 1): entities the query names (its word n-grams matched against entity keys,
  longest first) join the reset with that weight divided by their passage count, after the ``linking_top_k``
  cut. A question names its first-hop entities; an LM filter would keep facts about them, but the LLM-free
  mention rule over five embedded facts often misses them.
* ``dense_seed_top_k`` / ``dense_seed_weight`` (default off): the best dense passages get an extra reset weight
  in proportion to their normalised dense score.

Measured LLM-free on HotpotQA-100 (994 passages, all-MiniLM-L6-v2), together with the graph's
``title_edge_weight=10``: recall@2/5/10/21 = 66.5/92.5/97.0/98.5, all_gold@21 = 97. HippoRAG 2's flow alone (no
query entities, title edges of weight 1): 58/86/95.5/98, all_gold@21 97; query entities alone: 61/89/97/98.5;
title edges alone: 60.5/88/96.5/98; plain dense retrieval: 62.5/78.5/85/89, all_gold@21 79. The dense seeds
changed recall@2 by +1 and recall@10 by -0.5, so they stay off.

Everything a query needs (fact and passage embeddings, the CSR transition matrix) is loaded once per graph
version by :meth:`HippoGraphIndex.retrieval_state`, never per query. Step 1 needs only the best facts and the
extremes of their similarities, as does step 3 once the walk has its dense share solved: from 50,000 rows
those come from an int8 estimate of every product, multiplied exactly where the estimate's bound leaves a doubt
(:mod:`~llama_index_mhop.graph.row_products`), so the results are those of the float32 products. Past 500,000
facts (passages), step 1 (step 3) reads the nearest facts (passages) from Chroma's HNSW index instead
(:mod:`~llama_index_mhop.graph.dense_search`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

import numpy as np
from llama_index.core.prompts.mixin import PromptMixin
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..graph.dense_search import DenseScores
from ..graph.extraction import entity_key
from ..graph.retrieval_source import RetrievalSource
from ..graph.row_products import best_first
from ..graph.sparse_vector import SparseVector
from ..graph.state import RetrievalState
from ..postprocessors import STEP as FACT_FILTER_STEP
from ..postprocessors import DSPyFactFilter, fact_node
from ..programs import ProgramSource
from ..text import NON_ENTITY_CAPS, STOPWORDS
from ..vector_index import EmbeddingDimensionError, embedder_name
from .base import ProgramRetriever
from .hippo_config import HippoGraphConfig
from .hippo_program import HippoGraphModule, HippoSteps

__all__ = ["HippoGraphConfig", "HippoGraphModule", "HippoGraphRetriever"]

logger = logging.getLogger(__name__)

_TRACE_TOP = 10
_MAX_NGRAM = 8
_QUERY_WORD = re.compile(r"[\w][\w'’.\-&]*")


def _min_max(scores: np.ndarray, low: float, high: float) -> np.ndarray:
    """``scores`` scaled to [0, 1] by the extremes of all scores, ``low`` and ``high``; all ones if they agree."""
    if scores.size == 0:
        return scores
    if high - low <= 0:
        return np.ones_like(scores)
    return (scores - low) / (high - low)


class HippoGraphRetriever(ProgramRetriever):
    """HippoRAG 2 retrieval: facts, recognition memory, Personalized PageRank over the knowledge graph.

    Args:
        index: the :class:`~llama_index_mhop.graph.index.HippoGraphIndex` to search (any
            :class:`~llama_index_mhop.graph.retrieval_source.RetrievalSource`).
        fact_filter: the recognition-memory postprocessor (any node postprocessor); default
            ``DSPyFactFilter(top_n=fact_top_n)`` with the LM, starting from the index's ``fact_filter_program``.
        program: a compiled :class:`HippoGraphModule` (or the fact filter's program: the JSON files are alike), or
            the path of one saved by :meth:`save_program`.
        **kwargs: ``config`` or its settings one by one (:class:`HippoGraphConfig`: ``similarity_top_k=5``,
            ``linking_top_k=5``, ``fact_top_n=4``, ``passage_node_weight=0.05``, ``damping=0.5``,
            ``query_entity_weight=1``, ``dense_seed_top_k=0``, ``dense_seed_weight=0``); ``lm`` or ``llm`` for
            the fact filter (neither: the LLM-free rule), ``callback_manager`` and ``verbose`` (log each query's
            trace), as for every :class:`~llama_index_mhop.retrievers.base.ProgramRetriever`.

    Attributes:
        last_trace: a JSON-serialisable dict of the last query: kept facts, the reset vector's top entries and the
            top entities of the walk (for ``mhop query --explain``).
    """

    config_type = HippoGraphConfig
    config: HippoGraphConfig
    #: Every keyword argument besides ``index`` (``HippoGraphIndex.as_query_engine`` routes them here).
    ARGUMENTS = frozenset(HippoGraphConfig.model_fields) | {
        "config", "fact_filter", "lm", "llm", "program", "callback_manager", "verbose"
    }

    def __init__(
        self, index: RetrievalSource, *, fact_filter: Any = None, program: ProgramSource | None = None, **kwargs: Any
    ) -> None:
        if program is not None and fact_filter is not None and not isinstance(fact_filter, DSPyFactFilter):
            raise ValueError("program= is the fact filter's: it needs a DSPyFactFilter as fact_filter")
        self.index = index
        self.fact_filter = fact_filter
        super().__init__(program=program, **kwargs)

    @classmethod
    def from_defaults(cls, index: RetrievalSource, **kwargs: Any) -> HippoGraphRetriever:
        """The retriever with HippoRAG 2's defaults (override any argument by keyword)."""
        return cls(index=index, **kwargs)

    def _build_program(self) -> HippoGraphModule:
        if self.fact_filter is None:
            self.fact_filter = DSPyFactFilter(top_n=self.config.fact_top_n, lm=self.lm,
                                              program=self.index.fact_filter_program)
        return HippoGraphModule(HippoSteps(self.index, self.config.damping, self.fact_filter, self._query_vector,
                                           self._candidates, self._rank))

    def _step_predictors(self) -> dict[str, Any]:
        predictor = self.program.filter
        return {} if predictor is None else {FACT_FILTER_STEP: predictor}

    def _get_prompt_modules(self) -> dict[str, Any]:
        """A custom fact filter's own prompts (``fact_filter:<key>``); a DSPyFactFilter's step is this one's."""
        custom = self.program.filter is None and isinstance(self.fact_filter, PromptMixin)
        return {FACT_FILTER_STEP: self.fact_filter} if custom else {}

    @property
    def fallback_counts(self) -> Any:
        """LM fallbacks of the fact filter."""
        return self.fact_filter.fallback_counts

    # ------------------------------------------------------------------ steps shared by sync and async

    def _candidates(
        self, state: RetrievalState, query_vector: np.ndarray
    ) -> tuple[DenseScores, list[NodeWithScore], dict[str, int]]:
        """Dense passage scores and the top facts as fact nodes (score: min-max normalised similarity)."""
        # The reset needs every passage's similarity unless the walk has the dense share solved: then the best
        # passages and the extremes are all a query reads.
        dense = state.passage_vectors.search(
            query_vector, max(self.config.similarity_top_k, self.config.dense_seed_top_k, _TRACE_TOP),
            every=state.affine is None,
        )
        facts = state.fact_vectors.search(query_vector, self.config.linking_top_k, every=False)
        fact_scores = _min_max(facts.top_scores, facts.low, facts.high)
        nodes, by_id = [], {}
        for i, score in zip(facts.top.tolist(), fact_scores.tolist(), strict=True):
            s, p, o = state.fact_triples[i]
            node = fact_node(s, p, o, score=score)
            by_id[node.node.node_id] = i
            nodes.append(node)
        return dense, nodes, by_id

    def _seeds(
        self, state: RetrievalState, query_entities: list[int], kept: list[NodeWithScore], by_id: dict[str, int]
    ) -> SparseVector:
        """The reset's entity part: kept facts' entities (the ``linking_top_k`` best) and the query's entities."""
        sums: dict[int, float] = {}
        occurrences: dict[int, int] = {}
        counts = state.passage_counts
        for node in kept:
            i = by_id.get(node.node.node_id)
            if i is None:
                continue
            score = float(node.score or 0.0)
            for j in state.fact_nodes[i].tolist():
                # A fact's entity found in many passages says less about which passage is meant.
                sums[j] = sums.get(j, 0.0) + (score / counts[j] if counts[j] > 0 else score)
                occurrences[j] = occurrences.get(j, 0) + 1
        weights = {j: total / occurrences[j] for j, total in sums.items() if total != 0}
        if len(weights) > self.config.linking_top_k:
            # HippoRAG 2 keeps only the linking_top_k best fact entities in the reset (equal ones by node).
            best = sorted(weights, key=lambda j: (-weights[j], j))[: self.config.linking_top_k]
            weights = {j: weights[j] for j in best}
        if self.config.query_entity_weight > 0:
            # Entities the query names are not cut by linking_top_k: the user asked about them.
            for j in query_entities:
                weight = self.config.query_entity_weight
                weights[j] = weights.get(j, 0.0) + (weight / counts[j] if counts[j] > 0 else weight)
        return SparseVector.from_mapping(weights)

    def _reset(self, state: RetrievalState, seeds: SparseVector, dense: DenseScores) -> np.ndarray:
        """The whole reset: the seeds (dense seeds included), and every passage's min-max normalised dense score
        times ``passage_node_weight``."""
        passages = len(state.passage_ids)
        normalised = _min_max(dense.scores, dense.low, dense.high)
        reset = seeds.to_dense(state.num_nodes)
        reset[:passages] += normalised * self.config.passage_node_weight
        if not reset.sum() > 0:  # every passage equally distant from the query: start everywhere
            reset[:passages] = 1.0
        return reset

    def _add_dense_seeds(self, seeds: SparseVector, dense: DenseScores) -> SparseVector:
        """The seeds with the optional dense seeds: the best passages' normalised similarity times
        ``dense_seed_weight``."""
        if self.config.dense_seed_top_k > 0 and self.config.dense_seed_weight > 0:
            k = self.config.dense_seed_top_k
            return seeds.plus(dense.top[:k],
                              self.config.dense_seed_weight * _min_max(dense.top_scores[:k], dense.low, dense.high))
        return seeds

    def _walk_affine(
        self, state: RetrievalState, seeds: SparseVector, dense: DenseScores, query_vector: np.ndarray
    ) -> tuple[np.ndarray, SparseVector, np.ndarray | None]:
        """PageRank of the same reset as :meth:`_reset` through the state's solved dense share
        (:mod:`~llama_index_mhop.graph.affine_ppr`): the passages' and the seed walk's entity scores, and the
        passages computed exactly (they hold the best ``similarity_top_k``; None: all of them)."""
        affine = state.affine
        assert affine is not None
        weight = self.config.passage_node_weight
        high, low = dense.high, dense.low
        # normalised = (s - low) / (high - low) = scale * s + uniform; all ones when every score is the same
        scale = weight / (high - low) if high - low > 0 else 0.0
        uniform = -scale * low if scale > 0 else weight
        query: np.ndarray | None = query_vector
        if dense.near is not None:
            # HNSW search: the far passages share one similarity, the near ones differ from it by a few seeds.
            seeds = seeds.plus(dense.near, np.maximum(scale * (dense.scores[dense.near] - dense.rest), 0.0))
            uniform += scale * dense.rest
            scale, query = 0.0, None
        if not seeds.total() > 0 and not (scale > 0 or uniform > 0):
            uniform = 1.0  # every passage equally distant from the query: start everywhere
        walked = affine.run(seeds, uniform, scale, query, top_k=self.config.similarity_top_k)
        return walked.passages, walked.seed_entities, walked.exact_rows

    @staticmethod
    def _query_entities(state: RetrievalState, query: str) -> list[int]:
        """Entity nodes the query names: its word n-grams matched against entity keys, longest first.

        An n-gram counts when it holds a capitalised content word or a number ("In Love and War", "Heinkel HD 23",
        "1998"), so "Love" and "War" do not match once "In Love and War" has, and "The soundtrack" never does.
        """
        words = [(m.group(0), m.start(), m.end()) for m in _QUERY_WORD.finditer(query)]
        taken = [False] * len(words)
        found: list[int] = []
        for length in range(min(_MAX_NGRAM, len(words)), 0, -1):
            for start in range(len(words) - length + 1):
                if any(taken[start : start + length]):
                    continue
                span = words[start : start + length]
                # A name needs a capitalised content word or a number: "The" alone does not make
                # "The soundtrack" a name.
                if not any(
                    (w[0][:1].isupper() and w[0] not in NON_ENTITY_CAPS and w[0].lower() not in STOPWORDS)
                    or w[0][:1].isdigit()
                    for w in span
                ):
                    continue
                node = state.entity_key_node.get(entity_key(query[span[0][1] : span[-1][2]]))
                if node is None:
                    continue
                for i in range(start, start + length):
                    taken[i] = True
                if node not in found:
                    found.append(node)
        return found

    def _rank(
        self, state: RetrievalState, query: str, query_vector: np.ndarray, dense: DenseScores,
        candidates: list[NodeWithScore], kept: list[NodeWithScore], by_id: dict[str, int], started: float,
    ) -> tuple[list[NodeWithScore], dict[str, Any]]:
        k = min(self.config.similarity_top_k, len(state.passage_ids))
        query_entities = self._query_entities(state, query) if self.config.query_entity_weight > 0 else []
        trace: dict[str, Any] = {
            "query": query,
            "candidate_facts": [self._fact_json(n) for n in candidates],
            "kept_facts": [self._fact_json(n) for n in kept],
            "query_entities": [state.entity_names[j - len(state.passage_ids)] for j in query_entities],
        }
        if not kept and not query_entities:
            # HippoRAG 2: no fact survives recognition, so rank by dense retrieval alone.
            trace.update(mode="dense", reset_top=[], top_entities=[])
            results = [NodeWithScore(node=state.passage_nodes[i], score=float(score))
                       for i, score in zip(dense.top[:k].tolist(), dense.top_scores[:k].tolist(), strict=True)]
        else:
            seeds = self._add_dense_seeds(self._seeds(state, query_entities, kept, by_id), dense)
            passages = len(state.passage_ids)
            if state.affine is None:
                scores = state.pagerank.run(self._reset(state, seeds, dense))
                passage_scores, entity_scores, exact = \
                    scores[:passages], SparseVector.from_dense(scores[passages:]), None
            else:
                passage_scores, entity_scores, exact = self._walk_affine(state, seeds, dense, query_vector)
            # Only the exact passages can be among the best (an estimated one is bounded below them).
            order = best_first(passage_scores, k) if exact is None else exact[best_first(passage_scores[exact], k)]
            results = [NodeWithScore(node=state.passage_nodes[i], score=float(passage_scores[i]))
                       for i in order.tolist()]
            trace.update(
                mode="ppr",
                reset_top=[self._node_json(state, j, value) for j, value in self._reset_top(seeds, dense)],
                # With the solved dense share, the entities' scores are those of the seeds' walk alone.
                top_entities=[
                    self._node_json(state, passages + int(entity_scores.nodes[i]), entity_scores.values[i])
                    for i in best_first(entity_scores.values, _TRACE_TOP).tolist()
                ],
            )
        trace["results"] = [
            {"id": r.node.node_id, "title": str(r.node.metadata.get("title", "")), "score": float(r.score or 0.0)}
            for r in results
        ]
        trace["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if self._verbose:
            logger.info("HippoGraphRetriever trace: %s", trace)
        return results, trace

    def _reset_top(self, seeds: SparseVector, dense: DenseScores) -> list[tuple[int, float]]:
        """The largest entries of the reset (:meth:`_reset`) as (node, weight), best first. A passage's dense share
        grows with its similarity, so the seeds and the most similar passages (every dense seed among them) are
        the only candidates."""
        nodes = np.union1d(seeds.nodes, dense.top)
        values = np.zeros(nodes.shape[0])
        values[np.searchsorted(nodes, seeds.nodes)] = seeds.values
        share = _min_max(dense.top_scores, dense.low, dense.high) * self.config.passage_node_weight
        values[np.searchsorted(nodes, dense.top)] += share
        return [(int(nodes[i]), float(values[i])) for i in best_first(values, _TRACE_TOP).tolist() if values[i] > 0]

    @staticmethod
    def _fact_json(node: NodeWithScore) -> dict[str, Any]:
        meta = node.node.metadata
        return {"subject": meta["subject"], "predicate": meta["predicate"], "object": meta["object"],
                "score": None if node.score is None else float(node.score)}

    @staticmethod
    def _node_json(state: RetrievalState, j: int, value: float) -> dict[str, Any]:
        passages = len(state.passage_ids)
        if j < passages:
            return {"kind": "passage", "id": state.passage_ids[j],
                    "title": str(state.passage_nodes[j].metadata.get("title", "")), "weight": float(value)}
        return {"kind": "entity", "id": state.entity_ids[j - passages], "name": state.entity_names[j - passages],
                "weight": float(value)}

    # ------------------------------------------------------------------ LlamaIndex entry points

    def _query_vector(self, state: RetrievalState, vector: list[float]) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32)
        stored = state.passage_vectors.dimension
        if stored and q.shape != (stored,):
            raise EmbeddingDimensionError(
                f"the index {self.index.name!r} holds {stored}-dimensional passage vectors but the embedder "
                f"{embedder_name(self.index.embed_model)} gives {q.size}; "
                "use the embedder the index was built with (--embed-model)"
            )
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        # A vector index the graph reads in place can change under it (another verb, another process): a
        # passage gone by the time the query ends is never served; the query runs once more on the graph without
        # it, and what a sync racing even that one removed is left out.
        results = super()._retrieve(query_bundle)
        held = self.index.still_held(results)
        if len(held) < len(results):
            results = super()._retrieve(query_bundle)
            held = self.index.still_held(results)
        return held

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        results = await super()._aretrieve(query_bundle)
        held = await asyncio.to_thread(self.index.still_held, results)
        if len(held) < len(results):
            results = await super()._aretrieve(query_bundle)
            held = await asyncio.to_thread(self.index.still_held, results)
        return held
