"""The knowledge graph's files: its records as JSON, a folder of ``.npy`` arrays, and networkx/GraphML export.

* :class:`GraphTables`: a graph's records (config, version, entities, facts, passages, synonym lists) as plain
  data, written as JSON and read back checked (:meth:`GraphTables.to_json`, :meth:`GraphTables.from_json`).
* :func:`graph_dict` / :func:`check_listed`: one JSON object (the records plus node and edge lists), the format
  the index persisted first. The node and edge lists are derived data: on reading, the graph built from the
  records must list the same ones.
* :func:`save_graph` / :func:`open_graph_files` / :func:`open_structure`: a folder with ``tables.json`` (the
  records, the node table, the names of this save's arrays) and the node kinds and edge table as ``.npy`` files,
  read with ``allow_pickle=False`` and memory-mapped when asked, so several query processes share one copy of the
  edges.
* :func:`graph_to_networkx`: a ``networkx.Graph`` for inspecting or drawing (``networkx.write_graphml`` writes it).

A save is named by the digest of its ``tables.json`` (:func:`saved_tables_digest`): what a query snapshot of it
is filed under (:mod:`.state_snapshot`). Every file of a save is checked before use against a digest recorded when
it was written (:func:`~.json_files.content_hash`): ``tables.json`` ends with the digest of its bytes before it,
and each array is named by the digest of its bytes; a file that is not what was written is a
:class:`~.json_files.DamagedFileError` naming it.

Nothing here knows the graph's rules: :class:`~.knowledge_graph.KnowledgeGraph` hands over its records, node table
and edge store, and builds itself from what is read (``KnowledgeGraph.save``, ``load``, ``to_dict``,
``from_dict``).
"""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
import secrets
import sys
from array import array
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .graph_arrays import EdgeStore, NodeTable, PassageRecord, SynonymList, load_array
from .json_files import (
    DamagedFileError,
    check_digest,
    check_file_digest,
    content_hash,
    digest_trailer,
    file_digest,
    json_object,
)
from .layout import TABLES_FILE

if TYPE_CHECKING:
    import networkx as nx

__all__ = [
    "ARRAY_FORMAT_VERSION",
    "TABLES_FILE",
    "GraphTables",
    "check_listed",
    "check_saved_array",
    "cycle_collection_paused",
    "graph_dict",
    "graph_to_networkx",
    "load_graph_tables",
    "saved_tables_digest",
    "open_graph_files",
    "open_structure",
    "save_graph",
]

ARRAY_FORMAT_VERSION = 2
_ARRAYS = ("node_kinds", "edge_pairs", "edge_values")
# The file names save_graph writes, nothing else: the digest of the array's bytes (a save before digests were
# recorded: 8 random hex digits, read unchecked).
_ARRAY_NAME = re.compile(r"[a-z_]+\.v\d+-(?:[0-9a-f]{8}|(?P<digest>[0-9a-f]{32}))\.npy")
#: An edge as ``KnowledgeGraph.edge_list`` gives it: (u, v, facts, synonymy, passage).
Edge = tuple[str, str, int, float, float]


