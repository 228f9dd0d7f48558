"""The first page of a ranking: the passages about what the question names, then the passage they lead to.

A multi-hop question names its first hop ("Which band was formed first, The Exies or Circus Diablo?", "Drew
Fuller starred in a series that originally broadcast on what station?"); the rest of its evidence is reached from
there through a bridge entity. A retriever orders passages by their own scores, so the passage the question names
and the passage it leads to are often both found, yet not both on the first page: the two or three passages an
app puts before its LLM. :func:`first_page` reorders the head of a ranking by that structure:

1. the lead: the passages about an entity the question names (:func:`~llama_index_mhop.rules.text.query_entities`,
   :meth:`~llama_index_mhop.rules.passage_views.PassageView.is_about`), in ranking order; the ranking's first passage
   when there is none;
2. the passages the first of them leads to, hop after hop (:func:`~llama_index_mhop.rules.bridges.link_passages`);
3. the other passages, in ranking order.

Only the first ``size`` passages take part and none of them leaves the first ``size``, so recall at ``size``
never changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .bridges import link_passages
from .passage_views import PassageView
from .text import query_entities

__all__ = ["FIRST_PAGE_SIZE", "FirstPage", "first_page"]

#: How many passages of a ranking the first page is drawn from.
FIRST_PAGE_SIZE = 5


@dataclass(frozen=True)
class FirstPage:
    """A ranking in first-page order.

    Attributes:
        order: the ranking's positions, first-page order first, then every position past the first page as it was.
        lead: positions of the passages about an entity the question names, in ranking order.
        hops: positions of the passages the first lead passage leads to, hop after hop.
    """

    order: list[int]
    lead: list[int]
    hops: list[int]


def _named(query: str, passages: Sequence[PassageView]) -> list[int]:
    """For each entity the query names, the first passage about it; in ranking order."""
    named: set[int] = set()
    for entity in query_entities(query):
        position = next((i for i, p in enumerate(passages) if i not in named and p.is_about(entity)), None)
        if position is not None:
            named.add(position)
    return sorted(named)


def first_page(query: str, passages: Sequence[PassageView], size: int = FIRST_PAGE_SIZE) -> FirstPage:
    """The first-page order of a ranking (see the module docstring).

    Args:
        query: the question or claim.
        passages: the ranking, best first.
        size: how many passages of the ranking take part; 0 leaves the ranking as it is.

    Raises:
        ValueError: ``size`` is negative.
    """
    if size < 0:
        raise ValueError(f"size must be >= 0, got {size}")
    head = list(passages[:size])
    if not head:
        return FirstPage(list(range(len(passages))), [], [])
    lead = _named(query, head)
    first = lead[0] if lead else 0
    position = {p.id: i for i, p in enumerate(head)}
    links = link_passages(query, [head[first]], [p for i, p in enumerate(head) if i != first])
    hops: list[int] = []
    source = head[first].id
    while source in links:
        source = links[source][0]
        hops.append(position[source])
    order = list(dict.fromkeys([first, *lead, *hops, *range(len(head))]))
    return FirstPage([*order, *range(len(head), len(passages))], lead, hops)
