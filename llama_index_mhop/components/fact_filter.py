"""``DSPyFactFilter``: HippoRAG 2's recognition-memory step as a LlamaIndex node postprocessor.

HippoRAG 2 (Gutiérrez et al., 2025, seeds/003) retrieves (subject, predicate, object) facts by embedding
similarity, then lets an LM *recognise* the few the query needs; the kept facts' entities seed the walk. The filter
works on fact nodes (:func:`fact_node`) in a graph retriever and on any query engine's passage nodes. It selects at
most ``top_n`` input nodes in one of three ways:

* **LM**: each fact the LM answers is matched back to a candidate by string similarity (difflib), never evaluated
  (seeds/003 calls ``eval`` on it); unmatched (invented) and duplicate answers are dropped; the LM's order is kept.
  ``{"fact": []}`` is the prompt's own "nothing is relevant": nothing is kept, and it is not a fallback.
* **Mentions** (the LLM-free default, :attr:`FactSelection.MENTIONS`): a fact is kept when its subject or object
  names an entity of the query (strength 2) or shares a content word with it (strength 1); predicates do not
  count ("born on" would match every birthday). Kept facts are ordered by strength, then embedding score.
* **Top score** (the LM failed, :attr:`FactSelection.TOP_SCORE`): the best embedding scores, as the seed falls
  back; a raising, slow or malformed LM ends here (WARNING log, :attr:`DSPyFactFilter.fallback_counts`)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

import dspy
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.prompts.mixin import PromptMixin
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from ..lm.programs import ProgramSource, load_program, save_program, step_prompts, update_step_prompts
from ..lm.steps import (
    DEFAULT_LM_TIMEOUT,
    Fact,
    FactFilterModule,
    FallbackCounter,
    LMStep,
    current_lm,
    resolve_lm,
)
from ..rules.parsing import LMOutputError
from ..rules.ranking import FIRST_PAGE_SIZE, PassageView, first_page
from ..rules.text import content_terms, drop_possessives, entity_spans, normalize, stable_id
from .base import Flow, LMRequest, StepRecord, StepRunner, arun_flow, run_flow
from .passage_facts import DEFAULT_FACT_MATCH_CUTOFF, MAX_FUZZY_FACT_CHARS, CandidateMatcher, PassageFacts

__all__ = ["DEFAULT_FACT_MATCH_CUTOFF", "DEFAULT_FACT_TOP_N", "FACT_KEYS", "DSPyFactFilter", "FactFilterModule",
           "FactSelection", "MAX_FUZZY_FACT_CHARS", "fact_node", "fact_triple", "is_fact_node", "select_by_mentions",
           "select_by_score"]

DEFAULT_FACT_TOP_N = 4  # the signature asks for "up to 4" facts, as HippoRAG 2 does
STEP = "fact_filter"
FACT_KEYS = ("subject", "predicate", "object")


def is_fact_node(node: NodeWithScore) -> bool:
    """Whether the node carries a (subject, predicate, object) triple in its metadata."""
    return all(key in node.node.metadata for key in FACT_KEYS)


def fact_node(subject: str, predicate: str, obj: str, score: float | None = None,
              **metadata: Any) -> NodeWithScore:
    """A fact as a scored node: text ``"subject predicate object"``, the triple in the metadata (kept out of the
    embedding and LLM views), ``score`` its similarity to the query, ``metadata`` more (e.g. source passage ids).
    The node id is derived from the triple, so the same fact always has the same id.

    Raises:
        ValueError: a part that is not a non-empty string, or metadata that redefines a triple key."""
    parts = {"subject": subject, "predicate": predicate, "object": obj}
    for key, value in parts.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"fact {key} must be a non-empty string, got {value!r}")
    clash = set(FACT_KEYS) & set(metadata)
    if clash:
        raise ValueError(f"metadata must not redefine the triple keys {sorted(clash)}")
    node = TextNode(id_=stable_id("fact", subject, predicate, obj), text=f"{subject} {predicate} {obj}",
                    metadata={**parts, **metadata}, excluded_embed_metadata_keys=list(FACT_KEYS),
                    excluded_llm_metadata_keys=list(FACT_KEYS))
    return NodeWithScore(node=node, score=None if score is None else float(score))


def fact_triple(node: NodeWithScore) -> tuple[str, str, str]:
    metadata = node.node.metadata
    try:
        triple = tuple(metadata[key] for key in FACT_KEYS)
    except KeyError as missing:
        raise ValueError(f"node {node.node.node_id!r} is not a fact node: its metadata lacks {missing}; "
                         "build fact nodes with fact_node(subject, predicate, obj, score)") from None
    if not all(isinstance(part, str) for part in triple):
        raise ValueError(f"node {node.node.node_id!r}: subject, predicate and object must be strings")
    return triple  # type: ignore[return-value]


class FactSelection(str, Enum):
    """LLM-free ways to select facts (the no-LM default and the LM-failure fallback)."""

    MENTIONS = "mentions"
    """Keep facts whose subject or object the query mentions; drop the rest."""
    TOP_SCORE = "top_score"
    """Keep the facts with the best embedding scores."""


def check_top_n(top_n: int) -> None:
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise ValueError(f"top_n must be an integer >= 1, got {top_n!r}")


def node_score(node: NodeWithScore) -> float:
    return float("-inf") if node.score is None else float(node.score)


def _contains_words(longer: str, shorter: str) -> bool:
    """Whether normalised ``shorter`` occurs in normalised ``longer`` on word boundaries."""
    return f" {shorter} " in f" {longer} "


def _mention_strength(argument: str, query_entities: list[str], query_terms: set[str]) -> int:
    """2 when the argument names an entity of the query, 1 when it shares a content word with it, else 0."""
    argument = drop_possessives(argument)
    key = normalize(argument)
    if not key:
        return 0
    terms = set(content_terms(argument))
    for entity in query_entities:
        # The argument names the query's entity, possibly qualified ("dolj county" for "Dolj"). The other
        # direction is too loose: "river" is inside "Imperial River" but names any river; it only counts as a
        # shared word below.
        if key == entity or (_contains_words(key, entity) and content_terms(entity)):
            return 2
    return 1 if terms & query_terms else 0


def select_by_mentions(query: str, nodes: list[NodeWithScore], top_n: int) -> list[NodeWithScore]:
    """The LLM-free recognition rule (see the module docstring): mentioned facts, strongest then best scored."""
    check_top_n(top_n)
    query = drop_possessives(query)
    query_entities = [key for key in (normalize(span) for span in entity_spans(query)) if key]
    query_terms = set(content_terms(query))
    ranked = []
    for position, node in enumerate(nodes):
        subject, _, obj = fact_triple(node)
        strength = max(_mention_strength(subject, query_entities, query_terms),
                       _mention_strength(obj, query_entities, query_terms))
        if strength:
            ranked.append((-strength, -node_score(node), position, node))
    ranked.sort(key=lambda item: item[:3])
    return [item[3] for item in ranked[:top_n]]


def select_by_score(nodes: list[NodeWithScore], top_n: int) -> list[NodeWithScore]:
    """The ``top_n`` nodes by embedding score (ties keep the input order)."""
    check_top_n(top_n)
    order = sorted(range(len(nodes)), key=lambda i: (-node_score(nodes[i]), i))
    return [nodes[i] for i in order[:top_n]]


class DSPyFactFilter(BaseNodePostprocessor, PromptMixin):
    """Recognition memory over fact nodes (HippoRAG 2, seeds/003): keep the few facts the query needs.

    Args:
        top_n: at most this many facts are kept.
        lm: a DSPy LM for the filter; or
        llm: a LlamaIndex LLM (wrapped for DSPy). Neither: ``dspy.settings.lm``, else the LLM-free rule.
        timeout: seconds before an LM call is abandoned (and the fallback used).
        match_cutoff: difflib similarity an LM-written fact needs to a candidate to count as that candidate.
        llm_free_strategy: the selection used when no LM is configured.
        fallback_strategy: the selection used when the LM fails.
        extractor: reads the facts of passage nodes (``extract(text, title) -> Extraction``, e.g. an
            ``OpenIEExtractor`` with an LM); default the LLM-free extractor. Facts are cached by passage content.
        supporting_only: on passage nodes, return only the passages that state a kept fact.
        first_page: on passage nodes without an LM, how many of the first passages are put in first-page order.
        graph_index: a ``HippoGraphIndex`` whose passages the nodes are: their stored facts are used as they are.
        program: a compiled :class:`FactFilterModule`, or the path of one saved by :meth:`save_program`.
        callback_manager: LlamaIndex callbacks; the LM step's LLM events go there (when it has handlers).

    On **passage nodes** (nodes without a triple) with an LM, the passages stating the kept facts come first, in
    the facts' order, then the others (with ``supporting_only``, only the supporting ones). Without an LM no fact
    is read: the first ``first_page`` passages are put in first-page order
    (:func:`~llama_index_mhop.rules.ranking.first_page`). Nodes keep their scores; only their order changes.

    ``get_prompts()`` shows the filter step's instructions (``"fact_filter"``) and ``update_prompts(...)`` changes
    them for the next LM call.

    Example:
        >>> facts = [fact_node("imperial river", "is located in", "florida", 0.82),
        ...          fact_node("tsui hark", "born on", "15 february 1950", 0.40)]
        >>> DSPyFactFilter().postprocess_nodes(facts, query_str="Where is the Imperial River?")  # doctest: +SKIP
    """

    top_n: int = Field(default=DEFAULT_FACT_TOP_N, ge=1, description="Maximum number of facts kept.")
    timeout: float = Field(default=DEFAULT_LM_TIMEOUT, gt=0,
                           description="Seconds before an LM call is abandoned for the fallback.")
    match_cutoff: float = Field(default=DEFAULT_FACT_MATCH_CUTOFF, ge=0.0, le=1.0, description=(
        "Similarity (difflib ratio of normalised text) an LM-written fact needs to a candidate."))
    llm_free_strategy: FactSelection = Field(default=FactSelection.MENTIONS,
                                             description="Selection used when no LM is configured.")
    fallback_strategy: FactSelection = Field(default=FactSelection.TOP_SCORE, description=(
        "Selection used when the LM fails or answers nothing usable."))
    supporting_only: bool = Field(default=False, description=(
        "On passage nodes, return only the passages that state a kept fact."))
    first_page: int = Field(default=FIRST_PAGE_SIZE, ge=0, description=(
        "Without an LM, how many of the first passage nodes are put in first-page order."))

    _lm: dspy.BaseLM | None = PrivateAttr(default=None)
    _passage_facts: PassageFacts | None = PrivateAttr(default=None)
    _facts_source: tuple[Any, Any] = PrivateAttr(default=(None, None))
    _program: FactFilterModule = PrivateAttr()
    _fallback_counts: FallbackCounter = PrivateAttr()

    def __init__(self, top_n: int = DEFAULT_FACT_TOP_N, lm: dspy.BaseLM | None = None, llm: Any = None,
                 timeout: float = DEFAULT_LM_TIMEOUT, match_cutoff: float = DEFAULT_FACT_MATCH_CUTOFF,
                 llm_free_strategy: FactSelection | str = FactSelection.MENTIONS,
                 fallback_strategy: FactSelection | str = FactSelection.TOP_SCORE, extractor: Any = None,
                 supporting_only: bool = False, first_page: int = FIRST_PAGE_SIZE, graph_index: Any = None,
                 program: ProgramSource | None = None, **kwargs: Any) -> None:
        super().__init__(top_n=top_n, timeout=timeout, match_cutoff=match_cutoff,
                         llm_free_strategy=FactSelection(llm_free_strategy),
                         fallback_strategy=FactSelection(fallback_strategy), supporting_only=supporting_only,
                         first_page=first_page, **kwargs)
        self._lm = resolve_lm(lm=lm, llm=llm)
        self._facts_source = (extractor, graph_index)
        self._program = FactFilterModule()
        if program is not None:
            load_program(self._program, program)
        self._fallback_counts = FallbackCounter()

    @classmethod
    def class_name(cls) -> str:
        return "DSPyFactFilter"

    @property
    def lm(self) -> dspy.BaseLM | None:
        """The resolved DSPy LM, or None for the LLM-free strategy."""
        return self._lm

    @property
    def program(self) -> FactFilterModule:
        """The DSPy program (for optimizers): its predictor is ``program.filter``."""
        return self._program

    def save_program(self, path: str | os.PathLike[str]) -> Path:
        """Save the filter's DSPy program (its predictor's instructions and demos) as DSPy's JSON."""
        return save_program(self._program, path)

    def _get_prompts(self) -> dict[str, Any]:
        """The filter step's instructions (its DSPy signature's, as the predictor holds them)."""
        return step_prompts({STEP: self._program.filter})

    def _update_prompts(self, prompts_dict: dict[str, Any]) -> None:
        update_step_prompts({STEP: self._program.filter}, prompts_dict)

    def _get_prompt_modules(self) -> dict[str, Any]:
        return {}

    @property
    def fallback_counts(self) -> FallbackCounter:
        """How often the LM step fell back to the LLM-free selection."""
        return self._fallback_counts

    @property
    def runner(self) -> StepRunner:
        """What runs the filter's LM step (see :meth:`recognition`): its LM, fallback counter and timeout."""
        return StepRunner(self._lm, self._fallback_counts, self.timeout)

    def _prepare(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None) -> str:
        if query_bundle is None:
            raise ValueError("DSPyFactFilter needs the query: pass query_bundle= or query_str=")
        query = query_bundle.query_str
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        return query

    def _passage_candidates(self, nodes: list[NodeWithScore]) -> tuple[list[NodeWithScore], list[list[int]]]:
        """Fact nodes for the facts the passages state, and for each the positions of the passages stating it."""
        if self._passage_facts is None:  # made on first use: a filter of fact nodes never reads a passage's facts
            extractor, graph_index = self._facts_source
            self._passage_facts = PassageFacts(extractor, graph_index=graph_index)
        triples, scores, support = self._passage_facts.candidates(nodes)
        return [fact_node(*triple, score=score) for triple, score in zip(triples, scores, strict=True)], support

    def _passages_for(self, kept: list[NodeWithScore], nodes: list[NodeWithScore],
                      candidates: list[NodeWithScore], support: list[list[int]]) -> list[NodeWithScore]:
        position_of = {id(candidate): i for i, candidate in enumerate(candidates)}
        order: list[int] = []
        for fact in kept:
            order.extend(p for p in support[position_of[id(fact)]] if p not in order)
        if not self.supporting_only:
            order.extend(p for p in range(len(nodes)) if p not in order)
        return [nodes[p] for p in order]

    def _select(self, strategy: FactSelection, query: str, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        if strategy is FactSelection.MENTIONS:
            return select_by_mentions(query, nodes, self.top_n)
        return select_by_score(nodes, self.top_n)

    def _step(self, query: str, nodes: list[NodeWithScore], triples: list[tuple[str, str, str]],
              predictor: Any) -> LMRequest[list[NodeWithScore]]:
        # Candidates go to the LM best-first, as HippoRAG 2 sends its top facts by embedding score.
        order = sorted(range(len(nodes)), key=lambda i: (-node_score(nodes[i]), i))
        candidates = json.dumps({"fact": [list(triples[i]) for i in order]}, ensure_ascii=False)
        strategy = self.llm_free_strategy if current_lm(self._lm) is None else self.fallback_strategy
        step = LMStep(STEP, self._program if predictor is None else predictor,
                      lambda prediction: self._parse(prediction, nodes, triples),
                      lambda: self._select(strategy, query, nodes), callback_manager=self.callback_manager)
        return LMRequest(step, {"question": query, "fact_before_filter": candidates})

    def _parse(self, prediction: dspy.Prediction, nodes: list[NodeWithScore],
               triples: list[tuple[str, str, str]]) -> list[NodeWithScore]:
        answer = getattr(prediction, "fact_after_filter", None)
        if isinstance(answer, Fact):
            generated = answer.fact
        elif isinstance(answer, dict) and isinstance(answer.get("fact"), list):
            generated = answer["fact"]
        else:
            raise LMOutputError(f"fact_after_filter is not a Fact: {answer!r:.200}")
        if not generated:  # the prompt's "nothing relevant" answer: a valid selection of no fact
            return []
        matcher = CandidateMatcher(triples, self.match_cutoff)
        chosen: list[int] = []
        # An answer far longer than the candidate list is not a selection from it; read only its head.
        for item in generated[: 2 * len(triples) + self.top_n]:
            if not isinstance(item, list) or not all(isinstance(part, str) for part in item):
                continue  # a malformed entry cannot name a candidate
            index = matcher.match(item)
            if index is not None and index not in chosen:
                chosen.append(index)
            if len(chosen) == self.top_n:
                break
        if not chosen:
            raise LMOutputError(f"no candidate fact recognised in the answer ({len(generated)} facts given)")
        return [nodes[i] for i in chosen]

    def _selection(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None, predictor: Any = None
    ) -> tuple[LMRequest[list[NodeWithScore]] | None, Callable[[Any], list[NodeWithScore]]]:
        """The LM step and its inputs (None when no step is needed) and what turns the kept facts into the answer."""
        query = self._prepare(nodes, query_bundle)
        if not nodes:
            return None, lambda _: []
        if all(is_fact_node(node) for node in nodes):
            return self._step(query, nodes, [fact_triple(n) for n in nodes], predictor), lambda kept: kept
        if current_lm(self._lm) is None and not self.supporting_only:
            # Without an LM, the passages the query needs first are those about what it names and where they lead.
            page = first_page(query, [PassageView.from_node(n.node) for n in nodes], self.first_page)
            return None, lambda _: [nodes[i] for i in page.order]
        candidates, support = self._passage_candidates(nodes)
        if not candidates:
            unchanged = [] if self.supporting_only else list(nodes)
            return None, lambda _: unchanged
        request = self._step(query, candidates, [fact_triple(c) for c in candidates], predictor)
        return request, lambda kept: self._passages_for(kept, nodes, candidates, support)

    def recognition(self, nodes: list[NodeWithScore], query: str,
                    predictor: Any = None) -> Flow[list[NodeWithScore]]:
        """``postprocess_nodes`` for a query string as a flow (:mod:`llama_index_mhop.components.base`): it yields the LM step
        (none when there is nothing to recognise), which :attr:`runner` runs, and returns the nodes kept.

        ``predictor`` is the one to call (default :attr:`program`): a program holding this filter's predictor
        passes its own copy, so an optimizer working on a copy of that program sees the calls."""
        request, finish = self._selection(nodes, QueryBundle(query), predictor)
        return finish(None if request is None else (yield request))

    def _postprocess_nodes(self, nodes: list[NodeWithScore],
                           query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return run_flow(self.recognition(nodes, self._prepare(nodes, query_bundle)), self.runner, StepRecord())

    async def _apostprocess_nodes(self, nodes: list[NodeWithScore],
                                  query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
        return await arun_flow(self.recognition(nodes, self._prepare(nodes, query_bundle)), self.runner,
                               StepRecord())
