"""How found passages link and rank, without an LM: what a passage is about, the bridges between passages, the
first page of a ranking, and Reciprocal Rank Fusion.

* :class:`PassageView`: a passage as the LLM-free strategies see it, and what it is about.
* Bridge links: the next hop is a passage *about* an entity that a found passage *names* in the sentence that
  answers the question's relation ("... founded by Rosa Chandvei ..." leads to the passage about Rosa Chandvei);
  :func:`link_passages` follows them hop after hop through a candidate pool.
* :func:`follow_chain`: the same bridges followed through a whole graph, each hop scored by how much of the
  question's relation its sentence states.
* :func:`first_page`: the passages about what the question names first, then those they lead to, then the rest.
* :func:`reciprocal_rank_fusion` (Cormack, Clarke and Buettcher, SIGIR 2009), the package's one RRF:
  ``score(d) = sum over lists L containing d of w_L / (k + rank_L(d))``; :func:`anchored_fusion`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, TypeVar

from .text import (
    MIN_NAME_CHARS,
    clean_name,
    entity_spans,
    first_sentence,
    is_modifier,
    is_number_or_date,
    names_match,
    normalize,
    query_entities,
    relation_stems,
    sentences,
    stem,
    stems,
    strip_parenthetical,
)

__all__ = ["DEFAULT_RRF_K", "FIRST_PAGE_SIZE", "ChainStep", "FirstPage", "PassageView", "anchored_fusion",
           "bridge_sentence", "bridge_targets", "first_page", "follow_chain", "link_passages", "reciprocal_rank_fusion",
           "relation_order"]

H = TypeVar("H", bound=Hashable)


@dataclass(frozen=True)
class PassageView:
    """A retrieved passage as the strategies see it: id, text and an optional title."""

    id: str
    text: str
    title: str = ""

    @classmethod
    def from_node(cls, node: Any) -> PassageView:
        """From a LlamaIndex node: its id, ``get_content()`` text and ``metadata["title"]`` when present."""
        title = node.metadata.get("title") if isinstance(getattr(node, "metadata", None), dict) else None
        return cls(id=node.node_id, text=node.get_content(), title=str(title or ""))

    @cached_property
    def subject(self) -> str:
        """What the passage is about: its title minus a trailing "(...)", else its first entity."""
        if self.title.strip():
            return strip_parenthetical(clean_name(self.title)) or clean_name(self.title)
        spans = [s for s in entity_spans(first_sentence(self.text)) if not s.isdigit()]
        return clean_name(spans[0]) if spans else ""

    @cached_property
    def stems(self) -> frozenset[str]:
        """The stems of the passage's content words (:func:`~llama_index_mhop.rules.text.stems`)."""
        return frozenset(stems(self.text))

    def is_about(self, name: str) -> bool:
        """Whether the passage's subject is ``name`` (see :func:`~llama_index_mhop.rules.text.names_match`)."""
        return bool(self.subject) and names_match(self.subject, name)

    # What the rules read of each sentence, worked out once a view: a view kept for its passage serves many queries.

    @cached_property
    def sentences(self) -> tuple[str, ...]:
        """The passage's sentences (:func:`~llama_index_mhop.rules.text.sentences`)."""
        return tuple(sentences(self.text))

    @cached_property
    def sentence_stems(self) -> tuple[frozenset[str], ...]:
        """Each sentence's :func:`~llama_index_mhop.rules.text.stems`."""
        return tuple(frozenset(stems(sentence)) for sentence in self.sentences)

    @cached_property
    def sentence_relations(self) -> tuple[frozenset[str], ...]:
        """Each sentence's :func:`~llama_index_mhop.rules.text.relation_stems`."""
        return tuple(frozenset(relation_stems(sentence)) for sentence in self.sentences)

    def names_in(self, position: int) -> tuple[str, ...]:
        """The entities sentence ``position`` names other than the passage's subject (:func:`_sentence_names`)."""
        if position not in self._names_in:
            self._names_in[position] = _sentence_names(self.sentences[position], self)
        return self._names_in[position]

    @cached_property
    def _names_in(self) -> dict[int, tuple[str, ...]]:
        return {}


# -- bridges ---------------------------------------------------------------------------------------------------------


def _only_sentence_initial(word: str, text: str) -> bool:
    """Whether every whole-word occurrence of ``word`` in ``text`` opens the text or a sentence."""
    start = text.find(word)
    while start >= 0:
        end = start + len(word)
        whole = (start == 0 or not _is_word_char(text[start - 1])) and (end == len(text)
                                                                        or not _is_word_char(text[end]))
        if whole:
            before = start - 1
            while before >= 0 and text[before].isspace():
                before -= 1
            if before >= 0 and text[before] not in '.!?"“(':
                return False
        start = text.find(word, max(end, start + 1) if whole else start + 1)
    return True


