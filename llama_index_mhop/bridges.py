"""Bridge links without an LM: which passage a retrieved passage leads to, through the entity that bridges them.

In multi-hop evidence the next hop is a passage *about* an entity that a found passage *names* in the sentence
that answers the question's relation ("... founded by Rosa Chandvei ..." leads to the passage about Rosa
Chandvei). Two structural rules find that entity:

* the bridge sentence: the sentence of the source passage that shares the most words with the question (its own
  name not counted; the first sentence when none does), and the new entities it names: not the question's, not
  the source's own subject (:func:`~llama_index_mhop.confidence_strategies.bridge_sentence`);
* relation order: in that sentence the entity a question word governs comes first, i.e. the entity with a
  question word closest before it ("founded by X", "born in X"), since English puts a relation before its
  object (:func:`~llama_index_mhop.confidence_strategies.relation_order`).

:func:`link_passages` links a source passage to the first passage of a candidate pool that is about its first
bridge entity found in the pool, then follows that passage the same way for the next hop, until a hop finds
no bridge or no passage about it.
"""

from __future__ import annotations

from collections.abc import Sequence

from .confidence_strategies import PassageView, bridge_sentence, relation_order
from .text import query_entities, stems

__all__ = ["bridge_targets", "link_passages"]

def bridge_targets(query: str, source: PassageView, skip: Sequence[str] = ()) -> list[str]:
    """The entities ``source`` leads to for ``query``, best first (see the module docstring).

    Args:
        query: the question or claim.
        source: a retrieved passage.
        skip: names that are not bridges (the query's entities, entities already followed).
    """
    query_stems = stems(query)
    sentence, entities = bridge_sentence(query_stems, source, [*query_entities(query), *skip])
    return relation_order(sentence, entities, query_stems - stems(source.subject))


def link_passages(query: str, sources: Sequence[PassageView], pool: Sequence[PassageView]) -> dict[str, list[str]]:
    """Link each source to the pool passage its bridge leads to, hop after hop.

    For each source in turn: its bridge entities (:func:`bridge_targets`), best first; the first of them that
    some pool passage is about links the source to the first such passage in pool order. The linked passage is
    then a source for the next hop. A passage is linked at most once, and no passage links to a source.

    Args:
        query: the question or claim.
        sources: the passages to start from (usually the original query's top passage).
        pool: every candidate passage, best first (the order decides between passages about one entity).

    Returns:
        ``{source id: [linked passage id]}`` for every source that found a link, in hop order.
    """
    links: dict[str, list[str]] = {}
    used = {source.id for source in sources}
    followed: list[str] = []
    frontier = list(sources)
    while frontier:
        next_frontier: list[PassageView] = []
        for source in frontier:
            for entity in bridge_targets(query, source, followed):
                target = next((p for p in pool if p.id not in used and p.is_about(entity)), None)
                if target is not None:
                    links[source.id] = [target.id]
                    used.add(target.id)
                    followed.append(entity)
                    next_frontier.append(target)
                    break
        frontier = next_frontier
    return links
