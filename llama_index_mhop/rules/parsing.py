"""Defensive parsers of LM answers (``"85%"``, ``"high"``, ``"[3, 1, 2]"``, a numbered list): any string in, a
valid value out, or :class:`LMOutputError`, on which :class:`~llama_index_mhop.lm.steps.LMStep` uses the step's
LLM-free strategy. Nothing here evaluates LM text: JSON is read with ``json.loads`` only."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["CONFIDENCE_WORDS", "MAX_ITEM_CHARS", "MAX_LIST_ITEMS", "LMOutputError", "parse_confidence", "parse_ranking",
           "parse_string_list", "parse_queries"]


class LMOutputError(ValueError):
    """An LM answer that cannot be turned into a usable value."""


#: Verbal confidence levels and the score each stands for (checked longest phrase first).
CONFIDENCE_WORDS: dict[str, int] = {
    "very high": 95, "very low": 10, "certain": 100, "complete": 100, "full": 100, "high": 85, "fairly high": 75,
    "moderate": 60, "medium": 60, "fair": 50, "partial": 50, "low": 30, "none": 0, "zero": 0,
}
#: An item of an LM's list (a generated query, a gap) longer than this is cut: an LM that pastes a passage is
#: not writing a search query. (A user's query is checked by :func:`llama_index_mhop.rules.text.check_query`.)
MAX_ITEM_CHARS = 300
#: Items of a list answer read at most: a step asks for a few queries or names, not thousands.
MAX_LIST_ITEMS = 100

_UNITS = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen "
    "eighteen nineteen".split())}
_TENS = {word: 10 * value for value, word in enumerate(
    "twenty thirty forty fifty sixty seventy eighty ninety".split(), 2)}
_NUMBER = r"-?\d+(?:\.\d+)?|-?\.\d+"
# A number and what may follow it (a ratio's denominator, a percent sign). The tails are optional, so a match
# never fails after its number and never backtracks into it: one pass over the text (a pattern that *needs* a
# tail, searched, backtracks through every long digit run: quadratic).
_SCORE = re.compile(rf"({_NUMBER})(?:\s*(?:/|out of)\s*(\d+(?:\.\d+)?)|\s*(%|percent\b))?", re.IGNORECASE)
_DIGIT_WORDS = "|".join(k for k in _UNITS if _UNITS[k] < 10)
_NUMBER_WORDS = re.compile(
    rf"\b(?:((?:one\s+)?hundred)|({'|'.join(_TENS)})(?:[\s-]+({_DIGIT_WORDS}))?|({'|'.join(_UNITS)}))\b",
    re.IGNORECASE,
)
_INT = re.compile(r"-?\d+")
_BULLET = re.compile(r"^\s*(?:[-*•]+|\(?\d{1,2}[.)\]:]|query\s*\d*\s*[:.)-])\s*", re.IGNORECASE)


def _as_text(value: Any) -> str:
    if value is None:
        raise LMOutputError("the LM gave no answer")
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return json.dumps([v if isinstance(v, (str, int, float)) else str(v) for v in value])
    raise LMOutputError(f"expected text, got {type(value).__name__}")


def _json_object(text: str) -> dict[str, Any]:
    try:
        loaded = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting overflows the decoder
        raise LMOutputError(f"broken JSON object: {text[:80]!r}") from exc
    if not isinstance(loaded, dict):
        raise LMOutputError(f"not a JSON object: {text[:80]!r}")
    return loaded


def _json_object_field(text: str, keys: Sequence[str]) -> str:
    # A JSON object answers with the value of the first of ``keys`` it has; one with none of them is no answer.
    if not text.lstrip().startswith("{"):
        return text
    loaded = _json_object(text)
    for key in keys:
        if key in loaded:
            return _as_text(loaded[key])
    raise LMOutputError(f"a JSON object without {' or '.join(map(repr, keys))}: {text[:80]!r}")


def _words_to_number(text: str) -> float | None:
    match = _NUMBER_WORDS.search(text)
    if match is None:
        return None
    hundred, tens, unit, single = match.groups()
    if hundred:
        return 100.0
    if tens:
        return float(_TENS[tens.lower()] + (_UNITS[unit.lower()] if unit else 0))
    return float(_UNITS[single.lower()])


def _numeric_confidence(text: str) -> float | None:
    # The first ratio, else the first percentage, else the first plain number, as a 0-100 score; one pass.
    percent: float | None = None
    plain: str | None = None
    for match in _SCORE.finditer(text):
        number, denominator, percent_sign = match.groups()
        if denominator is not None:
            if float(denominator) <= 0:
                raise LMOutputError(f"confidence {text[:80]!r} has a zero denominator")
            return 100.0 * float(number) / float(denominator)
        if percent_sign is not None and percent is None:
            percent = float(number)
        if plain is None:
            plain = number
    if percent is not None or plain is None:
        return percent
    score = float(plain)
    return score * 100.0 if "." in plain and 0.0 <= score <= 1.0 else score


def parse_confidence(value: Any) -> int:
    """An LM's confidence answer as an integer from 0 to 100.

    First match wins: a ratio (``"8/10"``), a percentage (``"85%"``), a plain number (``"85"``; ``"0.85"`` with a
    decimal point is a fraction), a number in words (``"eighty-five"``), a verbal level (:data:`CONFIDENCE_WORDS`);
    a JSON object is read from its ``"confidence"`` (or ``"score"``). Out of range is rejected, not clamped: the LM
    misread the scale.

    Raises:
        LMOutputError: the answer is missing, empty, holds no confidence, or is out of range."""
    text = _json_object_field(_as_text(value), ("confidence", "score")).strip()
    if not text:
        raise LMOutputError("empty confidence answer")
    score = _numeric_confidence(text)
    if score is None:
        score = _words_to_number(text)
    if score is None:
        lowered = " ".join(re.findall(r"[a-z]+", text.lower()))
        phrases = sorted(CONFIDENCE_WORDS, key=len, reverse=True)
        score = next((float(CONFIDENCE_WORDS[p]) for p in phrases if re.search(rf"\b{p}\b", lowered)), None)
    if score is None or math.isnan(score):
        raise LMOutputError(f"no confidence in {text[:80]!r}")
    if not 0.0 <= score <= 100.0:
        raise LMOutputError(f"confidence {score:g} is outside 0-100")
    return int(round(score))


def parse_ranking(value: Any, n: int, prior: Sequence[int] | None = None,
                  one_based: bool | None = None) -> list[int]:
    """An LM's ranking of ``n`` passages (indices, best first) as a complete permutation of ``range(n)``.

    Every integer is read in order (``"[3, 0, 2]"``, ``"3 > 0 > 2"``); out-of-range and repeated ones are dropped,
    and the passages left out follow in their ``prior`` order (default ``0..n-1``). Indices are 0-based; with
    ``one_based`` None an answer that names ``n`` and never ``0`` is read as 1-based. A JSON object is read from
    its ``"ranking"`` (or ``"order"``, ``"indices"``).

    Raises:
        LMOutputError: the answer names no valid index at all."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    order = list(range(n)) if prior is None else list(prior)
    if sorted(order) != list(range(n)):
        raise ValueError(f"prior must be a permutation of range({n}), got {list(prior or [])[:10]}")
    text = _json_object_field(_as_text(value), ("ranking", "order", "indices"))
    # An index has a few digits; a longer run is noise (and int() refuses runs past 4,300 digits).
    numbers = [int(m.group(0)) for m in _INT.finditer(text) if len(m.group(0).lstrip("-+")) <= 9]
    if n == 0:
        return []
    if one_based is None:
        one_based = bool(numbers) and n in numbers and 0 not in numbers
    if one_based:
        numbers = [x - 1 for x in numbers]
    ranked = list(dict.fromkeys(index for index in numbers if 0 <= index < n))
    if not ranked:
        raise LMOutputError(f"no passage index in 0..{n - 1} in {text[:80]!r}")
    named = set(ranked)
    return ranked + [index for index in order if index not in named]


