"""``DSPyFactFilter``: HippoRAG 2's recognition-memory step as a LlamaIndex node postprocessor.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory: Non-Parametric Continual Learning for Large Language
Models") retrieves (subject, predicate, object) facts by embedding similarity, then lets an LM *recognise* the
few that matter for the query (seeds/003). The entities of the kept facts seed the Personalized PageRank walk.
Here that step works on fact nodes (see :func:`fact_node`), so it runs inside a graph retriever or as a
``node_postprocessors`` entry of any query engine whose nodes are facts.

Three ways to select, all returning input nodes only, at most ``top_n``:

* **LM** (a DSPy LM is configured): the candidates go to the LM as ``{"fact": [[s, p, o], ...]}``; each fact it
  answers is matched back to a candidate by string similarity (difflib on the normalised "s p o" text, with
  the subject and object checked on their own), never by evaluating the answer (seeds/003 calls ``eval`` on
  it, a code-execution hole). Answers that match no candidate are invented facts and are dropped; duplicates
  are dropped; the LM's order is kept.
* **Mentions** (no LM, the default LLM-free strategy, :attr:`FactSelection.MENTIONS`): recognition drops what
  the query does not mention. A fact is kept when its subject or object names an entity of the query (equal to,
  or containing on word boundaries, one of the query's entity spans after normalisation, possessives dropped:
  strength 2) or shares a content word with the query (strength 1). Predicates do not count: "born on"
  matches any birth fact, which is how unrelated people's birthdays would get in. Kept facts are ordered by
  strength, then by embedding score. When the query mentions none of them the result is empty (HippoRAG 2
  then ranks passages by dense retrieval alone).
* **Top score** (the LM failed, :attr:`FactSelection.TOP_SCORE`): the ``top_n`` facts with the best
  embedding scores, as the seed's fallback does. An LM that raises, times out, answers non-JSON or the wrong
  shape, or keeps nothing usable while candidates exist, falls back this way (WARNING log, counted in
  :attr:`DSPyFactFilter.fallback_counts`).
"""

from __future__ import annotations

import difflib
import json
import re
from enum import Enum
from typing import Any

import dspy
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from .lm import DEFAULT_LM_TIMEOUT, FallbackCounter, arun_lm_step, resolve_lm, run_lm_step
from .parsing import LMOutputError
from .signatures import Fact, FactFilterSignature
from .stores import stable_id
from .text import content_terms, entity_spans, normalize

__all__ = [
    "DEFAULT_FACT_MATCH_CUTOFF",
    "DEFAULT_FACT_TOP_N",
    "DSPyFactFilter",
    "FactFilterModule",
    "FactSelection",
    "fact_node",
    "select_by_mentions",
    "select_by_score",
]

DEFAULT_FACT_TOP_N = 4  # the signature asks for "up to 4" facts, as HippoRAG 2 does
DEFAULT_FACT_MATCH_CUTOFF = 0.8
FACT_KEYS = ("subject", "predicate", "object")
STEP = "fact_filter"


class FactSelection(str, Enum):
    """LLM-free ways to select facts (the no-LM default and the LM-failure fallback)."""

    MENTIONS = "mentions"
    """Keep facts whose subject or object the query mentions; drop the rest."""
    TOP_SCORE = "top_score"
    """Keep the facts with the best embedding scores."""


def fact_node(
    subject: str, predicate: str, obj: str, score: float | None = None, **metadata: Any
) -> NodeWithScore:
    """A fact as a scored node: text ``"subject predicate object"``, the triple in the metadata.

    The node id is derived from the triple, so the same fact always has the same id. The triple keys are kept
    out of the embedding and LLM views of the node (its text already says it).

    Args:
        subject: the fact's subject entity.
        predicate: the relation.
        obj: the object entity.
        score: the fact's embedding similarity to the query.
        **metadata: more metadata (e.g. the source passage ids).

    Raises:
        ValueError: a part that is not a non-empty string, or metadata that redefines a triple key.
    """
    parts = {"subject": subject, "predicate": predicate, "object": obj}
    for key, value in parts.items():
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"fact {key} must be a non-empty string, got {value!r}")
    clash = set(FACT_KEYS) & set(metadata)
    if clash:
        raise ValueError(f"metadata must not redefine the triple keys {sorted(clash)}")
    node = TextNode(
        id_=stable_id("fact", subject, predicate, obj),
        text=f"{subject} {predicate} {obj}",
        metadata={**parts, **metadata},
        excluded_embed_metadata_keys=list(FACT_KEYS),
        excluded_llm_metadata_keys=list(FACT_KEYS),
    )
    return NodeWithScore(node=node, score=None if score is None else float(score))


class FactFilterModule(dspy.Module):
    """The DSPy module of the fact filter: one ``Predict`` over :class:`FactFilterSignature`."""

    def __init__(self) -> None:
        super().__init__()
        self.filter = dspy.Predict(FactFilterSignature)

    def forward(self, question: str, fact_before_filter: str) -> dspy.Prediction:
        return self.filter(question=question, fact_before_filter=fact_before_filter)

    async def aforward(self, question: str, fact_before_filter: str) -> dspy.Prediction:
        return await self.filter.acall(question=question, fact_before_filter=fact_before_filter)


