"""Counters of what this process's components have done (documents indexed, queries served, LM fallbacks), which
an app reads with :func:`process_counters` (``mhop status`` prints them) without wiring anything."""

from __future__ import annotations

import threading
from collections import Counter

__all__ = ["count", "process_counters", "reset_process_counters"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()


def count(name: str, amount: int = 1) -> None:
    """Add ``amount`` to the counter ``name`` (``"queries_served.RRFFusionRetriever"``, ``"documents_indexed"``)."""
    with _lock:
        _counts[name] += amount


def process_counters() -> dict[str, int]:
    """A snapshot of every counter of this process, by name."""
    with _lock:
        return dict(sorted(_counts.items()))


def reset_process_counters() -> None:
    """Set every counter back to zero (for tests and long-running apps that report per interval)."""
    with _lock:
        _counts.clear()
