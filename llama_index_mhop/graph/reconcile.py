"""How far a graph index has drifted from the passages it stands on.

A graph index derives everything (entities, facts, edges) from its passages, and its passages live in Chroma: in
its own collection, or read in place from a vector index's collection (the source). Whatever changed the source
(the package's sync, LlamaIndex's ``refresh_ref_docs``/``delete_ref_doc``/``insert``, an ``IngestionPipeline``,
another process, a sync killed half-way), the collections are the truth and the graph follows them. Passage ids
name their content, so comparing ids is enough: a passage whose id is in neither collection is gone (deleted, or
an old version of an edited document), and a source passage whose id the graph lacks is new.

Reconciling (``HippoGraphIndex.reconcile``) removes the gone passages and extracts the new ones, so it converges
whatever an earlier run did or did not finish, and running it again changes nothing.
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
    """Compare the graph's passage ids with its own passage collection and, if it reads one in place, the source.

    Args:
        graph_passages: the passage ids the graph holds.
        own: the graph index's own passage collection.
        source: the vector index collection it reads in place, or None.
    """
    held = set(graph_passages)
    source_ids = set(all_ids(source)) if source is not None else set()
    outside_source = [p for p in held if p not in source_ids]
    present = existing_ids(own, outside_source)
    gone = sorted(p for p in outside_source if p not in present)
    new = sorted(source_ids - held)
    return Drift(tuple(gone), tuple(new))
