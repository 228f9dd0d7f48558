"""Defensive parsers of LM answers: any string in, a valid value out, or :class:`LMOutputError`.

LMs answer in free text even when asked for a number or a list: ``"85%"``, ``"high"``, ``"eighty-five"``,
``"[3, 1, 2]"``, a numbered list, a JSON array with a stray number in it. These pure functions turn such
answers into the value a step needs, or raise :class:`LMOutputError` so that
:class:`~llama_index_mhop.lm.steps.LMStep` logs a WARNING and uses the step's LLM-free strategy instead. Nothing
here evaluates LM text: JSON is read with ``json.loads`` only, everything else with regular expressions.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

__all__ = [
    "CONFIDENCE_WORDS",
    "MAX_ITEM_CHARS",
    "MAX_LIST_ITEMS",
    "LMOutputError",
    "parse_confidence",
    "parse_ranking",
    "parse_string_list",
    "parse_queries",
]


class LMOutputError(ValueError):
    """An LM answer that cannot be turned into a usable value."""


#: Verbal confidence levels and the score each stands for (checked longest phrase first).
CONFIDENCE_WORDS: dict[str, int] = {
    "very high": 95,
    "very low": 10,
    "certain": 100,
    "complete": 100,
    "full": 100,
    "high": 85,
    "fairly high": 75,
    "moderate": 60,
    "medium": 60,
    "fair": 50,
    "partial": 50,
    "low": 30,
    "none": 0,
    "zero": 0,
}
#: An item of an LM's list (a generated query, a gap) longer than this is cut: an LM that pastes a passage is
#: not writing a search query. (A user's query is checked by :mod:`llama_index_mhop.rules.validation`.)
MAX_ITEM_CHARS = 300
#: Items of a list answer read at most: a step asks for a few queries or names, not thousands.
MAX_LIST_ITEMS = 100

_UNITS = {
    "zero": 0,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "thirteen": 13,
    "fourteen": 14,
    "fifteen": 15,
    "sixteen": 16,
    "seventeen": 17,
    "eighteen": 18,
    "nineteen": 19,
}
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_NUMBER = r"-?\d+(?:\.\d+)?|-?\.\d+"
# A number and what may follow it (a ratio's denominator, a percent sign). The tails are optional, so a match
# never fails after its number and never backtracks into it: one pass over the text (a pattern that *needs* a
# tail, searched, backtracks through every long digit run: quadratic).
_SCORE = re.compile(
    rf"({_NUMBER})(?:\s*(?:/|out of)\s*(\d+(?:\.\d+)?)|\s*(%|percent\b))?", re.IGNORECASE
)
_NUMBER_WORDS = re.compile(
    r"\b(?:((?:one\s+)?hundred)|("
    + "|".join(_TENS)
    + r")(?:[\s-]+("
    + "|".join(k for k in _UNITS if _UNITS[k] < 10)
    + r"))?|("
    + "|".join(_UNITS)
    + r"))\b",
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
    """An answer that starts with ``{``, decoded; one that does not decode is not an answer."""
    try:
        loaded = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:  # deep nesting overflows the decoder
        raise LMOutputError(f"broken JSON object: {text[:80]!r}") from exc
    if not isinstance(loaded, dict):
        raise LMOutputError(f"not a JSON object: {text[:80]!r}")
    return loaded


def _json_object_field(text: str, keys: Sequence[str]) -> str:
    """An answer written as a JSON object gives the value under the first of ``keys`` it has, as text; any
    other answer is returned unchanged. A JSON object that does not decode, or has none of the keys, is not an
    answer (its numbers mean nothing)."""
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
    """The first ratio, else the first percentage, else the first plain number, as a 0-100 score; one pass."""
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

    Accepted forms, first match wins: a ratio (``"8/10"``, ``"85 out of 100"``), a percentage (``"85%"``,
    ``"85 percent"``), a plain number (``"85"``, ``"Confidence: 85."``), a number in words
    (``"eighty-five"``), a verbal level (``"high"`` = 85, ``"very low"`` = 10, see :data:`CONFIDENCE_WORDS`).
    A plain number from 0 to 1 written with a decimal point (``"0.85"``, ``"1.0"``) is read as a fraction, so
    ``"0.85"`` is 85 and ``"1"`` is 1.

    Out of range is rejected, not clamped: a score above 100 or below 0 (``"150"``, ``"-5"``) means the LM
    misread the scale, so its number says nothing reliable and the LLM-free confidence is used instead.

    An answer written as a JSON object is read from its ``"confidence"`` (or ``"score"``) value.

    Raises:
        LMOutputError: the answer is missing, empty, holds no confidence, or is out of range.
    """
    text = _json_object_field(_as_text(value), ("confidence", "score")).strip()
    if not text:
        raise LMOutputError("empty confidence answer")
    score = _numeric_confidence(text)
    if score is None:
        score = _words_to_number(text)
    if score is None:
        lowered = " ".join(re.findall(r"[a-z]+", text.lower()))
        for phrase in sorted(CONFIDENCE_WORDS, key=len, reverse=True):
            if re.search(rf"\b{phrase}\b", lowered):
                score = float(CONFIDENCE_WORDS[phrase])
                break
    if score is None or math.isnan(score):
        raise LMOutputError(f"no confidence in {text[:80]!r}")
    if not 0.0 <= score <= 100.0:
        raise LMOutputError(f"confidence {score:g} is outside 0-100")
    return int(round(score))


def parse_ranking(
    value: Any, n: int, prior: Sequence[int] | None = None, one_based: bool | None = None
) -> list[int]:
    """An LM's ranking of ``n`` passages (indices, best first) as a complete permutation of ``range(n)``.

    Every integer in the answer is read in order (``"[3, 0, 2]"``, ``"3 > 0 > 2"``, ``"Passage 3, Passage
    0"``). Out-of-range and repeated indices are dropped; the valid ones keep the LM's order, and the passages
    the LM left out follow in their ``prior`` order (default ``0..n-1``), so nothing retrieved is lost.

    Indices are 0-based as the prompt asks. When ``one_based`` is None the answer is read as 1-based only if
    it cannot be 0-based: it names ``n`` and never names ``0`` (an LM that counted from 1).

    An answer written as a JSON object is read from its ``"ranking"`` (or ``"order"``, ``"indices"``) value.

    Raises:
        LMOutputError: the answer names no valid index at all.
    """
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
    ranked: list[int] = []
    seen: set[int] = set()
    for index in numbers:
        if 0 <= index < n and index not in seen:
            seen.add(index)
            ranked.append(index)
    if not ranked:
        raise LMOutputError(f"no passage index in 0..{n - 1} in {text[:80]!r}")
    return ranked + [index for index in order if index not in seen]


def parse_string_list(
    value: Any, max_items: int | None = None, max_chars: int = MAX_ITEM_CHARS
) -> list[str]:
    """A list of short strings from an LM answer; empty answers and ``"none"`` give ``[]``.

    Reads a JSON array (non-string items dropped), a JSON object (the strings among its values and in its list
    values), else one item per line (bullets and numbering stripped), else items separated by semicolons. Items
    are stripped of quotes, empty ones dropped, duplicates removed (case-insensitively), long ones cut to
    ``max_chars``, and the list cut to ``max_items``. Only the first :data:`MAX_LIST_ITEMS` items are read.

    Raises:
        LMOutputError: the answer is not text, or is a JSON object that does not decode.
    """
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
    out: list[str] = []
    seen: set[str] = set()
    for item in items[:MAX_LIST_ITEMS]:
        cleaned = _BULLET.sub("", item).strip().strip("\"'“”‘’`").strip()
        cleaned = re.sub(r"\s+", " ", cleaned)[:max_chars].strip()
        key = cleaned.lower()
        if not cleaned or key in {"none", "n/a", "nothing", "null", "[]"} or key in seen:
            continue
        seen.add(key)
        out.append(cleaned)
    return out if max_items is None else out[:max_items]


def parse_queries(
    value: Any, min_count: int = 1, max_count: int = 3, exclude: Sequence[str] = ()
) -> list[str]:
    """Search queries from an LM answer (see :func:`parse_string_list`), at most ``max_count``.

    Too many queries are cut to the first ``max_count``; queries equal (case-insensitively) to one in
    ``exclude`` (already issued) are dropped.

    Raises:
        LMOutputError: fewer than ``min_count`` usable queries remain.
    """
    if max_count < 1 or min_count < 0 or min_count > max_count:
        raise ValueError(f"need 0 <= min_count <= max_count and max_count >= 1, got {min_count}, {max_count}")
    issued = {q.strip().lower() for q in exclude}
    queries = [q for q in parse_string_list(value) if q.lower() not in issued][:max_count]
    if len(queries) < min_count:
        raise LMOutputError(
            f"expected at least {min_count} new queries, got {len(queries)} from {str(value)[:80]!r}"
        )
    return queries