def parse_string_list(value: Any, max_items: int | None = None, max_chars: int = MAX_ITEM_CHARS) -> list[str]:
    """A list of short strings from an LM answer (``[]`` for an empty one or ``"none"``): a JSON array's strings,
    a JSON object's strings, else one item per line (bullets stripped), else items split at semicolons. Quotes
    and duplicates (case-insensitive) are dropped, items cut to ``max_chars``, the list to ``max_items``; only the
    first :data:`MAX_LIST_ITEMS` are read.

    Raises:
        LMOutputError: the answer is not text, or is a JSON object that does not decode."""
    text = _as_text(value).strip()
    items: list[Any]
    if text.startswith("{"):
        values = _json_object(text).values()
        items = [item for v in values for item in (v if isinstance(v, list) else [v]) if isinstance(item, str)]
    elif text.startswith("["):
        try:
            loaded = json.loads(text)
        except (json.JSONDecodeError, RecursionError):  # deep nesting overflows the decoder
            loaded = None
        if isinstance(loaded, list):
            items = [item for item in loaded if isinstance(item, str)]
        else:
            items = re.findall(r"[\"']([^\"']+)[\"']", text) or [text.strip("[]")]
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        items = lines if len(lines) > 1 else (text.split(";") if ";" in text else lines)
    firsts: dict[str, str] = {}  # by lowercased item: the item as first written
    for item in items[:MAX_LIST_ITEMS]:
        cleaned = _BULLET.sub("", item).strip().strip("\"'“”‘’`").strip()
        cleaned = re.sub(r"\s+", " ", cleaned)[:max_chars].strip()
        firsts.setdefault(cleaned.lower(), cleaned)
    out = [item for key, item in firsts.items()
           if item and key not in {"none", "n/a", "nothing", "null", "[]"}]
    return out if max_items is None else out[:max_items]


def parse_queries(value: Any, min_count: int = 1, max_count: int = 3,
                  exclude: Sequence[str] = ()) -> list[str]:
    """At most ``max_count`` search queries from an LM answer (:func:`parse_string_list`), those already issued
    (``exclude``, case-insensitive) dropped.

    Raises:
        LMOutputError: fewer than ``min_count`` usable queries remain."""
    if max_count < 1 or min_count < 0 or min_count > max_count:
        raise ValueError(f"need 0 <= min_count <= max_count and max_count >= 1, got {min_count}, {max_count}")
    issued = {q.strip().lower() for q in exclude}
    queries = [q for q in parse_string_list(value) if q.lower() not in issued][:max_count]
    if len(queries) < min_count:
        raise LMOutputError(f"expected at least {min_count} new queries, got {len(queries)} "
                            f"from {str(value)[:80]!r}")
    return queries
