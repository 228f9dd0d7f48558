"""LLM-free query perspectives, seed 000's five angles, from the query and the passages found so far: entity
(the bridge entity the passages introduce, else the query's entities), relationship (the entities with the
relation words), temporal (the query's years or time relation), comparison (the other side, or a second bridge)
and context (the query itself, so fusion always keeps its own ranking).

:func:`heuristic_perspectives` writes them as text to embed (the fallback of an LM's perspectives);
:func:`lookup_perspectives` names the passages to look up by title instead, so an LLM-free run embeds only the
query.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .ranking import PassageView, bridge_targets
from .text import (
    content_terms,
    entity_spans,
    normalize,
    relation_words,
    sentences,
    strip_parenthetical,
    years,
)

__all__ = ["MAX_PERSPECTIVES", "MIN_PERSPECTIVES", "ContextPassage", "bridge_entities", "comparison_sides",
           "heuristic_perspectives", "lookup_perspectives", "repair_perspectives"]

MIN_PERSPECTIVES = 4
MAX_PERSPECTIVES = 5
_MAX_PERSPECTIVE_CHARS = 400
_COMPARISON_CUES = re.compile(
    r"\b(or|both|same|either|neither|compare|comparison|more|less|older|younger|earlier|later|first|larger|"
    r"smaller|longer|shorter|higher|lower|bigger|than|which|who)\b", re.I)
_TIME_CUES = re.compile(
    r"\b(when|year|years|born|birth|died|death|founded|established|date|era|century|decade|age|older|younger|"
    r"earlier|later|first|last|since|until|before|after)\b", re.I)


@dataclass(frozen=True)
class ContextPassage:
    """A passage found in an earlier round: its title (may be empty) and text."""

    title: str
    text: str


def comparison_sides(query: str, entities: Sequence[str]) -> list[str]:
    """The entities a comparison question sets against each other ("X or Y", "both X and Y"), else []."""
    if len(entities) < 2 or not _COMPARISON_CUES.search(query):
        return []
    named = [e for e in entities if not e.isdigit()]
    return named[:2] if len(named) >= 2 else []


def _title_keys(title: str) -> set[str]:
    # "Lover Come Back (1961 film)" also names "Lover Come Back"
    return {normalize(title), normalize(strip_parenthetical(title))} - {""}


def bridge_entities(query: str, context: Sequence[ContextPassage], limit: int = 4) -> list[str]:
    """Entities the context passages introduce that neither the query nor the passages' titles name (the next
    hop): the top passage's :func:`~llama_index_mhop.rules.ranking.bridge_targets` first, then each passage's in
    rank order."""
    known = {normalize(e) for e in entity_spans(query)}
    for passage in context:
        known |= _title_keys(passage.title)
    asked_terms = set(content_terms(query))
    found: list[str] = []
    if context:
        top = PassageView(id="", text=context[0].text, title=context[0].title)
        for entity in bridge_targets(query, top):
            if normalize(entity) not in known and len(found) < limit:
                known.add(normalize(entity))
                found.append(entity)
    for passage in context:
        for entity in [e for s in sentences(passage.text) for e in entity_spans(s)]:
            key = normalize(entity)
            if not key or key in known or entity.isdigit() or set(key.split()) <= asked_terms:
                continue
            known.add(key)
            found.append(entity)
            if len(found) >= limit:
                return found
    return found


def _join(*parts: str | Sequence[str]) -> str:
    words: list[str] = []
    for part in parts:
        words.extend([part] if isinstance(part, str) else part)
    return " ".join(w for w in words if w).strip()


def heuristic_perspectives(query: str, context: Sequence[ContextPassage] = ()) -> list[str]:
    """Four or five distinct perspective queries for ``query`` (see the module docstring for the angles)."""
    entities = [e for e in entity_spans(query) if not e.isdigit()]
    relation = relation_words(query)
    bridges = bridge_entities(query, context)
    sides = comparison_sides(query, entities)
    when = years(query)
    entity_focus = _join(bridges[0], relation) if bridges else _join(entities or content_terms(query)[:3])
    relationship_focus = _join(entities, relation)
    # A temporal angle only where the query has one: a generic "date" query would only add noise to the fusion.
    temporal_focus = _join(entities[:1], when, relation) if when or _TIME_CUES.search(query) else ""
    if sides:
        comparison_focus = _join(sides[1], relation)
    elif len(bridges) > 1:
        comparison_focus = _join(bridges[1], entities[:1])
    else:
        comparison_focus = _join(entities[-1:], relation)
    candidates = [query, entity_focus, relationship_focus, temporal_focus, comparison_focus]
    fillers = [_join(query, b) for b in bridges] + [_join(e, relation) for e in entities]
    fillers += [_join(b, relation) for b in bridges]
    fillers += [f"{query} {angle}" for angle in ("background", "details", "history", "overview")]
    return _dedupe_fill(candidates, fillers)


def lookup_perspectives(query: str, context: Sequence[ContextPassage], chain_end: PassageView | None = None,
                        followed: Sequence[str] = ()) -> list[tuple[str, str]]:
    """The five angles as ``(angle, name)`` pairs, each name an entity whose own passage (the passage titled by it)
    the perspective finds, best first and each name once.

    relationship: where the question's relation leads from ``chain_end``, the last passage of the bridge chain
    followed so far (:func:`~llama_index_mhop.rules.ranking.bridge_targets`, ``followed`` names skipped); entity:
    the bridge entities the context passages introduce (:func:`bridge_entities`); comparison: the sides the
    question sets against each other; then the question's own entities. Context and temporal are the question's
    own ranking: its vector holds its years and time words.
    """
    entities = [e for e in entity_spans(query) if not e.isdigit()]
    angles = [("relationship", e) for e in (bridge_targets(query, chain_end, followed) if chain_end else [])]
    angles += [("entity", e) for e in bridge_entities(query, context)]
    angles += [("comparison", e) for e in comparison_sides(query, entities)]
    angles += [("entity", e) for e in entities]
    seen: set[str] = set()
    out = []
    for angle, name in angles:
        key = normalize(name)
        if key and key not in seen:
            seen.add(key)
            out.append((angle, name))
    return out


def _dedupe_fill(candidates: Sequence[str], fillers: Sequence[str]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for text in [*candidates, *fillers]:
        text = text[:_MAX_PERSPECTIVE_CHARS].strip()
        key = normalize(text)
        if key and key not in seen:
            seen.add(key)
            out.append(text)
        if len(out) == MAX_PERSPECTIVES:
            break
    return out


def repair_perspectives(raw: object, query: str, context: Sequence[ContextPassage] = ()) -> list[str]:
    """An LM's answer as 4-5 usable perspectives: non-strings, empty items and duplicates dropped, long items cut,
    at most five; fewer than four topped up with :func:`heuristic_perspectives`.

    Raises:
        ValueError: nothing usable remains (the caller then falls back to the LLM-free strategy).
    """
    if isinstance(raw, str):
        items: list[object] = [line.strip(" -*\t0123456789.)") for line in raw.splitlines()]
    elif isinstance(raw, (list, tuple)):
        items = list(raw)
    else:
        raise ValueError(f"perspectives must be a list of strings, got {type(raw).__name__}")
    usable = _dedupe_fill([item.strip() for item in items if isinstance(item, str) and item.strip()], [])
    if not usable:
        raise ValueError("the LM gave no usable perspective")
    if len(usable) >= MIN_PERSPECTIVES:
        return usable
    return _dedupe_fill(usable, heuristic_perspectives(query, context))
