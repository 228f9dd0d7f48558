"""A graph index's extractions written as a HippoRAG OpenIE results file, through the index's public API.

Entities and triples are written by their keys (lowercase, as the graph keeps them): an index built from the
exported file has exactly the same graph, and HippoRAG reads it as any of its own files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from llama_index.core.schema import BaseNode, MetadataMode

from ..stores.chroma_batches import CHROMA_BATCH
from .extraction import Extraction
from .openie_file import write_openie

__all__ = ["export_openie", "index_extractions"]


def index_extractions(index: Any) -> list[tuple[str, Extraction]]:
    """(passage as ``"title\\ntext"``, extraction) of every passage of a ``HippoGraphIndex``, in graph order."""
    state = index.retrieval_state()
    graph = index.graph
    out = []
    for start in range(0, len(state.passage_ids), CHROMA_BATCH):
        rows = range(start, min(start + CHROMA_BATCH, len(state.passage_ids)))
        out += _extractions(graph, state.passage_ids, state.passage_nodes(rows))
    return out


def _extractions(graph: Any, passage_ids: list[str], nodes: dict[int, BaseNode]) -> list[tuple[str, Extraction]]:
    names = graph.entity_names
    out = []
    for row, node in nodes.items():
        record = graph.passages.get(passage_ids[row])
        if record is None:
            continue
        triples = tuple((names[s], p, names[o]) for s, p, o in (graph.facts[f] for f in record.facts))
        title = node.metadata.get("title") or ""
        text = node.get_content(metadata_mode=MetadataMode.NONE)
        out.append((f"{title}\n{text}" if title else text,
                    Extraction(entities=tuple(names[e] for e in record.entities), triples=triples)))
    return out


def export_openie(index: Any, path: str | os.PathLike[str]) -> Path:
    """Write a ``HippoGraphIndex``'s extractions as ``path`` in HippoRAG's OpenIE results format; the path.

    Read it back with :class:`~llama_index_mhop.graph.openie_file.StoredOpenIE`.
    """
    return write_openie(path, index_extractions(index))