@dataclass(frozen=True)
class GraphTables:
    """A graph's records as saved: the graph's settings and version, entity names, facts, passages, synonym lists
    and the entities whose synonyms are still to compute. The mappings are the graph's own, not copies: read them
    before its next change."""

    config: Mapping[str, Any]
    version: int
    entity_names: Mapping[str, str]
    facts: Mapping[str, tuple[str, str, str]]
    passages: Mapping[str, PassageRecord]
    synonyms: Mapping[str, SynonymList]
    stale_synonyms: Collection[str]

    def to_json(self) -> dict[str, Any]:
        """The records as JSON values, each table sorted by id."""
        return {"config": dict(self.config), "version": self.version,
                **{name: dict(items) for name, items in self.to_json_items().items()},
                "stale_synonyms": sorted(self.stale_synonyms)}

    def to_json_items(self) -> dict[str, Iterator[tuple[str, Any]]]:
        """The entity, fact, passage and synonym tables of :meth:`to_json`, each as its ``(id, JSON value)``
        pairs, sorted by id and made one at a time."""
        return {
            "entities": iter(sorted(self.entity_names.items())),
            "facts": ((f, list(t)) for f, t in sorted(self.facts.items())),
            "passages": ((pid, {"entities": list(r.entities), "facts": list(r.facts), "ref_doc_id": r.ref_doc_id,
                                "title": r.title, "title_entities": list(r.title_entities)})
                         for pid, r in sorted(self.passages.items())),
            "synonyms": ((e, [[o, s] for o, s in lst]) for e, lst in sorted(self.synonyms.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphTables:
        """The records :meth:`to_json` wrote (or the tables of a saved folder, or a one-object graph file).

        Each id and predicate is held once (interned): parsing makes a new string at every occurrence, and an
        entity's id recurs in its passages' records, its facts and other entities' synonym lists.

        Raises:
            ValueError: a record of the wrong shape (an id that is not a string, a similarity that is not a number).
        """
        try:
            return cls._from_records(data)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"graph tables: malformed record ({exc})") from None

    @classmethod
    def _from_records(cls, data: Mapping[str, Any]) -> GraphTables:
        one = sys.intern

        def ids(values: Sequence[str]) -> tuple[str, ...]:
            return tuple(map(one, values))

        entity_names = {one(k): v for k, v in data["entities"].items()}
        facts = {one(k): (one(s), one(p), one(o)) for k, (s, p, o) in data["facts"].items()}
        passages = {
            one(pid): PassageRecord(ids(rec["entities"]), ids(rec["facts"]),
                                    None if rec.get("ref_doc_id") is None else one(rec["ref_doc_id"]),
                                    rec.get("title", ""), ids(rec.get("title_entities", ())))
            for pid, rec in data["passages"].items()
        }
        return cls(
            config=dict(data.get("config", {})),
            version=int(data.get("version", 0)),
            entity_names=entity_names,
            facts=facts,
            passages=passages,
            synonyms={one(e): lst if isinstance(lst, SynonymList) else packed_synonyms(e, lst)
                      for e, lst in data.get("synonyms", {}).items()},
            stale_synonyms={one(e) for e in data.get("stale_synonyms", [])},
        )

    def node_list(self) -> list[list[str]]:
        """Every node as ``[key, kind, name]`` (a passage's name is its title), sorted."""
        nodes = [[pid, "passage", r.title] for pid, r in self.passages.items()]
        nodes += [[e, "entity", name] for e, name in self.entity_names.items()]
        return sorted(nodes)


def graph_dict(tables: GraphTables, format_version: int, edges: Sequence[Edge]) -> dict[str, Any]:
    """The one-object JSON form: the records, and the node and edge lists."""
    return {"format_version": format_version, **tables.to_json(), "nodes": tables.node_list(),
            "edges": [list(e) for e in edges]}


def check_listed(data: Mapping[str, Any], tables: GraphTables, edges: Sequence[Edge]) -> None:
    """Check the node and edge lists a one-object JSON form carries against the graph built from its records
    (``tables`` and ``edges``, the built graph's).

    Raises:
        ValueError: the stored node or edge list disagrees with the records.
    """
    if "nodes" in data and sorted(n for n, _, _ in data["nodes"]) != sorted(n for n, _, _ in tables.node_list()):
        raise ValueError("graph file is inconsistent: its node list does not match its passages and entities")
    if "edges" in data:
        stored = sorted((str(u), str(v), int(f), float(s), float(p)) for u, v, f, s, p in data["edges"])
        if stored != list(edges):
            raise ValueError("graph file is inconsistent: its edge list does not match its passages, facts and "
                             "synonym lists")


def _write_atomic(path: Path, write: Any) -> None:
    partial = _partial(path)
    with open(partial, "wb") as handle:
        write(handle)
    os.replace(partial, path)


def _partial(path: Path) -> Path:
    return path.with_name(f"{path.name}.{os.getpid()}-{secrets.token_hex(4)}.partial")  # a name of its own


def _write_named_array(folder: Path, stem: str, version: int, data: np.ndarray) -> str:
    """Write an array under the name of its content (``<stem>.v<version>-<digest>.npy``), returning the name."""
    partial = _partial(folder / f"{stem}.npy")
    with open(partial, "wb") as handle:
        np.save(handle, np.ascontiguousarray(data), allow_pickle=False)
    name = f"{stem}.v{version}-{file_digest(partial)}.npy"
    os.replace(partial, folder / name)  # the same name holds the same bytes: a reader's map is never changed
    return name


def save_graph(folder: str | Path, tables: GraphTables, nodes: NodeTable, edges: EdgeStore,
               attached: Mapping[str, Any] | None = None) -> str:
    """Write a graph to ``folder``: ``tables.json`` (its records and node table) and the node kinds and edge table
    as ``.npy`` files.

    ``attached`` (JSON values, such as the index's document store) is written inside ``tables.json``, so it
    becomes visible in the same atomic step as the graph it describes.

    Each save writes its arrays under new names (``edge_pairs.<save>.npy``, ...), then replaces ``tables.json``,
    which names them, then deletes the arrays of the saves before the previous one, and any ``.partial`` file a
    crashed save left. A crash leaves the previous save whole. The previous save's arrays stay, so a reader that
    has just read the previous ``tables.json`` can still open them (:func:`open_graph_files`); a reader that
    mapped an older save keeps its arrays (an unlinked file lives on while it is mapped).

    Returns:
        The digest of the ``tables.json`` written (:func:`saved_tables_digest`).
    """
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    keys, free = nodes.to_lists()
    pairs, values = edges.table()
    arrays = {stem: _write_named_array(target, stem, tables.version, data)
              for stem, data in zip(_ARRAYS, (nodes.kinds(), pairs, values), strict=True)}
    keep = {*arrays.values(), *_saved_array_names(target)}
    body = content_hash()

    def write_tables(handle: Any) -> None:
        for chunk in _tables_json(tables, arrays, keys, free, attached):
            data = chunk.encode("utf-8")
            body.update(data)
            handle.write(data)
        handle.write(digest_trailer(body).encode())

    _write_atomic(target / TABLES_FILE, write_tables)
    digest = body.copy()
    digest.update(digest_trailer(body).encode())
    for stale in target.iterdir():
        ours = stale.name.split(".")[0] in (*_ARRAYS, Path(TABLES_FILE).stem)
        if ours and stale.suffix in (".npy", ".partial") and stale.name not in keep:
            stale.unlink(missing_ok=True)
    return digest.hexdigest()


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_CHUNK_ITEMS = 4096  # records encoded into one piece of the file


def _tables_json(tables: GraphTables, arrays: Mapping[str, str], keys: list[str | None], free: list[int],
                 attached: Mapping[str, Any] | None) -> Iterator[str]:
    """``tables.json`` in pieces, a few thousand records each, never the whole text at once: the JSON of
    ``{"array_format_version", "arrays", **tables.to_json(), "node_keys", "free_slots", "attached"}`` without its
    closing brace (the digest member ends it). The arrays come first, so a save reads the previous save's names
    from the file's head (:func:`_saved_array_names`)."""
    records = tables.to_json_items()
    yield "{" + ",".join(f"{_ENCODE(k)}:{_ENCODE(v)}" for k, v in (
        ("array_format_version", ARRAY_FORMAT_VERSION), ("arrays", dict(arrays)),
        ("config", dict(tables.config)), ("version", tables.version)))
    for name, items in records.items():
        yield f",{_ENCODE(name)}:{{"
        separator = ""
        while chunk := list(itertools.islice(items, _CHUNK_ITEMS)):
            yield separator + ",".join(f"{_ENCODE(k)}:{_ENCODE(v)}" for k, v in chunk)
            separator = ","
        yield "}"
    yield f",{_ENCODE('stale_synonyms')}:{_ENCODE(sorted(tables.stale_synonyms))}"
    yield f",{_ENCODE('node_keys')}:["
    for start in range(0, len(keys), _CHUNK_ITEMS):
        yield ("," if start else "") + ",".join(_ENCODE(k) for k in keys[start : start + _CHUNK_ITEMS])
    yield f"],{_ENCODE('free_slots')}:{_ENCODE(free)}"
    if attached:
        yield f",{_ENCODE('attached')}:{_ENCODE(dict(attached))}"


def _saved_array_names(folder: Path) -> list[str]:
    """The arrays the folder's current ``tables.json`` names (none when there is no readable one), read from the
    file's head where :func:`save_graph` writes them (a file written before that is read whole)."""
    head = f'{{"array_format_version":{ARRAY_FORMAT_VERSION},"arrays":'
    try:
        with open(folder / TABLES_FILE, "rb") as file:
            start = file.read(_HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return []
    if start.startswith(head):
        try:
            names, _ = json.JSONDecoder().raw_decode(start, len(head))
        except json.JSONDecodeError:
            names = None
        if isinstance(names, dict) and all(isinstance(v, str) for v in names.values()):
            return list(names.values())
    try:
        return list(load_graph_tables(folder)["arrays"].values())
    except ValueError:
        return []


_HEAD_BYTES = 4096  # more than the array names of a save take at the head of its tables.json


def saved_tables_digest(folder: str | Path) -> str:
    """The digest of the ``tables.json`` in ``folder`` (read a block at a time, never parsed).

    Raises:
        ValueError: no readable ``tables.json``.
    """
    path = Path(folder) / TABLES_FILE
    if not path.is_file():
        raise DamagedFileError(f"{path}: no saved graph here")
    return file_digest(path)


def load_graph_tables(folder: str | Path) -> dict[str, Any]:
    """The ``tables.json`` of a saved graph, or a ValueError naming what is wrong."""
    return _read_tables(Path(folder))[0]


def _read_tables(folder: Path) -> tuple[dict[str, Any], str]:
    """The checked ``tables.json`` of a saved graph and the digest of its bytes."""
    path = folder / TABLES_FILE
    if not path.is_file():
        raise DamagedFileError(f"{path}: no saved graph here")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(f"{path}: not readable ({exc}); the Chroma data is untouched") from None
    digest = check_digest(raw, path)
    try:
        text = raw.decode("utf-8")
        del raw  # the text alone from here: at a million passages each copy is gigabytes
        with cycle_collection_paused():
            data = json_object(text, path, entries={"synonyms": packed_synonyms})
    except (UnicodeDecodeError, ValueError) as exc:
        raise DamagedFileError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched"
                               if isinstance(exc, UnicodeDecodeError) else str(exc)) from None
    del text
    if data.get("array_format_version") != ARRAY_FORMAT_VERSION:
        raise ValueError(f"{path}: unsupported array format version {data.get('array_format_version')!r} (this "
                         f"code reads {ARRAY_FORMAT_VERSION})")
    names = data.get("arrays")
    if not isinstance(names, dict) or any(not isinstance(names.get(s), str) or not _ARRAY_NAME.fullmatch(names[s])
                                          or not names[s].startswith(f"{s}.") for s in _ARRAYS):
        raise DamagedFileError(f"{path}: arrays: expected the file names of {', '.join(_ARRAYS)}")
    data.pop("digest", None)  # the file's, checked: not a record of the graph
    return data, digest


@contextmanager
def cycle_collection_paused() -> Iterator[None]:
    """Python's cycle collector held off while a saved graph's tables are parsed and built: tens of millions of
    objects, none in a cycle, which each full collection would scan again (docs/SCALING.md: a 300k-passage graph
    loads in 21 s, not 29)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def packed_synonyms(entity_id: str, pairs: Sequence[Sequence[Any]]) -> SynonymList:
    """One entity's saved synonym list, ``[[id, similarity], ...]``, packed, its ids interned (held once with
    every other id read).

    Raises:
        TypeError, ValueError: an entry that is not an id (a string) and a similarity (a number).
    """
    return SynonymList.from_columns(tuple([sys.intern(other) for other, _ in pairs]),
                                    array("d", [similarity for _, similarity in pairs]))


def check_saved_array(folder: Path, name: str) -> None:
    """Check a saved array against the digest its name records (a name :func:`save_graph` writes; one written
    before digests were recorded holds none), before it is read.

    Raises:
        DamagedFileError: a name no save writes, or a file that is not what was written.
    """
    named = _ARRAY_NAME.fullmatch(name)
    if named is None:
        raise DamagedFileError(f"{folder}: {name!r} is not the name of a saved array")
    if named["digest"] is not None and (folder / name).is_file():  # a missing one: named by its read
        check_file_digest(folder / name, named["digest"])


def _open_arrays(folder: Path, tables: Mapping[str, Any], mmap: bool) -> dict[str, np.ndarray]:
    names = tables["arrays"]
    for name in names.values():
        check_saved_array(folder, name)
    return {"node_kinds": load_array(folder / names["node_kinds"], np.int8, 1, mmap=False),
            **{stem: load_array(folder / names[stem], np.int32, 2, mmap) for stem in ("edge_pairs", "edge_values")}}


def open_graph_files(folder: str | Path, mmap: bool) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """The checked ``tables.json`` of a saved graph, the arrays it names, opened (the edges memory-mapped
    read-only when ``mmap``) as soon as the tables are read, before anything is built from them, and the digest
    of the ``tables.json`` read (:func:`saved_tables_digest`).

    A save that finishes meanwhile keeps the arrays of the save before it (see :func:`save_graph`); if two saves
    finished between reading ``tables.json`` and opening its arrays, ``tables.json`` is read once more.

    Raises:
        ValueError: a missing or malformed file.
    """
    folder = Path(folder)
    tables, digest = _read_tables(folder)
    try:
        return tables, _open_arrays(folder, tables, mmap), digest
    except ValueError:
        again, digest = _read_tables(folder)
        if again["arrays"] == tables["arrays"]:  # no save replaced them: the arrays themselves are bad
            raise
        return again, _open_arrays(folder, again, mmap), digest


def open_structure(folder: str | Path, tables: Mapping[str, Any], arrays: Mapping[str, np.ndarray],
                   kinds: Mapping[str, int]) -> tuple[NodeTable, EdgeStore]:
    """The node table and edge store of the files :func:`open_graph_files` read from ``folder``, the node table
    checked to hold exactly the nodes ``kinds`` names, each of its kind code.

    Raises:
        ValueError: malformed arrays, or a node table that disagrees with ``kinds``.
    """
    folder = Path(folder)
    nodes = NodeTable.from_lists(tables["node_keys"], tables["free_slots"], arrays["node_kinds"])
    if len(nodes) != len(kinds) or any(k not in nodes or nodes.kind(nodes.slot(k)) != c for k, c in kinds.items()):
        raise ValueError(f"{folder}: the node table does not match the passages and entities")
    return nodes, EdgeStore.from_arrays(arrays["edge_pairs"], arrays["edge_values"], nodes.capacity, folder)


def graph_to_networkx(nodes: Sequence[Sequence[str]], edges: Sequence[Edge]) -> nx.Graph:
    """A ``networkx.Graph`` of these nodes (:meth:`GraphTables.node_list`: with ``kind`` and ``name``) and edges
    (with ``facts``, ``synonymy``, ``passage`` and ``weight``)."""
    import networkx as nx

    out = nx.Graph()
    for key, kind, name in nodes:
        out.add_node(key, kind=kind, name=name)
    for u, v, facts, synonymy, passage in edges:
        out.add_edge(u, v, facts=facts, synonymy=synonymy, passage=passage, weight=float(facts + synonymy + passage))
    return out
