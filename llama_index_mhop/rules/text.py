"""Queries, names and text: the one place for how the package checks a query, reads English text and matches names.

Every LLM-free strategy reads text through this module, so a rule (what a possessive is, what a title names, which
words carry no meaning) is written once. Tuned for encyclopedic English: entities are runs of capitalised words
(allowing connectors such as "of" inside a run), quoted titles, and years. The name keys, loosest first:
:func:`normalize` (how two strings are compared as names), :func:`clean_name` then :func:`normalize` (a name as a
passage or an LM writes it), :func:`entity_key` (a graph entity node's key), :func:`normalize_title` (HoVer's
title comparison). Untrusted text shown to a person goes through :func:`escape_controls`; :func:`stable_id` is
the id of a text (a passage's, a fact's).
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
import string
import threading
import unicodedata
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import Stemmer

__all__ = ["MAX_QUERY_CHARS", "MIN_NAME_CHARS", "MONTHS", "NON_ENTITY_CAPS", "STOPWORDS", "check_query", "clean_name",
           "content_terms", "drop_possessives", "entity_key", "entity_spans", "escape_controls", "first_sentence",
           "fold_accents", "is_modifier", "is_number_or_date", "mentions", "names_match", "normalize",
           "normalize_title", "query_entities", "relation_stems", "relation_words", "sentences", "stable_id", "stem",
           "stems", "strip_parenthetical", "strip_possessive", "title_entities", "unique_names", "years"]

logger = logging.getLogger(__name__)

# -- word lists ------------------------------------------------------------------------------------------------------

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
#: Month names, lowercase: a date is not an entity to follow.
MONTHS = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
#: Longer queries are cut here (a query is a question, not a document); the cut is logged.
MAX_QUERY_CHARS = 4000
#: Names shorter than this (normalised) never match: they are initials or noise.
MIN_NAME_CHARS = 3

_CONNECTORS = frozenset({"of", "the", "de", "da", "del", "du", "von", "van", "der", "la", "le", "for", "on"})
# Function words that cannot be the noun a nationality-like adjective modifies.
_FUNCTION_WORDS = frozenset(
    "a an the is was are were be been of in on at to for by with from and or as that which who whom whose "
    "what when where why how has have had do does did its it his her their".split()
)
_ADJECTIVE_ENDINGS = ("an", "ish", "ese", "ic")
_MONTH_SET = frozenset(MONTHS)

_TOKEN = re.compile(r"[\w][\w'’.\-]*|\"|“|”|&")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,80})[\"”]")
_YEAR = re.compile(r"\b(1[0-9]{3}|20[0-9]{2})s?\b")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"“(])")
_WORD = re.compile(r"[a-z0-9][a-z0-9'\-]*")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_TRAILING_POSSESSIVE = re.compile(r"['’]s?$")
_POSSESSIVE = re.compile(r"(?<=\w)['’]s\b")
# No leading \s*: a run of spaces before no parenthesis would be rescanned from each of its positions.
_TRAILING_PARENTHETICAL = re.compile(r"\([^()]*\)\s*$")
_LEADING_ARTICLE = re.compile(r"^(?:the|a|an) ")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
_TITLE_SEPARATOR = " | "

# -- queries and shown text ------------------------------------------------------------------------------------------


def check_query(query: Any) -> str:
    """The query as a clean string: control characters replaced by spaces, cut at :data:`MAX_QUERY_CHARS`
    (logged at WARNING). The one check of every entry point that takes a query.

    Raises:
        TypeError: the query is not a string.
        ValueError: the query is empty or only white space.
    """
    if not isinstance(query, str):
        raise TypeError(f"a query must be a string, got {type(query).__name__}")
    cleaned = "".join(ch if ch.isprintable() or ch in "\n\t" else " " for ch in query).strip()
    if not cleaned:
        raise ValueError("the query is empty: ask a question or state a claim")
    if len(cleaned) > MAX_QUERY_CHARS:
        logger.warning("the query has %d characters: only its first %d are used", len(cleaned), MAX_QUERY_CHARS)
    return cleaned[:MAX_QUERY_CHARS]


def _visible(char: str) -> str:
    # Cc: C0/C1 controls and DEL (ESC, NUL, BEL...); Cf: format characters (bidi overrides, zero-width).
    if unicodedata.category(char) in ("Cc", "Cf"):
        return char.encode("unicode_escape").decode("ascii")
    return char


def stable_id(*parts: str) -> str:
    """A deterministic id from content: the same parts always give the same id."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def escape_controls(text: object) -> str:
    """``text`` (as ``str``) with every control and format character written as its escape (``"\\x1b"``): untrusted
    text in a log line or on a terminal cannot move the cursor, retitle the window or reorder what is shown."""
    text = str(text)
    if text.isprintable():  # the common case, checked in C
        return text
    return "".join(_visible(char) for char in text)