def _triple(node: NodeWithScore) -> tuple[str, str, str]:
    metadata = node.node.metadata
    try:
        triple = tuple(metadata[key] for key in FACT_KEYS)
    except KeyError as missing:
        raise ValueError(
            f"node {node.node.node_id!r} is not a fact node: its metadata lacks {missing}; build fact nodes "
            "with fact_node(subject, predicate, obj, score)"
        ) from None
    if not all(isinstance(part, str) for part in triple):
        raise ValueError(f"node {node.node.node_id!r}: subject, predicate and object must be strings")
    return triple  # type: ignore[return-value]


def _check_top_n(top_n: int) -> None:
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise ValueError(f"top_n must be an integer >= 1, got {top_n!r}")


def _score(node: NodeWithScore) -> float:
    return float("-inf") if node.score is None else float(node.score)


_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")


def _drop_possessives(text: str) -> str:
    """ "The Ancestor's birthday" -> "The Ancestor birthday": a possessive names the same entity."""
    return _POSSESSIVE.sub("", text)


def _contains_words(longer: str, shorter: str) -> bool:
    """Whether normalised ``shorter`` occurs in normalised ``longer`` on word boundaries."""
    return f" {shorter} " in f" {longer} "


def _mention_strength(argument: str, query_entities: list[str], query_terms: set[str]) -> int:
    """2 when the argument names an entity of the query, 1 when it shares a content word with it, else 0."""
    argument = _drop_possessives(argument)
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
    _check_top_n(top_n)
    query = _drop_possessives(query)
    query_entities = [key for key in (normalize(span) for span in entity_spans(query)) if key]
    query_terms = set(content_terms(query))
    ranked = []
    for position, node in enumerate(nodes):
        subject, _, obj = _triple(node)
        strength = max(
            _mention_strength(subject, query_entities, query_terms),
            _mention_strength(obj, query_entities, query_terms),
        )
        if strength:
            ranked.append((-strength, -_score(node), position, node))
    ranked.sort(key=lambda item: item[:3])
    return [item[3] for item in ranked[:top_n]]


def select_by_score(nodes: list[NodeWithScore], top_n: int) -> list[NodeWithScore]:
    """The ``top_n`` nodes by embedding score (ties keep the input order)."""
    _check_top_n(top_n)
    order = sorted(range(len(nodes)), key=lambda i: (-_score(nodes[i]), i))
    return [nodes[i] for i in order[:top_n]]


def _similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class _CandidateMatcher:
    """Maps facts written by an LM back to the candidate facts, by string similarity only."""

    def __init__(self, triples: list[tuple[str, str, str]], cutoff: float) -> None:
        self.cutoff = cutoff
        self.keys = [normalize(" ".join(t)) for t in triples]
        self.subjects = [normalize(t[0]) for t in triples]
        self.objects = [normalize(t[2]) for t in triples]
        self.exact: dict[str, int] = {}
        for index, key in enumerate(self.keys):
            self.exact.setdefault(key, index)  # duplicate candidates resolve to the first

    def match(self, generated: list[str]) -> int | None:
        """The index of the candidate the generated fact copies, or None for an invented fact."""
        key = normalize(" ".join(generated))
        if not key:
            return None
        if key in self.exact:
            return self.exact[key]
        matcher = difflib.SequenceMatcher(None, autojunk=False)
        matcher.set_seq2(key)
        best, best_ratio = None, self.cutoff
        for index, candidate in enumerate(self.keys):
            if self.exact[candidate] != index:
                continue
            matcher.set_seq1(candidate)
            if matcher.real_quick_ratio() < best_ratio or matcher.quick_ratio() < best_ratio:
                continue
            ratio = matcher.ratio()
            if ratio < best_ratio:
                continue
            # A triple must also keep its entities: "X located in Georgia" is not "X located in Florida",
            # however close the strings.
            if len(generated) == 3 and (
                _similarity(normalize(generated[0]), self.subjects[index]) < self.cutoff
                or _similarity(normalize(generated[2]), self.objects[index]) < self.cutoff
            ):
                continue
            if best is None or ratio > best_ratio:
                best, best_ratio = index, ratio
        return best


