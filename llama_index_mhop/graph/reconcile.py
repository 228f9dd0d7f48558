"""How far a graph index has drifted from the passages it stands on (in Chroma, the truth): passage ids name their
content, so a passage in neither collection is gone and a source passage the graph lacks is new."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..stores.chroma_batches import all_ids, existing_ids

__all__ = ["Drift", "find_drift"]


@dataclass(frozen=True)
class Drift:
    """Passages the graph holds that no collection has (``gone``) and source passages it lacks (``new``)."""

    gone: tuple[str, ...] = ()
    new: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.gone or self.new)

    def counts(self) -> dict[str, int]:
        return {"gone": len(self.gone), "new": len(self.new)}


def find_drift(graph_passages: Iterable[str], own: Any, source: Any = None) -> Drift:
    """Compare the graph's passage ids with its ``own`` passage collection and the ``source`` it reads in place
    (None: none)."""
    held = set(graph_passages)
    source_ids = set(all_ids(source)) if source is not None else set()
    outside_source = [p for p in held if p not in source_ids]
    present = existing_ids(own, outside_source)
    return Drift(tuple(sorted(p for p in outside_source if p not in present)), tuple(sorted(source_ids - held)))
