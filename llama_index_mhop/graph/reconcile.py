"""How far a graph index has drifted from the passages it stands on.

A graph index derives everything from its passages, which live in Chroma: its own collection, or a vector index's
read in place (the source). Whatever changed the source (LlamaIndex's verbs, an ``IngestionPipeline``, another
process, a sync killed half-way), the collections are the truth. Passage ids name their content, so comparing ids
is enough: a passage in neither collection is gone, and a source passage the graph lacks is new. Reconciling
(``HippoGraphIndex.reconcile``) removes the one and extracts the other, so running it again changes nothing.
"""

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
    gone = sorted(p for p in outside_source if p not in present)
    new = sorted(source_ids - held)
    return Drift(tuple(gone), tuple(new))
