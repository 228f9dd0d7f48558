"""Counters of what this process's components have done (documents indexed, queries served, LM fallbacks), which
an app reads with :func:`process_counters` (``mhop status`` prints them) without wiring anything. A count kept on
a query's path stays where it happens and is registered here (:func:`add_counter_source`)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Mapping

__all__ = ["add_counter_source", "count", "process_counters", "reset_process_counters"]

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_sources: list[tuple[Callable[[], Mapping[str, int]], Callable[[], None]]] = []


def count(name: str, amount: int = 1) -> None:
    """Add ``amount`` to the counter ``name`` (``"documents_indexed"``, ``"lm_fallbacks.perspectives"``)."""
    with _lock:
        _counts[name] += amount


def add_counter_source(read: Callable[[], Mapping[str, int]], reset: Callable[[], None]) -> None:
    """Register counters kept elsewhere: ``read()`` gives them by name, ``reset()`` sets them back to zero."""
    with _lock:
        _sources.append((read, reset))


def process_counters() -> dict[str, int]:
    """A snapshot of every counter of this process, by name."""
    with _lock:
        counts = Counter(_counts)
        for read, _ in _sources:
            counts.update(read())
        return dict(sorted(counts.items()))


def reset_process_counters() -> None:
    """Set every counter back to zero (for tests and long-running apps that report per interval)."""
    with _lock:
        _counts.clear()
        for _, reset in _sources:
            reset()
