"""LLM-free strategies of the confidence loop (seed 001), each standing in for one DSPy step when no LM is
configured or the LM fails: :func:`analyze_query` (``EntityAndGapAnalyzer``), :func:`assess_confidence`
(``ConfidenceEvaluator``), :func:`targeted_queries` (``TargetedQueryGenerator``) and :func:`listwise_rerank`
(``ListwiseDocumentReranker``). They keep the original query and follow the bridge entities the top passages
introduce (:mod:`llama_index_mhop.rules.ranking`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .ranking import (
    PassageView,
    anchored_fusion,
    bridge_sentence,
    link_passages,
    reciprocal_rank_fusion,
    relation_order,
)
from .text import entity_spans, is_modifier, mentions, query_entities, relation_words, stem, stems

__all__ = ["DEFAULT_BRIDGE_PASSAGES", "DEFAULT_BRIDGE_PENALTY", "DEFAULT_CONFIDENCE_TOP_N", "DEFAULT_RERANK_RRF_K",
           "ConfidenceAssessment", "Gap", "GapKind", "QueryAnalysis", "RankedPassage", "analyze_query",
           "assess_confidence", "listwise_rerank", "numbered_passages", "targeted_queries"]

#: How many of the best-ranked passages the confidence judges.
DEFAULT_CONFIDENCE_TOP_N = 5
#: How many of the best-ranked passages are searched for bridge entities.
DEFAULT_BRIDGE_PASSAGES = 2
#: Confidence points taken off for each bridge entity that no retrieved passage is about yet.
DEFAULT_BRIDGE_PENALTY = 10
DEFAULT_RERANK_RRF_K = 60
_RELATION_WORDS_PER_QUERY = 4


@dataclass(frozen=True)
class QueryAnalysis:
    """The LLM-free ``EntityAndGapAnalyzer``: the query's entity chains and the round-1 search queries."""

    entity_chains: list[str]
    queries: list[str]
    entities: list[str] = field(default_factory=list)
    relation: list[str] = field(default_factory=list)


def analyze_query(query: str, max_queries: int = 3) -> QueryAnalysis:
    """Round-1 link queries without an LM, at most ``max_queries``: each an entity of the query (named ones before
    one-word modifiers) joined with the first relation words, e.g. ``"Leland directed film shot around"``."""
    if max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    entities = query_entities(query)
    relation = relation_words(query, entity_spans(query))
    relation_text = " ".join(relation[:_RELATION_WORDS_PER_QUERY])
    chains = [f"{entity} -> {relation_text}" if relation_text else entity for entity in entities]
    queries = _new_queries([f"{entity} {relation_text}".strip() for entity in entities], [query], max_queries)
    return QueryAnalysis(entity_chains=chains, queries=queries, entities=entities, relation=relation)


class GapKind:
    """The kinds of missing information (plain strings, so a gap stays JSON-serialisable)."""

    ENTITY = "entity"
    BRIDGE = "bridge"
    FACT = "fact"


@dataclass(frozen=True)
class Gap:
    """A piece of missing information: its ``kind`` (:class:`GapKind`), its ``text`` as shown to an LM, the
    LLM-free search ``query`` that would fill it ("" from an LM), the ``entities`` it names, and the ``source``
    passage's subject."""

    kind: str
    text: str
    query: str = ""
    entities: tuple[str, ...] = ()
    source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "entities": list(self.entities)}


@dataclass(frozen=True)
class ConfidenceAssessment:
    """The LLM-free ``ConfidenceEvaluator``'s answer: a confidence from 0 to 100 and the gaps."""

    confidence: int
    gaps: list[Gap]
    entity_coverage: float = 0.0
    term_coverage: float = 0.0


