"""The LLM-free ways to select facts: the mention rule (no LM) and the best embedding scores (the LM failed).

See :mod:`llama_index_mhop.components.postprocessors` for how :class:`~llama_index_mhop.components.postprocessors.DSPyFactFilter` uses
them.
"""

from __future__ import annotations

from enum import Enum

from llama_index.core.schema import NodeWithScore

from .fact_nodes import fact_triple
from ..rules.text import content_terms, drop_possessives, entity_spans, normalize

__all__ = ["FactSelection", "check_top_n", "node_score", "select_by_mentions", "select_by_score"]


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
        strength = max(
            _mention_strength(subject, query_entities, query_terms),
            _mention_strength(obj, query_entities, query_terms),
        )
        if strength:
            ranked.append((-strength, -node_score(node), position, node))
    ranked.sort(key=lambda item: item[:3])
    return [item[3] for item in ranked[:top_n]]


def select_by_score(nodes: list[NodeWithScore], top_n: int) -> list[NodeWithScore]:
    """The ``top_n`` nodes by embedding score (ties keep the input order)."""
    check_top_n(top_n)
    order = sorted(range(len(nodes)), key=lambda i: (-node_score(nodes[i]), i))
    return [nodes[i] for i in order[:top_n]]
