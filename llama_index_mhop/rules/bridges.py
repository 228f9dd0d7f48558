"""Bridge links without an LM: which passage a retrieved passage leads to, through the entity that bridges them.

In multi-hop evidence the next hop is a passage *about* an entity that a found passage *names* in the sentence
that answers the question's relation ("... founded by Rosa Chandvei ..." leads to the passage about Rosa
Chandvei). Two structural rules find that entity:

* the bridge sentence: the sentence of the source passage that shares the most words with the question (its own
  name not counted; the first sentence when none does), and the new entities it names: not the question's, not
  the source's own subject (:func:`bridge_sentence`);
* relation order: in that sentence the entity a question word governs comes first, i.e. the entity with a
  question word closest before it ("founded by X", "born in X"), since English puts a relation before its
  object (:func:`relation_order`).

:func:`link_passages` links a source passage to the first passage of a candidate pool that is about its first
bridge entity found in the pool, then follows that passage the same way for the next hop, until a hop finds
no bridge or no passage about it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from .passage_views import PassageView
from .text import (
    MIN_NAME_CHARS,
    clean_name,
    entity_spans,
    is_modifier,
    is_number_or_date,
    names_match,
    normalize,
    query_entities,
    sentences,
    stem,
    stems,
)

__all__ = ["bridge_sentence", "bridge_targets", "link_passages", "relation_order"]


def _only_sentence_initial(word: str, text: str) -> bool:
    """Whether a capitalised word never appears capitalised except at the start of a sentence."""
    pattern = re.compile(rf"(?<!\w){re.escape(word)}(?!\w)")
    for match in pattern.finditer(text):
        before = text[: match.start()].rstrip()
        if before and before[-1] not in '.!?"“(':
            return False
    return True


def _new_entities(sentence: str, passage: PassageView, skip: list[str]) -> list[str]:
    """Entities ``sentence`` names that are neither the passage's subject nor in ``skip``, in order."""
    new: list[str] = []
    for span in entity_spans(sentence):
        name = clean_name(span)
        if is_number_or_date(name) or len(normalize(name)) < MIN_NAME_CHARS:
            continue
        if name == name.lower() or (" " not in name and _only_sentence_initial(name, passage.text)):
            continue  # a quoted common word, or a capitalised sentence opener such as "Since"
        if is_modifier(sentence, name):
            continue  # "an American thriller film": an adjective, not an entity to follow
        if passage.is_about(name) or any(names_match(name, other) for other in skip):
            continue
        if not any(names_match(name, seen) for seen in new):
            new.append(name)
    return new


def bridge_sentence(query_stems: set[str], passage: PassageView, skip: Iterable[str]) -> tuple[str, list[str]]:
    """The passage's sentence that best matches the query and names new entities, and those entities.

    Sentences are tried by how many query stems they share (the passage's own name not counted). When none
    that shares a stem names a new entity (the question may word the relation differently), the first
    sentence is used: an encyclopedic passage names there what its subject is linked to.
    """
    skip = list(skip)
    # The passage's own name is in most of its sentences: it cannot tell which sentence answers the query.
    query_stems = query_stems - stems(passage.subject)
    scored = []
    for position, sentence in enumerate(sentences(passage.text)):
        overlap = len(stems(sentence) & query_stems)
        if overlap:
            scored.append((-overlap, position, sentence))
    for sentence in [sentence for _, _, sentence in sorted(scored)] + sentences(passage.text)[:1]:
        new = _new_entities(sentence, passage, skip)
        if new:
            return sentence, new
    return "", []


_WORD_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-]*")


def relation_order(sentence: str, entities: Sequence[str], relation_stems: set[str]) -> list[str]:
    """``entities`` of ``sentence``, those closest after a word whose stem is in ``relation_stems`` first.

    English puts a relation before its object ("founded by X", "born in X"), so the entity a question word
    governs is the one with such a word closest before it. Entities with none before them follow, in sentence
    order.
    """
    words = [(match.start(), stem(match.group(0))) for match in _WORD_TOKEN.finditer(sentence)]

    def distance(entity: str) -> tuple[int, int]:
        position = sentence.find(entity)
        if position < 0:
            return (len(words) + 1, len(sentence))
        before = [word for start, word in words if start < position]
        for gap, word in enumerate(reversed(before)):
            if word in relation_stems:
                return (gap, position)
        return (len(words), position)

    return sorted(entities, key=distance)


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