# -- keys and names --------------------------------------------------------------------------------------------------


def normalize(text: str) -> str:
    """Lowercase, drop punctuation and collapse white space: the key used to match names."""
    return " ".join(_ASCII_WORD.findall(text.lower()))


def fold_accents(text: str) -> str:
    """``"Alû"`` -> ``"Alu"``: compatibility-decomposed, combining marks dropped."""
    if text.isascii():  # most names: nothing to decompose or drop
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


def strip_possessive(name: str) -> str:
    """A name without its trailing possessive: ``"Delbert Mann's"`` -> ``"Delbert Mann"``."""
    return _TRAILING_POSSESSIVE.sub("", name.strip()).strip()


def drop_possessives(text: str) -> str:
    """Every ``'s`` possessive dropped: ``"The Ancestor's birthday"`` -> ``"The Ancestor birthday"``."""
    return _POSSESSIVE.sub("", text)


def strip_parenthetical(title: str) -> str:
    """A title without its trailing parenthetical: ``"Lover Come Back (1961 film)"`` -> ``"Lover Come Back"``."""
    found = _TRAILING_PARENTHETICAL.search(title)
    return title[: found.start()].rstrip() if found else title


def clean_name(name: str) -> str:
    """A name as an LM or a passage writes it, made comparable: HTML entities decoded, possessive dropped."""
    return strip_possessive(html.unescape(name))


def entity_key(name: str) -> str:
    """The name an entity node is keyed by: accents folded, lowercase, words only, no article, no possessive."""
    return _LEADING_ARTICLE.sub("", normalize(strip_possessive(fold_accents(name))))


def normalize_title(title: str) -> str:
    """A title as HoVer's ``discrete_retrieval_eval`` compares it: the first segment of ``"title | text"``, NFD,
    lower-cased, without ASCII punctuation or a/an/the, whitespace collapsed.

    Raises:
        ValueError: ``title`` is not a string.
    """
    if not isinstance(title, str):
        raise ValueError(f"title must be a string, got {type(title).__name__}")
    head = title.split(_TITLE_SEPARATOR, 1)[0]
    text = unicodedata.normalize("NFD", head).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def title_entities(title: str) -> list[str]:
    """The entity names a passage's title stands for: the title without its parenthetical, and a comma title's head
    (``"Laie, Hawaii"`` also names ``"Laie"``)."""
    title = (title or "").strip()
    if not title:
        return []
    base = strip_parenthetical(title).strip() or title
    names = [base]
    head = base.split(",")[0].strip()
    if head != base and entity_key(head):
        names.append(head)
    return [n for n in names if entity_key(n)]


@lru_cache(maxsize=8192)
def _padded(text: str) -> str:
    return f" {normalize(text)} "


