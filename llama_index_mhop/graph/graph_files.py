"""The knowledge graph on disk and out of process: JSON, a folder of ``.npy`` arrays, and networkx/GraphML export.

* :func:`graph_to_dict` / :func:`fill_graph_from_dict`: one JSON object (tables, node and edge lists), the format the index
  persists today. The edge list is derived data: on reading, the edges are rebuilt from the passage, fact and
  synonym tables and must equal the stored list.
* :func:`save_graph` / :func:`open_graph_files` / :func:`load_graph`: a folder with ``tables.json`` (passages,
  entities, facts, synonym lists, the node table, the names of this save's arrays) and the node kinds and edge
  table as ``.npy`` files, read with ``allow_pickle=False`` and memory-mapped when asked, so several query
  processes share one copy of the edges.
* :func:`graph_to_networkx`: a ``networkx.Graph`` for inspecting or drawing (``networkx.write_graphml`` writes it).

The functions take a :class:`~.knowledge_graph.KnowledgeGraph` and fill or read its tables; they hold no rules of
their own.
"""

from __future__ import annotations

import json
import os
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .graph_arrays import EdgeStore, NodeTable, PassageRecord, load_array
from .json_files import read_json_object
from .layout import TABLES_FILE

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
    "open_graph_files",
    "save_graph",
]

ARRAY_FORMAT_VERSION = 2
_ARRAYS = ("node_kinds", "edge_pairs", "edge_values")
_ARRAY_NAME = re.compile(r"[a-z_]+\.v\d+-[0-9a-f]{8}\.npy")  # the file names save_graph writes, nothing else


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
    partial = path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")  # a name of its own
    with open(partial, "wb") as handle:
        write(handle)
    os.replace(partial, path)


def save_graph(graph: KnowledgeGraph, folder: str | Path, attached: Mapping[str, Any] | None = None) -> Path:
    """Write the graph to ``folder``: ``tables.json`` and the node kinds and edge table as ``.npy`` files.

    ``attached`` (JSON values, such as the index's document store) is written inside ``tables.json``, so it
    becomes visible in the same atomic step as the graph it describes.

    Each save writes its arrays under new names (``edge_pairs.<save>.npy``, ...), then replaces ``tables.json``,
    which names them, then deletes the arrays of the saves before the previous one, and any ``.partial`` file a
    crashed save left. A crash leaves the previous save whole. The previous save's arrays stay, so a reader that
    has just read the previous ``tables.json`` can still open them (:func:`open_graph_files`); a reader that
    mapped an older save keeps its arrays (an unlinked file lives on while it is mapped).
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    keys, free = graph._nodes.to_lists()
    pairs, values = graph._edges.table()
    save = f"v{graph.version}-{secrets.token_hex(4)}"
    arrays = {stem: f"{stem}.{save}.npy" for stem in _ARRAYS}
    for stem, array in zip(_ARRAYS, (graph._nodes.kinds(), pairs, values), strict=True):
        _write_atomic(target / arrays[stem],
                      lambda h, a=array: np.save(h, np.ascontiguousarray(a), allow_pickle=False))
    tables = {"array_format_version": ARRAY_FORMAT_VERSION, **_tables(graph), "node_keys": keys, "free_slots": free,
              "arrays": arrays, **({"attached": dict(attached)} if attached else {})}
    text = json.dumps(tables, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    keep = {*arrays.values(), *_saved_array_names(target)}
    _write_atomic(target / TABLES_FILE, lambda h: h.write(text))
    for stale in target.iterdir():
        ours = stale.name.split(".")[0] in (*_ARRAYS, Path(TABLES_FILE).stem)
        if ours and stale.suffix in (".npy", ".partial") and stale.name not in keep:
            stale.unlink(missing_ok=True)
    return target


def _saved_array_names(folder: Path) -> list[str]:
    """The arrays the folder's current ``tables.json`` names (none when there is no readable one)."""
    try:
        return list(load_graph_tables(folder)["arrays"].values())
    except ValueError:
        return []


def load_graph_tables(folder: str | Path) -> dict[str, Any]:
    """The ``tables.json`` of a saved graph, or a ValueError naming what is wrong."""
    path = Path(folder) / TABLES_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no saved graph here")
    data = read_json_object(path)
    if data.get("array_format_version") != ARRAY_FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported array format version {data.get('array_format_version')!r} (this "
                         f"code reads {ARRAY_FORMAT_VERSION})")
    names = data.get("arrays")
    if not isinstance(names, dict) or any(not isinstance(names.get(s), str) or not _ARRAY_NAME.fullmatch(names[s])
                                          or not names[s].startswith(f"{s}.") for s in _ARRAYS):
        raise ValueError(f"{path}: arrays: expected the file names of {', '.join(_ARRAYS)}")
    return data


def _open_arrays(folder: Path, tables: Mapping[str, Any], mmap: bool) -> dict[str, np.ndarray]:
    names = tables["arrays"]
    return {"node_kinds": load_array(folder / names["node_kinds"], np.int8, 1, mmap=False),
            **{stem: load_array(folder / names[stem], np.int32, 2, mmap) for stem in ("edge_pairs", "edge_values")}}


def open_graph_files(folder: str | Path, mmap: bool) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The checked ``tables.json`` of a saved graph and the arrays it names, opened (the edges memory-mapped
    read-only when ``mmap``) as soon as the tables are read, before anything is built from them.

    A save that finishes meanwhile keeps the arrays of the save before it (see :func:`save_graph`); if two saves
    finished between reading ``tables.json`` and opening its arrays, ``tables.json`` is read once more.

    Raises:
        ValueError: a missing or malformed file.
    """
    folder = Path(folder)
    tables = load_graph_tables(folder)
    try:
        return tables, _open_arrays(folder, tables, mmap)
    except ValueError:
        again = load_graph_tables(folder)
        if again["arrays"] == tables["arrays"]:  # no save replaced them: the arrays themselves are bad
            raise
        return again, _open_arrays(folder, again, mmap)


def load_graph(graph: KnowledgeGraph, folder: str | Path, tables: Mapping[str, Any],
               arrays: Mapping[str, np.ndarray]) -> None:
    """Fill an empty graph from the files :func:`open_graph_files` read from ``folder``.

    Raises:
        ValueError: malformed arrays, or a node or edge table that disagrees with the passages, entities and facts.
    """
    folder = Path(folder)
    _fill_tables(graph, tables)
    nodes = NodeTable.from_lists(tables["node_keys"], tables["free_slots"], arrays["node_kinds"])
    expected = {**{p: graph._kind_code("passage") for p in graph.passages},
                **{e: graph._kind_code("entity") for e in graph.entity_names}}
    if len(nodes) != len(expected) or any(k not in nodes or nodes.kind(nodes.slot(k)) != c for k, c in expected.items()):
        raise ValueError(f"{folder}: the node table does not match the passages and entities")
    graph._nodes = nodes
    graph._edges = EdgeStore.from_arrays(arrays["edge_pairs"], arrays["edge_values"], nodes.capacity, folder)
    try:
        graph.check_edges()
    except ValueError as exc:
        raise ValueError(f"{folder}: {exc}") from None


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