def _is_word_char(char: str) -> bool:
    """What a regular expression's ``\\w`` matches."""
    return char.isalnum() or char == "_"


def _sentence_names(sentence: str, passage: PassageView) -> tuple[str, ...]:
    """The entities ``sentence`` of ``passage`` names, in order: no number or date, no common word, no adjective,
    not what the passage is about."""
    names = []
    for span in entity_spans(sentence):
        name = clean_name(span)
        if is_number_or_date(name) or len(normalize(name)) < MIN_NAME_CHARS:
            continue
        if name == name.lower() or (" " not in name and _only_sentence_initial(name, passage.text)):
            continue  # a quoted common word, or a capitalised sentence opener such as "Since"
        if is_modifier(sentence, name):
            continue  # "an American thriller film": an adjective, not an entity to follow
        if not passage.is_about(name):
            names.append(name)
    return tuple(names)


def _new_entities(passage: PassageView, position: int, skip: list[str]) -> list[str]:
    """The entities sentence ``position`` of ``passage`` names that match no ``skip`` name, one per thing named."""
    new: list[str] = []
    for name in passage.names_in(position):
        if any(names_match(name, other) for other in skip):
            continue
        if not any(names_match(name, seen) for seen in new):
            new.append(name)
    return new


def bridge_sentence(query_stems: set[str], passage: PassageView, skip: Iterable[str]) -> tuple[str, list[str]]:
    """The passage's sentence that shares most query stems and names new entities (else its first sentence, where
    an encyclopedic passage names what its subject is linked to), and those entities."""
    skip = list(skip)
    # The passage's own name is in most of its sentences: it cannot tell which sentence answers the query.
    query_stems = query_stems - stems(passage.subject)
    scored = []
    for position, sentence_stems in enumerate(passage.sentence_stems):
        overlap = len(sentence_stems & query_stems)
        if overlap:
            scored.append((-overlap, position))
    for position in [position for _, position in sorted(scored)] + [0][: len(passage.sentences)]:
        new = _new_entities(passage, position, skip)
        if new:
            return passage.sentences[position], new
    return "", []


_WORD_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9'’\-]*")


def relation_order(sentence: str, entities: Sequence[str], relation_stems: set[str]) -> list[str]:
    """``entities`` of ``sentence``, those closest after a word whose stem is in ``relation_stems`` first (English
    puts a relation before its object: "founded by X"); the others follow in sentence order."""
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
    """The entities ``source`` leads to for ``query``, best first; ``skip`` names are not bridges."""
    query_stems = stems(query)
    sentence, entities = bridge_sentence(query_stems, source, [*query_entities(query), *skip])
    return relation_order(sentence, entities, query_stems - stems(source.subject))


def link_passages(query: str, sources: Sequence[PassageView], pool: Sequence[PassageView]) -> dict[str, list[str]]:
    """``{source id: [linked passage id]}``: each source linked to the pool passage its bridge leads to, hop
    after hop.

    The first bridge entity (:func:`bridge_targets`) that some pool passage is about links the source to the first
    such passage in pool order (``pool`` is best first); that passage is the next hop's source. A passage is
    linked at most once, and no passage links to a source.
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


@dataclass(frozen=True)
class ChainStep:
    """One hop of an evidence chain: the ``sentence`` of passage ``source`` (id, ``title``) states the relation
    words ``matched`` and leads to ``entity`` and the passage about it, ``target`` (id, ``target_title``; empty:
    none found); ``weight`` is the product of the hops' matches up to here."""

    hop: int
    source: str
    title: str
    sentence: str
    entity: str
    matched: tuple[str, ...]
    weight: float
    target: str = ""
    target_title: str = ""


def _chain_sentence(wanted: set[str], passage: PassageView,
                    skip: list[str]) -> tuple[str, list[str], frozenset[str]]:
    """The sentence sharing most relation stems with ``wanted`` that names new entities (else the first sentence
    that does), those entities (one whose name holds a matched word, "network" in "Cartoon Network", then the one
    right after a matched relation word, first) and the stems it matched."""
    wanted = wanted - relation_stems(passage.subject)  # the passage's own name says nothing of the relation
    found = [(relations & wanted, position) for position, relations in enumerate(passage.sentence_relations)]
    for matched, position in sorted(found, key=lambda item: (-len(item[0]), item[1])):
        new = _new_entities(passage, position, skip)
        if new:
            sentence = passage.sentences[position]
            ordered = relation_order(sentence, new, matched)
            return sentence, sorted(ordered, key=lambda name: not relation_stems(name) & matched), matched
    return "", [], frozenset()


