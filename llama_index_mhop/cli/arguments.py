"""The ``mhop`` command's argument definitions and checks, in the standard library alone.

``mhop --help``, ``mhop <command> --help`` and an argument error are answered from this module and ``cli.py``
without importing Chroma, LlamaIndex, DSPy, torch or numpy: the commands import what they need when they run.
The names and choices kept here mirror the modules that own them (the retriever registry, the dataset loaders,
``bench.optimize``); ``tests/test_cli_start.py`` checks that they agree.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import Any

__all__ = ["SYNC_LOG_SUFFIX", "collection_name_problem", "timeout_problem"]

#: The passage index keeps the time and counts of its last sync in a collection named after it plus this suffix.
SYNC_LOG_SUFFIX = ".sync"
# Chroma's rule for a collection name: 3-512 characters from [a-zA-Z0-9._-], starting and ending with a letter or
# a digit, no two consecutive periods, not an IPv4 address.
_CHROMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")
_CHROMA_NAME_RULE = ("Chroma collection names have 3-512 characters from [a-zA-Z0-9._-], start and end with a "
                     "letter or digit, contain no '..' and are not an IPv4 address")


def _chroma_accepts(name: str) -> bool:
    if not _CHROMA_NAME.fullmatch(name) or ".." in name:
        return False
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return True
    return False


def collection_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a passage collection (a one-line message naming Chroma's rule), or None."""
    if not _chroma_accepts(name):
        return f"--collection {name!r}: {_CHROMA_NAME_RULE}"
    if not _chroma_accepts(name + SYNC_LOG_SUFFIX):
        limit = 512 - len(SYNC_LOG_SUFFIX)
        return (f"--collection {name[:40]!r}... has {len(name)} characters: at most {limit} here, since the sync log "
                f"beside it is named NAME{SYNC_LOG_SUFFIX} ({_CHROMA_NAME_RULE})")
    return None


def timeout_problem(value: Any) -> str | None:
    """Why ``value`` (``--chroma-timeout``, None for the default) is not a usable timeout, or None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return None
    return f"--chroma-timeout must be a positive finite number of seconds, got {value}"

