"""``HippoGraphRetriever``: HippoRAG 2's query flow over a :class:`~llama_index_mhop.graph.index.HippoGraphIndex`.

HippoRAG 2 (Gutiérrez et al., 2025, seeds 003/004), one query: the query embedding scores every fact (min-max
normalised), the ``linking_top_k`` best are candidates; recognition memory
(:class:`~llama_index_mhop.components.fact_filter.DSPyFactFilter`) keeps at most ``fact_top_n`` (none, and the query
naming no entity of the graph: dense passage retrieval); the reset holds each kept fact's score over its entity's
passage count on its subject and object (the ``linking_top_k`` best entities) plus every passage's normalised dense
score times ``passage_node_weight``; Personalized PageRank with ``damping`` ranks the passages.

:class:`HippoGraphModule` runs these steps over the index's retrieval state; :class:`HippoGraphRetriever` is the
LlamaIndex retriever around it. :class:`HippoGraphConfig` adds the query's entities (``query_entity_weight``), its
evidence chain (``chain_hops``, ``chain_weight``), dense seeds and the first-page order.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from llama_index.core.prompts.mixin import PromptMixin
from llama_index.core.schema import NodeWithScore, QueryBundle, QueryType
from pydantic import BaseModel, ConfigDict, Field

from ..graph.extraction import entity_key
from ..graph.retrieval_source import RetrievalSource
from ..graph.state import RetrievalState
from ..graph.walk.exact import DEFAULT_DAMPING, DenseScores, SparseVector
from ..lm.programs import ProgramSource
from ..lm.steps import FactFilterModule, FallbackCounter
from ..rules.ranking import FIRST_PAGE_SIZE, ChainStep, PassageView, first_page, follow_chain
from ..rules.text import NON_ENTITY_CAPS, STOPWORDS
from ..stores.dimension_check import EmbeddingDimensionError, embedder_name
from ..stores.passage_table import PassageSearch
from .base import Call, Flow, FlowModule, NodesAndTrace, ProgramRetriever, StepRecord, StepRunner, query_text
from .fact_filter import DEFAULT_FACT_TOP_N, DSPyFactFilter, fact_node
from .fact_filter import STEP as FACT_FILTER_STEP

__all__ = ["HippoGraphConfig", "HippoGraphModule", "HippoGraphRetriever"]

logger = logging.getLogger(__name__)

_TRACE_TOP = 10  # entities and reset entries in a trace
_MAX_NGRAM = 8
_ABOUT_CANDIDATES = 3  # passages read to find the one about an entity: its title edges are the heaviest
_QUERY_WORD = re.compile(r"[\w][\w'’.\-&]*")


class HippoGraphConfig(BaseModel):
    """Every setting of :class:`HippoGraphRetriever`.

    A bad value raises pydantic's ``ValidationError`` (a ``ValueError``) naming the field.

    Attributes:
        similarity_top_k: passages returned (5).
        linking_top_k: candidate facts sent to the filter, and entities kept in the reset vector (HippoRAG 2: 5).
        fact_top_n: most facts the filter keeps (HippoRAG 2: 4).
        passage_node_weight: weight of the dense passage scores in the reset vector (HippoRAG 2: 0.05).
        damping: probability that the walk follows an edge (HippoRAG 2: 0.5).
        query_entity_weight: reset weight of entities the query names (1; 0 turns it off).
        chain_hops: most hops of the evidence chain followed from the passages about what the query names, each
            through the sentence stating most of the query's relation to the entity it introduces (3; 0 turns the
            chain off and gives the ranking without it).
        chain_weight: reset weight of the passage a chain step leads to, times the chain's match up to it (in
            (0, 1]); a step without such a passage seeds its entity, divided by its passage count as a query
            entity is (1: a fully matched hop names its passage as surely as the query names its entity).
        dense_seed_top_k: how many best dense passages get an extra reset weight (0 turns it off).
        dense_seed_weight: that extra weight, times the passage's normalised dense score (0).
        first_page: how many of the best passages are put in first-page order (:mod:`~llama_index_mhop.rules.ranking`;
            5, 0 keeps the walk's order).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    similarity_top_k: int = Field(5, ge=1)
    linking_top_k: int = Field(5, ge=1)
    fact_top_n: int = Field(DEFAULT_FACT_TOP_N, ge=1)
    passage_node_weight: float = Field(0.05, ge=0, allow_inf_nan=False, strict=False)
    damping: float = Field(DEFAULT_DAMPING, ge=0, lt=1, allow_inf_nan=False, strict=False)
    query_entity_weight: float = Field(1.0, ge=0, allow_inf_nan=False, strict=False)
    chain_hops: int = Field(3, ge=0)
    chain_weight: float = Field(1.0, ge=0, allow_inf_nan=False, strict=False)
    dense_seed_top_k: int = Field(0, ge=0)
    dense_seed_weight: float = Field(0.0, ge=0, allow_inf_nan=False, strict=False)
    first_page: int = Field(FIRST_PAGE_SIZE, ge=0)


@dataclass(frozen=True)
class GraphParts:
    """What HippoRAG 2's flow reads but does not own: the graph searched and the recognition-memory filter (a
    :class:`~llama_index_mhop.components.fact_filter.DSPyFactFilter`, or any LlamaIndex node postprocessor)."""

    index: RetrievalSource
    fact_filter: Any


class HippoGraphModule(FlowModule):
    """HippoRAG 2's query flow as a DSPy program: its one predictor is the fact filter's (``filter``, the step
    that runs per query), so a compiled program's JSON loads into a :class:`DSPyFactFilter` too.

    ``forward(query)`` (a string, or a ``QueryBundle`` whose ``embedding`` is used when given and kept when
    computed) returns a ``dspy.Prediction`` with ``nodes``, ``node_ids`` and ``trace``.
    """

    def __init__(self, index: RetrievalSource, fact_filter: Any, config: HippoGraphConfig | None = None,
                 verbose: bool = False) -> None:
        # A custom postprocessor as the filter has no LM step of the flow's: the shared runner is LLM-free.
        super().__init__(StepRunner(lm=None, counter=FallbackCounter()), source=GraphParts(index, fact_filter))
        program = getattr(fact_filter, "program", None)
        self.filter = program.filter if isinstance(program, FactFilterModule) else None
        self.config = config or HippoGraphConfig()
        self.verbose = verbose

    def _runner(self) -> StepRunner:
        """A DSPyFactFilter's runner, read at each query so a later change of its LM or timeout is used."""
        fact_filter = self._parts.source.fact_filter
        return fact_filter.runner if isinstance(fact_filter, DSPyFactFilter) else self._parts.runner

    def _flow_for(self, query: QueryType, record: StepRecord) -> Flow[NodesAndTrace]:
        text = query_text(query)
        bundle = query if isinstance(query, QueryBundle) and query.query_str == text else QueryBundle(text)
        return self.flow(bundle, record)

    def flow(self, query: QueryBundle, record: StepRecord) -> Flow[NodesAndTrace]:
        """One query, top to bottom: the query's vector, the candidate facts, recognition memory, the walk."""
        index, fact_filter = self._parts.source.index, self._parts.source.fact_filter
        text = query.query_str
        started = time.perf_counter()
        state = index.retrieval_state(damping=self.config.damping)
        if query.embedding is None:
            embed_model = index.embed_model
            query.embedding = yield Call(partial(embed_model.get_query_embedding, text),
                                         partial(embed_model.aget_query_embedding, text))
        query_vector = self._query_vector(state, query.embedding)
        dense, candidates, by_id = self._candidates(state, query_vector)
        kept = (yield from self._recognition(fact_filter, candidates, text)) if candidates else []
        results, trace = self._rank(state, text, query_vector, dense, candidates, kept, by_id, started)
        # How the fact filter's LM step was answered (empty: no step ran); each query keeps its own trace.
        trace.update(steps=dict(record.steps), step_reasons=dict(record.reasons))
        return results, trace

    def _recognition(self, fact_filter: Any, candidates: list[NodeWithScore], query: str) -> Flow[list[NodeWithScore]]:
        """The candidate facts the filter keeps: a DSPyFactFilter's step calls this module's predictor; any other
        postprocessor is called as it is."""
        if isinstance(fact_filter, DSPyFactFilter):
            return (yield from fact_filter.recognition(list(candidates), query, self.filter))
        bundle = QueryBundle(query)
        return (yield Call(partial(fact_filter.postprocess_nodes, list(candidates), query_bundle=bundle),
                           partial(fact_filter.apostprocess_nodes, list(candidates), query_bundle=bundle)))

    def _candidates(self, state: RetrievalState,
                    query_vector: np.ndarray) -> tuple[DenseScores, list[NodeWithScore], dict[str, int]]:
        """Dense passage scores and the top facts as fact nodes (score: min-max normalised similarity)."""
        # The walk says whether it reads every passage's similarity or only the best passages' and the extremes;
        # the best include the dense seeds and the passages a trace may show.
        dense = state.passage_vectors.search(query_vector, max(self.config.similarity_top_k,
                                             self.config.dense_seed_top_k, _TRACE_TOP),
                                             every=state.walk.needs_every_passage_score)
        facts = state.fact_vectors.search(query_vector, self.config.linking_top_k, every=False)
        fact_scores = facts.normalised(facts.top_scores)
        top = facts.top.tolist()
        scored = zip(top, fact_scores.tolist(), strict=True)
        nodes = [fact_node(*state.fact_triples[i], score=score) for i, score in scored]
        return dense, nodes, {node.node.node_id: i for node, i in zip(nodes, top, strict=True)}

    def _seeds(self, state: RetrievalState, query_entities: list[int], kept: list[NodeWithScore],
               by_id: dict[str, int], chain: list[tuple[ChainStep, int | None, int | None]]) -> SparseVector:
        """The reset's seeds: kept facts' entities (the ``linking_top_k`` best), the query's entities, the chain's."""
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
        for step, entity, row in chain:
            # The passage a hop leads to is seeded itself: its entity (a town, a firm) is often a hub that many
            # passages name. Without such a passage the entity is seeded as a query entity is.
            weight = self.config.chain_weight * step.weight
            if row is not None:
                weights[row] = weights.get(row, 0.0) + weight
            elif entity is not None:
                weights[entity] = weights.get(entity, 0.0) + (weight / counts[entity] if counts[entity] > 0 else weight)
        return SparseVector.from_mapping(weights)

    def _chain(self, state: RetrievalState, query: str,
               named: list[int]) -> list[tuple[ChainStep, int | None, int | None]]:
        """The query's evidence chain (:func:`~llama_index_mhop.rules.ranking.follow_chain`) over the graph: each
        step with its entity's node and the row of the passage it leads to (None: no such entity, no such passage)."""
        passages = len(state.passage_ids)
        rows: dict[str, int] = {}

        def about_node(node: int) -> list[PassageView]:
            name = state.entity_names[node - passages]
            views = [(row, state.passage_view(row)) for row in state.linked_passages(node, _ABOUT_CANDIDATES)]
            rows.update((view.id, row) for row, view in views if view.is_about(name))
            return [view for _, view in views if view.is_about(name)]

        def about(name: str) -> PassageView | None:
            # A name qualified by "of" ("Trent Reznor of Nine Inch Nails") is also looked up without it.
            for key in dict.fromkeys([entity_key(name), entity_key(name.split(" of ")[0])]):
                node = state.entity_key_node.get(key)
                found = [] if node is None else about_node(node)
                if found:
                    return found[0]
            return None
        starts = [view for node in named for view in about_node(node)]
        steps = follow_chain(query, starts, about, self.config.chain_hops)
        return [(step, state.entity_key_node.get(entity_key(step.entity)), rows.get(step.target)) for step in steps]

    def _add_dense_seeds(self, seeds: SparseVector, dense: DenseScores) -> SparseVector:
        """The seeds plus the best passages' normalised similarity times ``dense_seed_weight`` (when set)."""
        if self.config.dense_seed_top_k > 0 and self.config.dense_seed_weight > 0:
            k = self.config.dense_seed_top_k
            return seeds.plus(dense.top[:k], self.config.dense_seed_weight * dense.normalised(dense.top_scores[:k]))
        return seeds

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
                if not any((w[0][:1].isupper() and w[0] not in NON_ENTITY_CAPS and w[0].lower() not in STOPWORDS)
                           or w[0][:1].isdigit() for w in span):
                    continue
                node = state.entity_key_node.get(entity_key(query[span[0][1] : span[-1][2]]))
                if node is None:
                    continue
                for i in range(start, start + length):
                    taken[i] = True
                if node not in found:
                    found.append(node)
        return found

    def _rank(self, state: RetrievalState, query: str, query_vector: np.ndarray, dense: DenseScores,
              candidates: list[NodeWithScore], kept: list[NodeWithScore], by_id: dict[str, int],
              started: float) -> tuple[list[NodeWithScore], dict[str, Any]]:
        chained = self.config.chain_hops > 0 and self.config.chain_weight > 0
        named = self._query_entities(state, query) if self.config.query_entity_weight > 0 or chained else []
        query_entities = named if self.config.query_entity_weight > 0 else []
        trace: dict[str, Any] = {
            "query": query, "candidate_facts": [self._fact_json(n) for n in candidates],
            "kept_facts": [self._fact_json(n) for n in kept],
            "query_entities": [state.entity_names[j - len(state.passage_ids)] for j in query_entities]}
        chain = self._chain(state, query, named) if chained else []
        trace["chain"] = [{"hop": step.hop, "from": step.title or step.source, "sentence": step.sentence,
                           "matched": list(step.matched), "entity": step.entity, "weight": step.weight,
                           "to": step.target_title or step.target} for step, _, _ in chain]
        if not kept and not query_entities:
            # HippoRAG 2: no fact survives recognition, so rank by dense retrieval alone.
            trace.update(mode="dense", reset_top=[], top_entities=[])
            k = min(self.config.similarity_top_k, len(state.passage_ids))
            ranked = list(zip(dense.top[:k].tolist(), dense.top_scores[:k].tolist(), strict=True))
            nodes = state.passage_nodes([i for i, _ in ranked])
        else:
            seeds = self._add_dense_seeds(self._seeds(state, query_entities, kept, by_id, chain), dense)
            ranking = state.walk.rank(seeds, dense, query_vector, self.config.passage_node_weight,
                                      self.config.similarity_top_k, _TRACE_TOP)
            ranked = list(zip(ranking.passages.tolist(), ranking.scores.tolist(), strict=True))
            nodes = state.passage_nodes([i for i, _ in ranked])
            trace.update(mode="ppr", reset_top=[self._node_json(state, j, v) for j, v in ranking.reset_top],
                         top_entities=[self._node_json(state, j, v) for j, v in ranking.top_entities])
        results = [NodeWithScore(node=nodes[i], score=float(score)) for i, score in ranked]
        results, trace["first_page"] = self._first_page(query, results, [state.passage_view(i) for i, _ in ranked])
        trace["results"] = [{"id": r.node.node_id, "title": str(r.node.metadata.get("title", "")),
                             "score": float(r.score or 0.0)} for r in results]
        trace["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
        if self.verbose:
            logger.info("HippoGraphRetriever trace: %s", trace)
        return results, trace

    def _first_page(self, query: str, results: list[NodeWithScore],
                    views: list[PassageView]) -> tuple[list[NodeWithScore], dict[str, Any]]:
        """The ranking in first-page order (:mod:`~llama_index_mhop.rules.ranking`) and what decided it, for the
        trace (``views``: the results' passages). Scores stay in descending order: a passage takes the score of the
        place it moves to."""
        page = first_page(query, views, self.config.first_page)
        reordered = [NodeWithScore(node=results[i].node, score=results[place].score)
                     for place, i in enumerate(page.order)]
        return reordered, {"lead": [results[i].node.node_id for i in page.lead],
                           "hops": [results[i].node.node_id for i in page.hops]}

    @staticmethod
    def _fact_json(node: NodeWithScore) -> dict[str, Any]:
        meta = node.node.metadata
        return {"subject": meta["subject"], "predicate": meta["predicate"], "object": meta["object"],
                "score": None if node.score is None else float(node.score)}

    @staticmethod
    def _node_json(state: RetrievalState, j: int, value: float) -> dict[str, Any]:
        passages = len(state.passage_ids)
        if j < passages:
            return {"kind": "passage", "id": state.passage_ids[j], "title": state.passage_view(j).title,
                    "weight": float(value)}
        return {"kind": "entity", "id": state.entity_ids[j - passages], "name": state.entity_names[j - passages],
                "weight": float(value)}

    def _query_vector(self, state: RetrievalState, vector: list[float]) -> np.ndarray:
        q = np.asarray(vector, dtype=np.float32)
        stored = state.passage_vectors.dimension
        if stored and q.shape != (stored,):
            raise EmbeddingDimensionError(
                f"the index {self._parts.source.index.name!r} holds {stored}-dimensional passage vectors but the embedder "
                f"{embedder_name(self._parts.source.index.embed_model)} gives {q.size}; "
                "use the embedder the index was built with (embed_model=; mhop: --embed-model)")
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else q


class HippoGraphRetriever(ProgramRetriever):
    """HippoRAG 2 retrieval: facts, recognition memory, Personalized PageRank over the knowledge graph.

    Args:
        index: the :class:`~llama_index_mhop.graph.index.HippoGraphIndex` to search (any
            :class:`~llama_index_mhop.graph.retrieval_source.RetrievalSource`).
        fact_filter: the recognition-memory postprocessor (any node postprocessor); default
            ``DSPyFactFilter(top_n=fact_top_n)`` with the LM, starting from the index's ``fact_filter_program``.
        program: a compiled :class:`HippoGraphModule` (or the fact filter's program), or the path of a saved one.
        **kwargs: ``config`` or the settings of :class:`HippoGraphConfig` one by one; ``lm`` or ``llm`` for the fact
            filter, ``callback_manager`` and ``verbose``, as for every
            :class:`~llama_index_mhop.components.base.ProgramRetriever`.

    ``last_trace`` holds the last query's kept facts, evidence chain, the reset's top entries and the walk's top
    entities.
    """

    config_type = HippoGraphConfig
    config: HippoGraphConfig
    #: Every keyword argument besides ``index`` (``HippoGraphIndex.as_query_engine`` routes them here).
    ARGUMENTS = frozenset(HippoGraphConfig.model_fields) | {"config", "fact_filter", "lm", "llm", "program",
                                                            "callback_manager", "verbose"}

    def __init__(self, index: RetrievalSource, *, fact_filter: Any = None,
                 program: ProgramSource | None = None, **kwargs: Any) -> None:
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
        return HippoGraphModule(self.index, self.fact_filter, self.config, self._verbose)

    def passage_search(self) -> PassageSearch:
        """The search the LLM-free seed flows run over this retriever: its ranking of the question's vector, with
        the table of the index's passages for their title lookups (:mod:`~llama_index_mhop.stores.passage_table`)."""
        return PassageSearch(self.index.embed_model, self.index.passage_sources, self.retrieve)

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

    # ------------------------------------------------------------------ LlamaIndex entry points

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