def names_match(a: str, b: str) -> bool:
    """Whether two names refer to the same thing: equal, or one a whole-word part of the other, normalised
    (``"Leland"`` matches ``"Leland, North Carolina"``); names under :data:`MIN_NAME_CHARS` never match."""
    x, y = normalize(clean_name(a)), normalize(clean_name(b))
    if len(x) < MIN_NAME_CHARS or len(y) < MIN_NAME_CHARS:
        return False
    return x == y or f" {x} " in f" {y} " or f" {y} " in f" {x} "


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name`` (whole words, normalised). A one-word name must appear capitalised."""
    cleaned = clean_name(name)
    key = normalize(cleaned)
    if len(key) < MIN_NAME_CHARS or f" {key} " not in _padded(text):
        return False
    if " " in key:
        return True
    return re.search(rf"(?<!\w){re.escape(cleaned)}(?!\w)", html.unescape(text)) is not None


def is_number_or_date(name: str) -> bool:
    """Whether a name is only digits or a month: a value, not an entity to follow."""
    key = normalize(name)
    return not key or key.replace(" ", "").isdigit() or key in _MONTH_SET


# -- spans -----------------------------------------------------------------------------------------------------------


def _is_capitalised(token: str) -> bool:
    return token[:1].isupper() or (token[:1].isdigit() and any(c.isalpha() for c in token))


@lru_cache(maxsize=4096)
def entity_spans(text: str) -> tuple[str, ...]:
    """Entity mentions in order of first appearance, without duplicates: runs of capitalised tokens, possibly
    joined by connectors ("Bank of America"), quoted titles and years; lone question or function words are not."""
    found = [match.group(1).strip() for match in _QUOTED.finditer(text)]
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
    return tuple(unique_names(found))


def unique_names(names: Iterable[str], key: Callable[[str], str] = normalize) -> list[str]:
    """The names in order, each once by ``key`` (:func:`normalize` by default); names with an empty key dropped."""
    seen: set[str] = set()
    unique = []
    for name in names:
        name_key = key(name)
        if name_key and name_key not in seen:
            seen.add(name_key)
            unique.append(name)
    return unique


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


def is_modifier(text: str, span: str) -> bool:
    """A one-word nationality-like adjective (ending -an, -ish, -ese, -ic) before a noun ("British comedy"): a
    weak search anchor."""
    if " " in span.strip() or not span.lower().endswith(_ADJECTIVE_ENDINGS):
        return False
    match = re.search(rf"(?<!\w){re.escape(span)}\s+([a-z][\w-]*)", text)
    return match is not None and match.group(1) not in _FUNCTION_WORDS and len(match.group(1)) > 2


def query_entities(query: str) -> list[str]:
    """The query's entities, most specific first: named spans, then one-word modifiers; no years or numbers, no
    span inside a longer one, no possessive."""
    spans = [s for s in (clean_name(s) for s in entity_spans(query)) if not is_number_or_date(s)]
    kept = [s for s in spans if not any(s != t and f" {normalize(s)} " in f" {normalize(t)} " for t in spans)]
    kept = list(dict.fromkeys(kept))
    named = [s for s in kept if not is_modifier(query, s)]
    return named + [s for s in kept if s not in named]


# -- stems and sentences ---------------------------------------------------------------------------------------------

# One stemmer for the process: Snowball's English (Porter2) rules in PyStemmer. An instance keeps state while it
# stems and must not be called from two threads at once, so calls take the lock (only for words not cached).
_ENGLISH_STEMMER = Stemmer.Stemmer("english")
_STEMMER_LOCK = threading.Lock()


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The Snowball English (Porter2) stem of ``word``, lowercased: "directed" and "directing" are "direct"."""
    with _STEMMER_LOCK:
        return _ENGLISH_STEMMER.stemWord(word.lower())


def stems(text: str) -> set[str]:
    """The stems of the content words of ``text``."""
    return {stem(w) for w in content_terms(text)}


def relation_stems(text: str) -> set[str]:
    """:func:`stems`, an agent noun as its verb ("founder", "director": "found", "direct"), so that a question's
    noun meets the verb a passage states the relation with ("founded by", "directed by")."""
    # Both sides go through this rule, so a false root ("number": "numb") only ever meets itself.
    return {s[:-2] if len(s) > 5 and s.endswith(("er", "or")) else s for s in stems(text)}


def sentences(text: str) -> list[str]:
    """Split a passage into sentences (a light rule: end punctuation followed by a capital or a quote)."""
    return [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]


def first_sentence(text: str) -> str:
    """The passage's first sentence (the whole text when it has no sentence break)."""
    return (sentences(text) or [""])[0]