def assess_confidence(query: str, passages: Sequence[PassageView], issued_queries: Sequence[str] = (),
                      top_n: int = DEFAULT_CONFIDENCE_TOP_N, bridge_passages: int = DEFAULT_BRIDGE_PASSAGES,
                      bridge_penalty: float = DEFAULT_BRIDGE_PENALTY) -> ConfidenceAssessment:
    """Judge without an LM whether the passages suffice, and name what is missing.

    With ``E`` the query's named entities (:func:`query_entities`), ``T`` the stems of its relation words and
    ``O`` the top-n passages about an entity of ``E`` (the first passage when there are none)::

        entity_coverage = mean over e in E of  1 if a top-n passage is about e,
                                               0.5 if a top-n passage only mentions e, else 0
        term_coverage   = |T found in the passages O| / |T|
        confidence      = 100 * (0.5 * entity_coverage + 0.5 * term_coverage)
                          - bridge_penalty * (number of open bridge gaps), clipped to 0..100

    Term coverage looks only at the passages about the query's own entities: when what the query asks
    ("directed", "founded") is answered there, the evidence is local (a comparison or a one-hop question);
    when it is not, the answer sits one hop away and round 2 should follow a bridge.

    Gaps, in this order: every query entity with coverage below 1 (query: the entity and the relation words);
    then, for each of the top ``bridge_passages`` passages, a *bridge*: the entities its
    :func:`bridge_sentence` names that are neither in the query nor followed by an issued query, in
    :func:`relation_order` (query: the first of them, the entity the question's relation leads to). A bridge
    is *open* when no retrieved passage is about any of its entities yet. ``passages`` are best first."""
    entities = [e for e in query_entities(query) if not is_modifier(query, e)] or query_entities(query)
    relation = relation_words(query, entity_spans(query))
    term_stems = {stem(w) for w in relation}
    top = list(passages[:top_n])
    coverage: list[float] = []
    gaps: list[Gap] = []
    relation_text = " ".join(relation[:_RELATION_WORDS_PER_QUERY])
    for entity in entities:
        if any(p.is_about(entity) for p in top):
            coverage.append(1.0)
            continue
        coverage.append(0.5 if any(mentions(p.text, entity) for p in top) else 0.0)
        query_text = f"{entity} {relation_text}".strip()
        gaps.append(Gap(GapKind.ENTITY, f"a passage about {entity}", query_text, (entity,), ""))
    own = [p for p in top if any(p.is_about(e) for e in entities)] or top[:1]
    found_stems = set().union(*(p.stems for p in own))
    term_coverage = len(term_stems & found_stems) / len(term_stems) if term_stems else 1.0
    entity_coverage = sum(coverage) / len(coverage) if coverage else term_coverage
    query_stems = stems(query)
    skip = [*query_entities(query), *(e for q in issued_queries for e in query_entities(q))]
    open_bridges = 0
    for passage in top[:bridge_passages]:
        sentence, new = bridge_sentence(query_stems, passage, skip)
        if not new:
            continue
        new = relation_order(sentence, new, query_stems - stems(passage.subject))
        followed = any(p.is_about(name) for p in passages for name in new)
        open_bridges += not followed
        text = f"{', '.join(new[:3])} (named by {passage.subject or 'a top passage'})"
        # Search the entity the question's relation leads to: a search for the whole sentence finds its source.
        gaps.append(Gap(GapKind.BRIDGE, text, new[0], tuple(new), passage.subject))
        skip.extend(new)
    confidence = 100.0 * (0.5 * entity_coverage + 0.5 * term_coverage) - bridge_penalty * open_bridges
    return ConfidenceAssessment(int(round(min(100.0, max(0.0, confidence)))), gaps, entity_coverage, term_coverage)


def targeted_queries(query: str, gaps: Sequence[Gap | str], issued_queries: Sequence[str] = (),
                     max_queries: int = 2) -> list[str]:
    """Round-2 queries without an LM: one per gap, in order, skipping those issued. A :class:`Gap` carries its own
    query; a gap given as text (an LM's ``missing_information``) is joined with the query's relation words."""
    if max_queries < 1:
        raise ValueError(f"max_queries must be >= 1, got {max_queries}")
    relation_text = " ".join(relation_words(query)[:_RELATION_WORDS_PER_QUERY])
    texts = [(gap.query or f"{gap.text} {relation_text}") if isinstance(gap, Gap)
             else f"{gap} {relation_text}" for gap in gaps]
    candidates = [re.sub(r"\s+", " ", text).strip() for text in texts]
    return _new_queries([c for c in candidates if c], issued_queries, max_queries)