class DSPyFactFilter(BaseNodePostprocessor):
    """Recognition memory over fact nodes (HippoRAG 2, seeds/003): keep the few facts the query needs.

    Args:
        top_n: at most this many facts are kept.
        lm: a DSPy LM for the filter; or
        llm: a LlamaIndex LLM (wrapped for DSPy). Neither: ``dspy.settings.lm``, else the LLM-free rule.
        timeout: seconds before an LM call is abandoned (and the fallback used).
        match_cutoff: difflib similarity an LM-written fact needs to a candidate to count as that candidate.
        llm_free_strategy: the selection used when no LM is configured.
        fallback_strategy: the selection used when the LM fails.
        callback_manager: LlamaIndex callbacks.

    Example:
        >>> facts = [fact_node("imperial river", "is located in", "florida", 0.82),
        ...          fact_node("tsui hark", "born on", "15 february 1950", 0.40)]
        >>> DSPyFactFilter().postprocess_nodes(facts, query_str="Where is the Imperial River?")  # doctest: +SKIP
    """

    top_n: int = Field(default=DEFAULT_FACT_TOP_N, ge=1, description="Maximum number of facts kept.")
    timeout: float = Field(
        default=DEFAULT_LM_TIMEOUT,
        gt=0,
        description="Seconds before an LM call is abandoned for the fallback.",
    )
    match_cutoff: float = Field(
        default=DEFAULT_FACT_MATCH_CUTOFF,
        ge=0.0,
        le=1.0,
        description="Similarity (difflib ratio of normalised text) an LM-written fact needs to a candidate.",
    )
    llm_free_strategy: FactSelection = Field(
        default=FactSelection.MENTIONS, description="Selection used when no LM is configured."
    )
    fallback_strategy: FactSelection = Field(
        default=FactSelection.TOP_SCORE,
        description="Selection used when the LM fails or answers nothing usable.",
    )

    _lm: dspy.BaseLM | None = PrivateAttr(default=None)
    _module: FactFilterModule = PrivateAttr()
    _fallback_counts: FallbackCounter = PrivateAttr()

    def __init__(
        self,
        top_n: int = DEFAULT_FACT_TOP_N,
        lm: dspy.BaseLM | None = None,
        llm: Any = None,
        timeout: float = DEFAULT_LM_TIMEOUT,
        match_cutoff: float = DEFAULT_FACT_MATCH_CUTOFF,
        llm_free_strategy: FactSelection | str = FactSelection.MENTIONS,
        fallback_strategy: FactSelection | str = FactSelection.TOP_SCORE,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            top_n=top_n,
            timeout=timeout,
            match_cutoff=match_cutoff,
            llm_free_strategy=FactSelection(llm_free_strategy),
            fallback_strategy=FactSelection(fallback_strategy),
            **kwargs,
        )
        self._lm = resolve_lm(lm=lm, llm=llm)
        self._module = FactFilterModule()
        self._fallback_counts = FallbackCounter()

    @classmethod
    def class_name(cls) -> str:
        return "DSPyFactFilter"

    @property
    def lm(self) -> dspy.BaseLM | None:
        """The resolved DSPy LM, or None for the LLM-free strategy."""
        return self._lm

    @property
    def module(self) -> FactFilterModule:
        """The DSPy module (for optimizers, ``save`` and ``load``)."""
        return self._module

    @property
    def fallback_counts(self) -> FallbackCounter:
        """How often the LM step fell back to the LLM-free selection."""
        return self._fallback_counts

    def _prepare(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None
    ) -> tuple[str, list[tuple[str, str, str]]]:
        if query_bundle is None:
            raise ValueError("DSPyFactFilter needs the query: pass query_bundle= or query_str=")
        query = query_bundle.query_str
        if not isinstance(query, str) or not query.strip():
            raise ValueError(f"query must be a non-empty string, got {query!r}")
        return query, [_triple(node) for node in nodes]

    def _select(self, strategy: FactSelection, query: str, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        if strategy is FactSelection.MENTIONS:
            return select_by_mentions(query, nodes, self.top_n)
        return select_by_score(nodes, self.top_n)

    def _step_args(
        self, query: str, nodes: list[NodeWithScore], triples: list[tuple[str, str, str]]
    ) -> dict[str, Any]:
        # Candidates go to the LM best-first, as HippoRAG 2 sends its top facts by embedding score.
        order = sorted(range(len(nodes)), key=lambda i: (-_score(nodes[i]), i))
        candidates = json.dumps({"fact": [list(triples[i]) for i in order]}, ensure_ascii=False)
        strategy = self.llm_free_strategy if self._lm is None else self.fallback_strategy

        def fallback() -> list[NodeWithScore]:
            return self._select(strategy, query, nodes)

        return {
            "step": STEP,
            "predictor": self._module,
            "inputs": {"question": query, "fact_before_filter": candidates},
            "parse": lambda prediction: self._parse(prediction, nodes, triples),
            "fallback": fallback,
            "lm": self._lm,
            "counter": self._fallback_counts,
            "timeout": self.timeout,
        }

    def _parse(
        self, prediction: dspy.Prediction, nodes: list[NodeWithScore], triples: list[tuple[str, str, str]]
    ) -> list[NodeWithScore]:
        answer = getattr(prediction, "fact_after_filter", None)
        if isinstance(answer, Fact):
            generated = answer.fact
        elif isinstance(answer, dict) and isinstance(answer.get("fact"), list):
            generated = answer["fact"]
        else:
            raise LMOutputError(f"fact_after_filter is not a Fact: {answer!r:.200}")
        matcher = _CandidateMatcher(triples, self.match_cutoff)
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

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, triples = self._prepare(nodes, query_bundle)
        if not nodes:
            return []
        return run_lm_step(**self._step_args(query, nodes, triples))

    async def _apostprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        query, triples = self._prepare(nodes, query_bundle)
        if not nodes:
            return []
        return await arun_lm_step(**self._step_args(query, nodes, triples))
