"""LLM-free text analysis shared by the LLM-free strategies: entity spans, years, relation words, sentences.

Tuned for encyclopedic English (Wikipedia-style passages and questions about them): entities are runs of
capitalised words (allowing short connectors such as "of" or "the" inside a run), quoted titles, and years.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = [
    "NON_ENTITY_CAPS",
    "STOPWORDS",
    "content_terms",
    "entity_spans",
    "first_sentence",
    "normalize",
    "relation_words",
    "sentences",
    "years",
]

STOPWORDS = frozenset(
    """a about above after again against all also am an and any are as at be because been before being below
    between both but by can could did do does doing down during each either few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me more most my
    myself neither no nor not now of off on once only or other our ours ourselves out over own same she should
    so some such than that the their theirs them themselves then there these they this those through to too
    under until up very was we were what when where which while who whom whose why will with would you your
    yours yourself yourselves one two many much well first also same which whom whose known""".split()
)
# Capitalised words that start questions or sentences but are not entities on their own.
NON_ENTITY_CAPS = frozenset(
    """A An And Are As At Both But By Did Do Does During For From He Her His How I If In Is It Its Not Of On
    Or She So That The Their There These They This Those To Was We Were What When Where Which While Who Whom
    Whose Why Will With Would Yes No Name Find Give Identify Tell List""".split()
)
_CONNECTORS = frozenset({"of", "the", "de", "da", "del", "du", "von", "van", "der", "la", "le", "for", "on"})

_TOKEN = re.compile(r"[\w][\w'’.\-]*|\"|“|”|&")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,80})[\"”]")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")
_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")


def normalize(text: str) -> str:
    """Lowercase, drop punctuation and collapse white space: the key used to match names."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _is_capitalised(token: str) -> bool:
    return token[:1].isupper() or (token[:1].isdigit() and any(c.isalpha() for c in token))


@lru_cache(maxsize=4096)
def entity_spans(text: str) -> tuple[str, ...]:
    """Entity mentions in order of first appearance, without duplicates.

    A span is a run of capitalised tokens, possibly joined by lowercase connectors ("Bank of America",
    "Queen of the Night"), a quoted title, or a year. Lone question or function words ("What", "The") are not
    entities; a leading "The" is kept only inside a longer span.
    """
    found: list[str] = []
    for match in _QUOTED.finditer(text):
        found.append(match.group(1).strip())
    tokens = [(m.group(0), m.start(), m.end()) for m in _TOKEN.finditer(text)]
    i = 0
    while i < len(tokens):
        word = tokens[i][0].strip(".")
        if not word or not _is_capitalised(word):
            i += 1
            continue
        start, j, last_cap = i, i + 1, i
        while j < len(tokens):
            nxt = tokens[j][0].strip(".")
            if text[tokens[j - 1][2] : tokens[j][1]].strip():  # punctuation between the words ends the span
                break
            if nxt and _is_capitalised(nxt) and not tokens[j - 1][0].endswith("."):
                last_cap = j
                j += 1
            elif nxt.lower() in _CONNECTORS:
                k = j
                while k < len(tokens) and tokens[k][0].lower() in _CONNECTORS:
                    k += 1
                gap = text[tokens[j - 1][2] : tokens[k][1]] if k < len(tokens) else "."
                if k < len(tokens) and _is_capitalised(tokens[k][0]) and not re.search(r"[^\w\s]", gap):
                    j = k
                else:
                    break
            else:
                break
        words = [t[0] for t in tokens[start : last_cap + 1]]
        while words and words[0].strip(".") in NON_ENTITY_CAPS:
            words = words[1:]
        span = text[tokens[start + (last_cap + 1 - start - len(words))][1] : tokens[last_cap][2]] if words else ""
        span = span.rstrip(".,;:'’").strip()
        if span and span not in NON_ENTITY_CAPS and not span.isdigit():
            found.append(span)
        i = last_cap + 1
    found.extend(years(text))
    seen: set[str] = set()
    unique = []
    for span in found:
        key = normalize(span)
        if key and key not in seen:
            seen.add(key)
            unique.append(span)
    return tuple(unique)


def years(text: str) -> list[str]:
    """Four-digit years (1000-2099) and decades ("1990s"), in order, without duplicates."""
    return list(dict.fromkeys(m.group(0) for m in _YEAR.finditer(text)))


def content_terms(text: str) -> list[str]:
    """Lowercase words that are not stopwords, in order, without duplicates."""
    return list(dict.fromkeys(w for w in _WORD.findall(text.lower()) if w not in STOPWORDS and len(w) > 1))


def relation_words(text: str, entities: tuple[str, ...] | list[str] | None = None) -> list[str]:
    """Content words of ``text`` outside its entity spans: what the question asks about the entities."""
    entities = entity_spans(text) if entities is None else entities
    inside = {w for span in entities for w in content_terms(span)}
    return [w for w in content_terms(text) if w not in inside]


def sentences(text: str) -> list[str]:
    """Split a passage into sentences (a light rule: end punctuation followed by a capital or a quote)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def first_sentence(text: str) -> str:
    """The passage's first sentence (the whole text when it has no sentence break)."""
    parts = sentences(text)
    return parts[0] if parts else ""
