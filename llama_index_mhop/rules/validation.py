"""Checks shared by every component's public entry points."""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["MAX_QUERY_CHARS", "check_query"]

logger = logging.getLogger(__name__)

#: Longer queries are cut here (a query is a question, not a document); the cut is logged.
MAX_QUERY_CHARS = 4000


def check_query(query: Any) -> str:
    """Return the query as a clean string, or raise a ValueError/TypeError saying what is wrong with it.

    Control characters are replaced by spaces and the text is cut at :data:`MAX_QUERY_CHARS` characters (logged
    at WARNING).

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