def _new_queries(candidates: Sequence[str], issued: Sequence[str], limit: int) -> list[str]:
    """The first ``limit`` candidates not already issued, each once (case-insensitive)."""
    seen = {q.strip().lower() for q in issued}
    out: list[str] = []
    for candidate in candidates:
        if len(out) < limit and candidate.lower() not in seen:
            seen.add(candidate.lower())
            out.append(candidate)
    return out


@dataclass(frozen=True)
class RankedPassage:
    """One position of the listwise ranking: the passage's index, its relevance, and the index of the passage that
    led to it by a bridge link (None when it holds its place by relevance)."""

    index: int
    relevance: float
    linked_from: int | None = None


def listwise_rerank(query: str, passages: Sequence[PassageView],
                    rankings: Sequence[tuple[Sequence[int], float]],
                    rrf_k: int = DEFAULT_RERANK_RRF_K) -> list[RankedPassage]:
    """Every passage once, best first: an LLM-free listwise ranking that never dilutes the query's own.

    ``rankings`` are ``(ranking, weight)`` pairs, each ranking indices into ``passages``, best first; the first is
    the anchor (the original query's) and keeps its order. A passage's relevance is its weighted Reciprocal Rank
    Fusion score (``rrf_k``) divided by the best one. The anchor's top passage leads, through its bridge entity
    (:func:`~llama_index_mhop.rules.ranking.link_passages`), to the best-ranked passage about it, placed right
    after it, and so on hop after hop; then every other passage by relevance
    (:func:`~llama_index_mhop.rules.ranking.anchored_fusion`). Ties follow RRF's (best rank, then first seen).

    Raises:
        ValueError: a ranking names an index outside ``passages``, or a weight or ``rrf_k`` is negative."""
    n = len(passages)
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
    outside = [index for ranking, _ in rankings for index in ranking if not 0 <= index < n]
    if outside:
        raise ValueError(f"ranking index {outside[0]} is outside 0..{n - 1}")
    fused = reciprocal_rank_fusion([r for r, _ in rankings], k=rrf_k, weights=[w for _, w in rankings])
    relevance = [0.0] * n
    for index, score in fused:
        relevance[index] = score
    top = max(relevance, default=0.0)
    if top > 0:
        relevance = [r / top for r in relevance]
    # The fused order (ties by best rank, then first seen), then passages no ranking holds.
    by_relevance = list(dict.fromkeys([*(index for index, _ in fused), *range(n)]))
    anchor = list(dict.fromkeys(rankings[0][0])) if rankings else []
    links: dict[int, list[int]] = {}
    if anchor:
        position = {passage.id: i for i, passage in enumerate(passages)}
        found = link_passages(query, [passages[anchor[0]]], [passages[i] for i in by_relevance])
        links = {position[source]: [position[t] for t in targets] for source, targets in found.items()}
    linked_from = {target: source for source, targets in links.items() for target in targets}
    order = anchored_fusion(anchor, links, by_relevance)
    return [RankedPassage(i, relevance[i], linked_from.get(i)) for i in order]


def numbered_passages(views: Sequence[PassageView], chars: int) -> str:
    """Passages as an LM step is shown them: ``[i] title: text``, each text cut at a word within ``chars``."""
    lines = []
    for i, view in enumerate(views):
        body = " ".join(view.text.split())
        body = body if len(body) <= chars else body[:chars].rsplit(" ", 1)[0] + " ..."
        lines.append(f"[{i}] {view.title + ': ' if view.title else ''}{body}")
    return "\n".join(lines)
