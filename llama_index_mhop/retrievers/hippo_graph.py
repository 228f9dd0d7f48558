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

Two additions, both general, both constructor arguments (0 turns either off):

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
version by :meth:`HippoGraphIndex.retrieval_state`, never per query.
"""

from __future__ import annotations

import logging
import re
import time
from typing import TYPE_CHECKING, Any

import numpy as np
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import NodeWithScore, QueryBundle

from ..graph.extraction import entity_key
from ..graph.state import RetrievalState
from ..postprocessors import DEFAULT_FACT_TOP_N, DSPyFactFilter, fact_node
from ..text import NON_ENTITY_CAPS, STOPWORDS
from .base import CheckedQueryRetriever

if TYPE_CHECKING:
    from ..graph.index import HippoGraphIndex

__all__ = [
    "DEFAULT_DAMPING",
    "DEFAULT_DENSE_SEED_TOP_K",
    "DEFAULT_DENSE_SEED_WEIGHT",
    "DEFAULT_HIPPO_TOP_K",
    "DEFAULT_LINKING_TOP_K",
    "DEFAULT_PASSAGE_NODE_WEIGHT",
    "DEFAULT_QUERY_ENTITY_WEIGHT",
    "HippoGraphRetriever",
]

logger = logging.getLogger(__name__)

DEFAULT_HIPPO_TOP_K = 5
DEFAULT_LINKING_TOP_K = 5  # HippoRAG 2's linking_top_k
DEFAULT_PASSAGE_NODE_WEIGHT = 0.05  # HippoRAG 2's passage_node_weight
DEFAULT_DAMPING = 0.5  # HippoRAG 2's damping
DEFAULT_QUERY_ENTITY_WEIGHT = 1.0
DEFAULT_DENSE_SEED_TOP_K = 0
DEFAULT_DENSE_SEED_WEIGHT = 0.0
_TRACE_TOP = 10
_MAX_NGRAM = 8
_QUERY_WORD = re.compile(r"[\w][\w'’.\-&]*")


def _min_max(scores: np.ndarray) -> np.ndarray:
    if scores.size == 0:
        return scores
    low, high = float(scores.min()), float(scores.max())
    if high - low <= 0:
        return np.ones_like(scores)
    return (scores - low) / (high - low)


class HippoGraphRetriever(CheckedQueryRetriever):
    """HippoRAG 2 retrieval: facts, recognition memory, Personalized PageRank over the knowledge graph.

    Args:
        index: the :class:`~llama_index_mhop.graph.index.HippoGraphIndex` to search.
        similarity_top_k: passages returned.
        linking_top_k: candidate facts sent to the filter, and entities kept in the reset vector (HippoRAG 2: 5).
        fact_top_n: most facts the filter keeps (HippoRAG 2: 4).
        passage_node_weight: weight of the dense passage scores in the reset vector (HippoRAG 2: 0.05).
        damping: probability that the walk follows an edge (HippoRAG 2: 0.5).
        query_entity_weight: reset weight of entities the query names (0 turns it off).
        dense_seed_top_k: how many best dense passages get an extra reset weight (0 turns it off).
        dense_seed_weight: that extra weight, times the passage's normalised dense score.
        fact_filter: the recognition-memory postprocessor; default ``DSPyFactFilter(top_n=fact_top_n, lm, llm)``.
        lm: a DSPy LM for the fact filter. llm: a LlamaIndex LLM for it (neither: the LLM-free rule).
        callback_manager: LlamaIndex callbacks. verbose: log each query's trace.

    Attributes:
        last_trace: a JSON-serialisable dict of the last query: kept facts, the reset vector's top entries and the
            top entities of the walk (for ``mhop query --explain``).
    """

    ARGUMENTS = frozenset(
        {
            "similarity_top_k", "linking_top_k", "fact_top_n", "passage_node_weight", "damping",
            "query_entity_weight", "dense_seed_top_k", "dense_seed_weight", "fact_filter", "lm", "llm",
            "callback_manager", "verbose",
        }
    )

    def __init__(
        self,
        index: HippoGraphIndex,
        similarity_top_k: int = DEFAULT_HIPPO_TOP_K,
        linking_top_k: int = DEFAULT_LINKING_TOP_K,
        fact_top_n: int = DEFAULT_FACT_TOP_N,
        passage_node_weight: float = DEFAULT_PASSAGE_NODE_WEIGHT,
        damping: float = DEFAULT_DAMPING,
        query_entity_weight: float = DEFAULT_QUERY_ENTITY_WEIGHT,
        dense_seed_top_k: int = DEFAULT_DENSE_SEED_TOP_K,
        dense_seed_weight: float = DEFAULT_DENSE_SEED_WEIGHT,
        fact_filter: DSPyFactFilter | None = None,
        lm: Any = None,
        llm: Any = None,
        callback_manager: CallbackManager | None = None,
        verbose: bool = False,
    ) -> None:
        for label, value in (("similarity_top_k", similarity_top_k), ("linking_top_k", linking_top_k),
                             ("fact_top_n", fact_top_n)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{label} must be an integer >= 1, got {value!r}")
        if isinstance(dense_seed_top_k, bool) or not isinstance(dense_seed_top_k, int) or dense_seed_top_k < 0:
            raise ValueError(f"dense_seed_top_k must be an integer >= 0, got {dense_seed_top_k!r}")
        for label, weight in (("passage_node_weight", passage_node_weight),
                              ("query_entity_weight", query_entity_weight),
                              ("dense_seed_weight", dense_seed_weight)):
            if not np.isfinite(weight) or weight < 0:
                raise ValueError(f"{label} must be a finite number >= 0, got {weight!r}")
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"damping must be in [0, 1), got {damping!r}")
        self._index = index
        self.similarity_top_k = similarity_top_k
        self.linking_top_k = linking_top_k
        self.fact_top_n = fact_top_n
        self.passage_node_weight = float(passage_node_weight)
        self.damping = float(damping)
        self.query_entity_weight = float(query_entity_weight)
        self.dense_seed_top_k = dense_seed_top_k
        self.dense_seed_weight = float(dense_seed_weight)
        self._fact_filter = fact_filter if fact_filter is not None else DSPyFactFilter(top_n=fact_top_n, lm=lm, llm=llm)
        self.last_trace: dict[str, Any] = {}
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    @classmethod
    def from_defaults(cls, index: HippoGraphIndex, **kwargs: Any) -> HippoGraphRetriever:
        """The retriever with HippoRAG 2's defaults (override any constructor argument by keyword)."""
        return cls(index=index, **kwargs)

    @property
    def index(self) -> HippoGraphIndex:
        return self._index

    @property
    def fact_filter(self) -> DSPyFactFilter:
        return self._fact_filter

    @property
    def fallback_counts(self) -> Any:
        """LM fallbacks of the fact filter."""
        return self._fact_filter.fallback_counts

    # ------------------------------------------------------------------ steps shared by sync and async

    def _candidates(
        self, state: RetrievalState, query_vector: np.ndarray
    ) -> tuple[np.ndarray, list[NodeWithScore], dict[str, int]]:
        """Dense passage scores and the top facts as fact nodes (score: min-max normalised similarity)."""
        # einsum, not BLAS: a threaded BLAS call leaves its threads spinning, and on a small machine they slow the
        # next query embedding several times over (measured p50 340 ms against 48 ms on 2 cores).
        dense = np.einsum("ij,j->i", state.passage_matrix, query_vector)
        if state.fact_matrix.shape[0] == 0:
            return dense, [], {}
        fact_scores = _min_max(np.einsum("ij,j->i", state.fact_matrix, query_vector))
        k = min(self.linking_top_k, fact_scores.shape[0])
        top = np.argpartition(-fact_scores, k - 1)[:k]
        top = top[np.lexsort((top, -fact_scores[top]))]
        nodes, by_id = [], {}
        for i in top.tolist():
            s, p, o = state.fact_triples[i]
            node = fact_node(s, p, o, score=float(fact_scores[i]))
            by_id[node.node.node_id] = i
            nodes.append(node)
        return dense, nodes, by_id

    def _reset(
        self, state: RetrievalState, query_entities: list[int], dense: np.ndarray, kept: list[NodeWithScore],
        by_id: dict[str, int],
    ) -> np.ndarray:
        n = state.num_nodes
        entity_weights = np.zeros(n)
        occurrences = np.zeros(n)
        counts = state.passage_counts
        for node in kept:
            i = by_id.get(node.node.node_id)
            if i is None:
                continue
            score = float(node.score or 0.0)
            for j in state.fact_nodes[i]:
                # A fact's entity found in many passages says less about which passage is meant.
                entity_weights[j] += score / counts[j] if counts[j] > 0 else score
                occurrences[j] += 1
        np.divide(entity_weights, occurrences, out=entity_weights, where=occurrences > 0)
        seeded = np.flatnonzero(entity_weights)
        if len(seeded) > self.linking_top_k:
            # HippoRAG 2 keeps only the linking_top_k best fact entities in the reset.
            order = seeded[np.lexsort((seeded, -entity_weights[seeded]))]
            entity_weights[order[self.linking_top_k :]] = 0.0
        if self.query_entity_weight > 0:
            # Entities the query names are not cut by linking_top_k: the user asked about them.
            for j in query_entities:
                weight = self.query_entity_weight
                entity_weights[j] += weight / counts[j] if counts[j] > 0 else weight
        passages = len(state.passage_ids)
        normalised = _min_max(dense)
        reset = entity_weights
        reset[:passages] += normalised * self.passage_node_weight
        if self.dense_seed_top_k > 0 and self.dense_seed_weight > 0:
            k = min(self.dense_seed_top_k, passages)
            best = np.argpartition(-dense, k - 1)[:k]
            reset[best] += self.dense_seed_weight * normalised[best]
        if not reset.sum() > 0:  # every passage equally distant from the query: start everywhere
            reset[:passages] = 1.0
        return reset

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
        self, state: RetrievalState, query: str, dense: np.ndarray, candidates: list[NodeWithScore],
        kept: list[NodeWithScore], by_id: dict[str, int], started: float,
    ) -> list[NodeWithScore]:
        k = min(self.similarity_top_k, len(state.passage_ids))
        query_entities = self._query_entities(state, query) if self.query_entity_weight > 0 else []
        trace: dict[str, Any] = {
            "query": query,
            "candidate_facts": [self._fact_json(n) for n in candidates],
            "kept_facts": [self._fact_json(n) for n in kept],
            "query_entities": [state.entity_names[j - len(state.passage_ids)] for j in query_entities],
        }
        if not kept and not query_entities:
            # HippoRAG 2: no fact survives recognition, so rank by dense retrieval alone.
            order = self._top(dense, k)
            trace.update(mode="dense", reset_top=[], top_entities=[])
            results = [NodeWithScore(node=state.passage_nodes[i], score=float(dense[i])) for i in order]
        else:
            reset = self._reset(state, query_entities, dense, kept, by_id)
            scores = state.pagerank.run(reset)
            passages = len(state.passage_ids)
            order = self._top(scores[:passages], k)
            results = [NodeWithScore(node=state.passage_nodes[i], score=float(scores[i])) for i in order]
            trace.update(
                mode="ppr",
                reset_top=[self._node_json(state, j, reset[j]) for j in self._top(reset, _TRACE_TOP) if reset[j] > 0],
                top_entities=[
                    self._node_json(state, passages + j, scores[passages + j])
                    for j in self._top(scores[passages:], _TRACE_TOP)
                ],
            )
        trace["results"] = [
            {"id": r.node.node_id, "title": str(r.node.metadata.get("title", "")), "score": float(r.score or 0.0)}
            for r in results
        ]
        trace["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
        self.last_trace = trace
        if self._verbose:
            logger.info("HippoGraphRetriever trace: %s", trace)
        return results

    @staticmethod
    def _top(scores: np.ndarray, k: int) -> list[int]:
        k = min(k, scores.shape[0])
        if k <= 0:
            return []
        best = np.argpartition(-scores, k - 1)[:k]
        return best[np.lexsort((best, -scores[best]))].tolist()

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

    def _query_vector(self, vector: list[float]) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        started = time.perf_counter()
        state = self._index.retrieval_state(damping=self.damping)
        if query_bundle.embedding is None:
            query_bundle.embedding = self._index.embed_model.get_query_embedding(query)
        dense, candidates, by_id = self._candidates(state, self._query_vector(query_bundle.embedding))
        kept = (
            self._fact_filter.postprocess_nodes(list(candidates), query_bundle=QueryBundle(query))
            if candidates else []
        )
        return self._rank(state, query, dense, candidates, kept, by_id, started)

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        query = query_bundle.query_str
        started = time.perf_counter()
        state = self._index.retrieval_state(damping=self.damping)
        if query_bundle.embedding is None:
            query_bundle.embedding = await self._index.embed_model.aget_query_embedding(query)
        dense, candidates, by_id = self._candidates(state, self._query_vector(query_bundle.embedding))
        kept = (
            await self._fact_filter.apostprocess_nodes(list(candidates), query_bundle=QueryBundle(query))
            if candidates else []
        )
        return self._rank(state, query, dense, candidates, kept, by_id, started)