def follow_chain(query: str, starts: Sequence[PassageView], about: Callable[[str], PassageView | None],
                 hops: int) -> list[ChainStep]:
    """The evidence chain from ``starts`` (the passages about what the query names): in each passage, the sentence
    stating most of the query's relation words still open leads to the entity it introduces; ``about(entity)``, the
    passage about that entity (None: the chain ends there), is the next hop's source, for ``hops`` hops.

    A hop's match is ``(1 + matched) / (1 + open)`` relation stems (a first sentence matching none still links, as
    an encyclopedic passage names there what its subject is linked to), and the words it matched are closed for the
    hops after it; the chain ends where none is open. Each passage is a source once; an entity already named or
    followed is never followed again.
    """
    named = query_entities(query)
    relation = relation_stems(query) - {s for name in named for s in relation_stems(name)}
    followed = list(named)
    seen = {p.id for p in starts}
    frontier = [(p, relation, 1.0) for p in starts]
    steps: list[ChainStep] = []
    for hop in range(1, hops + 1):
        next_frontier = []
        for source, open_stems, weight in frontier:
            sentence, entities, matched = _chain_sentence(open_stems, source, followed)
            if not open_stems or not entities:  # the question's relation is all stated: the chain is complete
                continue
            weight *= (1 + len(matched)) / (1 + len(open_stems))
            followed.append(entities[0])
            target = about(entities[0])
            steps.append(ChainStep(hop, source.id, source.title, sentence, entities[0], tuple(sorted(matched)),
                                   weight, *((target.id, target.title) if target is not None else ())))
            if target is not None and target.id not in seen:
                seen.add(target.id)
                next_frontier.append((target, open_stems - matched, weight))
        frontier = next_frontier
    return steps


# -- first page ------------------------------------------------------------------------------------------------------


#: How many passages of a ranking the first page is drawn from.
FIRST_PAGE_SIZE = 5


@dataclass(frozen=True)
class FirstPage:
    """A ranking in first-page order: ``order`` (every position, the first page reordered), ``lead`` (the
    positions of passages about an entity the question names) and ``hops`` (where the first lead passage leads)."""

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
    """The first-page order of ``passages`` (best first): the lead passages (about an entity the query names; else
    the first passage), then the passages the first of them leads to, then the rest. Only the first ``size`` take
    part (0: none) and none leaves them, so recall at ``size`` never changes.

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


# -- fusion ----------------------------------------------------------------------------------------------------------


DEFAULT_RRF_K = 60


def reciprocal_rank_fusion(ranked_lists: Iterable[Sequence[H]], k: int = DEFAULT_RRF_K, top_n: int | None = None,
                           weights: Sequence[float] | None = None) -> list[tuple[H, float]]:
    """``(id, score)`` pairs, best first, of ranked lists of ids fused by Reciprocal Rank Fusion.

    An id repeated inside one list counts once, at its first rank. ``k`` is the RRF constant (60 in the paper),
    ``top_n`` keeps the best (all when None), ``weights`` has one weight per list (all 1 when None). Ties are
    broken by the id's best rank in any list, then by first appearance, so the result is deterministic.

    Raises:
        ValueError: ``k``, ``top_n`` or a weight is negative, or ``weights`` and the lists differ in number.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if top_n is not None and top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    lists = list(ranked_lists)
    weights = [1.0] * len(lists) if weights is None else weights
    if len(weights) != len(lists):
        raise ValueError(f"{len(weights)} weights for {len(lists)} ranked lists")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    contributions: dict[H, list[float]] = {}
    best_rank: dict[H, int] = {}
    for ranking, weight in zip(lists, weights, strict=True):
        seen: set[H] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            contributions.setdefault(item, []).append(weight / (k + rank))
            best_rank[item] = min(best_rank.get(item, rank), rank)
    # fsum is exactly rounded, so a score does not depend on the order of the lists (plain + would).
    scores = {item: math.fsum(parts) for item, parts in contributions.items()}
    first_seen = {item: position for position, item in enumerate(scores)}
    fused = sorted(scores.items(), key=lambda pair: (-pair[1], best_rank[pair[0]], first_seen[pair[0]]))
    return fused if top_n is None else fused[:top_n]


def anchored_fusion(anchor: Sequence[H], reached_from: Mapping[H, Sequence[H]] | None = None, rest: Iterable[H] = (),
                    top_n: int | None = None) -> list[H]:
    """Fuse around the original query's own ranking (``anchor``) without diluting it.

    The anchor keeps its order; right after each placed id come the ids reached from it (``reached_from[id]``,
    best first), depth first, so a chain of hops sits under the passage it starts from. Then come the ids of
    ``rest`` in order, each again followed by what it reaches. Every id appears once, at its first place;
    ``top_n`` keeps the first (all when None).

    Raises:
        ValueError: ``top_n`` is negative.
    """
    if top_n is not None and top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    reached_from = reached_from or {}
    fused: list[H] = []
    placed: set[H] = set()
    for start in [*anchor, *rest]:
        stack = [start]
        while stack:
            item = stack.pop()
            if item in placed:
                continue
            placed.add(item)
            fused.append(item)
            stack.extend(reversed(list(reached_from.get(item, ()))))
    return fused if top_n is None else fused[:top_n]
