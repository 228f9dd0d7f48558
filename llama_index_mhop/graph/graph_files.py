"""The knowledge graph on disk and out of process: JSON, a folder of ``.npy`` arrays, and networkx/GraphML export.

* :func:`graph_to_dict` / :func:`fill_graph_from_dict`: one JSON object (tables, node and edge lists), the format the index
  persists today. The edge list is derived data: on reading, the edges are rebuilt from the passage, fact and
  synonym tables and must equal the stored list.
* :func:`save_graph` / :func:`load_graph`: a folder with ``tables.json`` (passages, entities, facts, synonym lists, the node
  table) and the node kinds and edge table as ``.npy`` files, read with ``allow_pickle=False`` and
  memory-mapped when asked, so several query processes share one copy of the edges.
* :func:`graph_to_networkx`: a ``networkx.Graph`` for inspecting or drawing (``networkx.write_graphml`` writes it).

The functions take a :class:`~.knowledge_graph.KnowledgeGraph` and fill or read its tables; they hold no rules of
their own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .graph_arrays import EdgeStore, NodeTable, PassageRecord, load_array

if TYPE_CHECKING:
    import networkx as nx

    from .knowledge_graph import KnowledgeGraph

__all__ = [
    "ARRAY_FORMAT_VERSION",
    "TABLES_FILE",
    "fill_graph_from_dict",
    "graph_to_dict",
    "graph_to_networkx",
    "load_graph",
    "load_graph_tables",
    "save_graph",
]

ARRAY_FORMAT_VERSION = 1
TABLES_FILE = "tables.json"
_KINDS_FILE = "node_kinds.npy"


def _tables(graph: KnowledgeGraph) -> dict[str, Any]:
    return {
        "config": graph.config(),
        "version": graph.version,
        "entities": dict(sorted(graph.entity_names.items())),
        "facts": {f: list(t) for f, t in sorted(graph.facts.items())},
        "passages": {
            pid: {"entities": list(r.entities), "facts": list(r.facts), "ref_doc_id": r.ref_doc_id,
                  "title": r.title, "title_entities": list(r.title_entities)}
            for pid, r in sorted(graph.passages.items())
        },
        "synonyms": {e: [[o, s] for o, s in lst] for e, lst in sorted(graph.synonyms.items())},
        "stale_synonyms": sorted(graph.stale_synonyms),
    }


def _node_list(graph: KnowledgeGraph) -> list[list[str]]:
    nodes = [[pid, "passage", r.title] for pid, r in graph.passages.items()]
    nodes += [[e, "entity", name] for e, name in graph.entity_names.items()]
    return sorted(nodes)


def graph_to_dict(graph: KnowledgeGraph, format_version: int) -> dict[str, Any]:
    """A JSON-serialisable form: config, records, synonym lists, and the node and edge lists."""
    return {"format_version": format_version, **_tables(graph), "nodes": _node_list(graph),
            "edges": [list(e) for e in graph.edge_list()]}


def _fill_tables(graph: KnowledgeGraph, data: Mapping[str, Any]) -> None:
    graph.entity_names = {str(k): str(v) for k, v in data["entities"].items()}
    graph.facts = {str(k): (str(s), str(p), str(o)) for k, (s, p, o) in data["facts"].items()}
    for pid, rec in data["passages"].items():
        record = PassageRecord(
            tuple(rec["entities"]), tuple(rec["facts"]), rec.get("ref_doc_id"), rec.get("title", ""),
            tuple(rec.get("title_entities", ())),
        )
        graph.passages[pid] = record
        for e in record.entities:
            graph.entity_passages.setdefault(e, set()).add(pid)
        for f in record.facts:
            graph.fact_support[f] = graph.fact_support.get(f, 0) + 1
    graph.synonyms = {e: [(str(o), float(s)) for o, s in lst] for e, lst in data.get("synonyms", {}).items()}
    graph._stale_synonyms = set(data.get("stale_synonyms", []))
    graph.version = int(data.get("version", 0))


def fill_graph_from_dict(graph: KnowledgeGraph, data: Mapping[str, Any]) -> None:
    """Fill an empty graph from :func:`graph_to_dict` output, rebuilding the edges from the tables.

    Raises:
        ValueError: the stored node or edge list disagrees with the records.
    """
    _fill_tables(graph, data)
    try:
        graph._rebuild_structure()
    except KeyError as exc:
        raise ValueError(f"graph file is inconsistent: a passage or fact names an unknown entity ({exc})") from exc
    if "nodes" in data and sorted(n for n, _, _ in data["nodes"]) != sorted(n for n, _, _ in _node_list(graph)):
        raise ValueError("graph file is inconsistent: its node list does not match its passages and entities")
    if "edges" in data:
        stored = sorted((str(u), str(v), int(f), float(s), float(p)) for u, v, f, s, p in data["edges"])
        if stored != graph.edge_list():
            raise ValueError("graph file is inconsistent: its edge list does not match its passages, facts and "
                             "synonym lists")


def _write_atomic(path: Path, write: Any) -> None:
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as handle:
        write(handle)
    os.replace(partial, path)


def save_graph(graph: KnowledgeGraph, folder: str | Path) -> Path:
    """Write the graph to ``folder``: ``tables.json``, ``node_kinds.npy``, ``edge_pairs.npy``, ``edge_values.npy``.

    The arrays are written first and the tables last, each file whole or not at all (a reader of a half-written
    folder gets a clear error, never a mixed graph).
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    keys, free = graph._nodes.to_lists()
    pairs, values = graph._edges.table()
    arrays = {_KINDS_FILE: graph._nodes.kinds(), "edge_pairs.npy": pairs, "edge_values.npy": values}
    for name, array in arrays.items():
        _write_atomic(target / name, lambda h, a=array: np.save(h, np.ascontiguousarray(a), allow_pickle=False))
    tables = {"array_format_version": ARRAY_FORMAT_VERSION, **_tables(graph), "node_keys": keys, "free_slots": free}
    text = json.dumps(tables, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    _write_atomic(target / TABLES_FILE, lambda h: h.write(text))
    return target


def load_graph_tables(folder: str | Path) -> dict[str, Any]:
    """The ``tables.json`` of a saved graph, or a ValueError naming what is wrong."""
    path = Path(folder) / TABLES_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: no saved graph here") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("array_format_version") != ARRAY_FORMAT_VERSION:
        found = data.get("array_format_version") if isinstance(data, dict) else None
        raise ValueError(f"{path}: unsupported array format version {found!r} (this code reads "
                         f"{ARRAY_FORMAT_VERSION})")
    return data


def load_graph(graph: KnowledgeGraph, folder: str | Path, mmap: bool) -> None:
    """Fill an empty graph from a folder written by :func:`save_graph` (edges memory-mapped read-only when ``mmap``).

    Raises:
        ValueError: a missing or malformed file, or a node table that disagrees with the passages and entities.
    """
    folder = Path(folder)
    data = load_graph_tables(folder)
    _fill_tables(graph, data)
    kinds = load_array(folder / _KINDS_FILE, np.int8, 1, mmap=False)
    nodes = NodeTable.from_lists(data["node_keys"], data["free_slots"], kinds)
    expected = {**{p: graph._kind_code("passage") for p in graph.passages},
                **{e: graph._kind_code("entity") for e in graph.entity_names}}
    if len(nodes) != len(expected) or any(k not in nodes or nodes.kind(nodes.slot(k)) != c for k, c in expected.items()):
        raise ValueError(f"{folder}: the node table does not match the passages and entities")
    graph._nodes = nodes
    graph._edges = EdgeStore.load(folder, nodes.capacity, mmap)


def graph_to_networkx(graph: KnowledgeGraph) -> nx.Graph:
    """The graph as ``networkx.Graph``: nodes with ``kind`` and ``name``; edges with ``facts``, ``synonymy``,
    ``passage`` and ``weight``."""
    import networkx as nx

    out = nx.Graph()
    for key, kind, name in _node_list(graph):
        out.add_node(key, kind=kind, name=name)
    for u, v, facts, synonymy, passage in graph.edge_list():
        out.add_edge(u, v, facts=facts, synonymy=synonymy, passage=passage, weight=float(facts + synonymy + passage))
    return out
