"""A saved knowledge graph, and its networkx export: ``.npy`` arrays named by the digest of their bytes (checked
before use) and a small ``tables.json`` naming them, whose own digest names the save (:func:`saved_tables_digest`).
Array format 2 tables are still read."""

from __future__ import annotations

import gc
import itertools
import re
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..rules.atomic_files import atomic_path
from .graph_arrays import EdgeStore, NodeTable, PassageRecord, SynonymList
from .json_files import (
    DamagedFileError,
    Edge,
    GraphTables,
    JsonRecords,
    check_file_digest,
    check_model,
    content_hash,
    file_digest,
    load_array,
    read_json_file,
    read_json_object,
    write_json,
)
from .layout import TABLES_FILE

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["ARRAY_FORMAT_VERSION", "TABLES_FILE", "check_saved_array", "cycle_collection_paused", "graph_to_networkx",
           "load_graph_tables", "open_graph_files", "open_structure", "save_graph", "saved_tables_digest"]

#: 2: the records in ``tables.json`` (still read); 3: the records as arrays.
ARRAY_FORMAT_VERSION = 3
_DTYPES = {"node_kinds": (np.int8, 1), "edge_pairs": (np.int32, 2), "edge_values": (np.int32, 2),
           "text": (np.uint8, 1), "text_ends": (np.int64, 1), "counts": (np.int64, 1), "similarities": (np.float64, 1)}
_ARRAYS = tuple(_DTYPES)
_ARRAY_NAMES = {2: _ARRAYS[:3], 3: _ARRAYS}  # by array format version
_SIZES = ("entities", "facts", "passages", "synonyms", "nodes", "free_slots")
# The file names save_graph writes, nothing else: the digest of the array's bytes (a save before digests were
# recorded: 8 random hex digits, read unchecked).
_ARRAY_NAME = re.compile(r"[a-z_]+\.v\d+-(?:[0-9a-f]{8}|(?P<digest>[0-9a-f]{32}))\.npy")


def _write_named_array(folder: Path, stem: str, version: int, data: np.ndarray) -> str:
    """Write an array under the name of its content (``<stem>.v<version>-<digest>.npy``), returning the name."""
    data = np.ascontiguousarray(data)
    digest = _HashingWriter()
    np.save(digest, data, allow_pickle=False)  # the bytes np.save writes to the file, hashed without a copy
    name = f"{stem}.v{version}-{digest.hash.hexdigest()}.npy"
    with atomic_path(folder / name) as partial, open(partial, "wb") as handle:  # a mapped file is replaced, not
        np.save(handle, data, allow_pickle=False)  # changed: its reader keeps it
    return name


class _HashingWriter:
    """A file-like sink that only hashes what is written to it."""

    def __init__(self) -> None:
        self.hash = content_hash()

    def write(self, data: bytes) -> int:
        self.hash.update(data)
        return len(data)


def save_graph(folder: str | Path, tables: GraphTables, nodes: NodeTable, edges: EdgeStore,
               attached: Mapping[str, Any] | None = None) -> str:
    """Write a graph's records, node table and edges as content-named ``.npy`` arrays, then replace ``tables.json``
    (settings, version, ``attached``), then delete arrays older than the previous save's; the new digest. A crash
    leaves the previous save whole, and its arrays stay for readers that just read its ``tables.json``."""
    target = Path(folder)
    target.mkdir(parents=True, exist_ok=True)
    keys, free = nodes.to_lists()
    pairs, values = edges.table()
    records, sizes = _record_arrays(tables, keys, free)
    arrays = {stem: _write_named_array(target, stem, tables.version, data)
              for stem, data in {"node_kinds": nodes.kinds(), "edge_pairs": pairs, "edge_values": values,
                                 **records}.items()}
    keep = {*arrays.values(), *_saved_array_names(target)}
    digest = write_json(target / TABLES_FILE, {
        "array_format_version": ARRAY_FORMAT_VERSION, "arrays": arrays, "sizes": sizes, "config": dict(tables.config),
        "version": tables.version, "stale_synonyms": sorted(tables.stale_synonyms), "attached": dict(attached or {})})
    for stale in target.iterdir():
        ours = stale.name.lstrip(".").split(".")[0] in (*_ARRAYS, Path(TABLES_FILE).stem)
        if ours and (stale.suffix == ".npy" or ".partial" in stale.name) and stale.name not in keep:
            stale.unlink(missing_ok=True)
    return digest


def _record_arrays(tables: GraphTables, keys: list[str | None],
                   free: list[int]) -> tuple[dict[str, np.ndarray], dict[str, int]]:
    """The records and node keys as arrays: every string in one text (``text`` and the ``text_ends`` of each
    string), every list length and free slot in ``counts``, the synonym similarities in ``similarities``; and the
    number of rows of each table. :func:`_records_from_arrays` reads them back in the same order."""
    texts: list[str] = []
    counts: list[int] = []

    def lists(rows: Iterable[Sequence[str]]) -> None:
        for row in rows:
            counts.append(len(row))
            texts.extend(row)

    entities, facts = sorted(tables.entity_names.items()), sorted(tables.facts.items())
    passages, synonyms = sorted(tables.passages.items()), sorted(tables.synonyms.items())
    for table in (entities, [(f, *t) for f, t in facts]):
        for column in zip(*table, strict=True):
            texts.extend(column)
    texts.extend(pid for pid, _ in passages)
    texts.extend(r.title for _, r in passages)
    lists(() if r.ref_doc_id is None else (r.ref_doc_id,) for _, r in passages)
    for field in ("entities", "facts", "title_entities"):
        lists(getattr(r, field) for _, r in passages)
    texts.extend(e for e, _ in synonyms)
    lists(lst.ids for _, lst in synonyms)
    texts.extend("" if k is None else k for k in keys)
    counts.extend(free)
    similarities = np.array([s for _, lst in synonyms for s in lst.similarities], dtype=np.float64)
    text = "".join(texts)
    return ({"text": np.frombuffer(text.encode("utf-8"), dtype=np.uint8),
             "text_ends": np.cumsum([len(t) for t in texts], dtype=np.int64),
             "counts": np.array(counts, dtype=np.int64), "similarities": similarities},
            {"entities": len(entities), "facts": len(facts), "passages": len(passages), "synonyms": len(synonyms),
             "nodes": len(keys), "free_slots": len(free)})


def _records_from_arrays(arrays: Mapping[str, np.ndarray], sizes: Mapping[str, int]) -> dict[str, Any]:
    """The records :func:`_record_arrays` wrote, in :meth:`GraphTables.to_json` form; ValueError when malformed."""
    text = arrays["text"].tobytes().decode("utf-8")
    ends = arrays["text_ends"].tolist()
    counts = arrays["counts"].tolist()
    if ends and ends[-1] != len(text):
        raise ValueError("text_ends: the strings do not end where the text does")
    at = {"text": 0, "count": 0}

    def strings(n: int) -> list[str]:
        first = at["text"]
        if first + n > len(ends):
            raise ValueError("text: fewer strings than the tables hold")
        at["text"] = first + n
        bounds = [ends[first - 1] if first else 0, *ends[first : first + n]]
        return [sys.intern(text[start:end]) for start, end in itertools.pairwise(bounds)]

    def numbers(n: int) -> list[int]:
        first = at["count"]
        if first + n > len(counts) or any(c < 0 for c in counts[first : first + n]):
            raise ValueError("counts: fewer counts than the tables hold")
        at["count"] = first + n
        return counts[first : first + n]

    def lists(n: int) -> list[tuple[str, ...]]:
        lengths = numbers(n)
        flat = iter(strings(sum(lengths)))
        return [tuple(itertools.islice(flat, k)) for k in lengths]

    entity_ids, names = strings(sizes["entities"]), strings(sizes["entities"])
    fact_columns = [strings(sizes["facts"]) for _ in range(4)]
    n = sizes["passages"]
    pids, titles, refs, entities, facts, title_entities = strings(n), strings(n), lists(n), lists(n), lists(n), lists(n)
    synonym_ids, others = strings(sizes["synonyms"]), lists(sizes["synonyms"])
    keys, free, similarities = strings(sizes["nodes"]), numbers(sizes["free_slots"]), arrays["similarities"]
    if at["text"] != len(ends) or at["count"] != len(counts) or len(similarities) != sum(map(len, others)):
        raise ValueError("the arrays hold more than the tables")
    ends_of = itertools.accumulate(map(len, others))
    return {"entities": dict(zip(entity_ids, names, strict=True)),
            "facts": {f: (s, p, o) for f, s, p, o in zip(*fact_columns, strict=True)},
            "passages": {pid: PassageRecord(e, f, r[0] if r else None, t, te) for pid, t, r, e, f, te
                         in zip(pids, titles, refs, entities, facts, title_entities, strict=True)},
            "synonyms": {e: SynonymList.from_columns(ids, array("d", similarities[end - len(ids) : end].tolist()))
                         for e, ids, end in zip(synonym_ids, others, ends_of, strict=True)},
            "node_keys": [k or None for k in keys], "free_slots": free}


def _saved_array_names(folder: Path) -> list[str]:
    """The arrays the folder's current ``tables.json`` names (none when there is no readable one)."""
    try:
        return [name for name in read_json_object(folder / TABLES_FILE)["arrays"].values() if isinstance(name, str)]
    except (ValueError, AttributeError, KeyError):
        return []


def saved_tables_digest(folder: str | Path) -> str:
    """The digest of ``folder``'s ``tables.json`` (never parsed); raises ValueError when unreadable."""
    path = Path(folder) / TABLES_FILE
    if not path.is_file():
        raise DamagedFileError(f"{path}: no saved graph here")
    return file_digest(path)


def load_graph_tables(folder: str | Path) -> dict[str, Any]:
    """The records of a saved graph in the JSON form of ``tables.json`` before the records became arrays
    (array format 2, which is still read): a ValueError names what is wrong."""
    data, _, _ = open_graph_files(folder, mmap=False)
    data.pop("sizes", None)
    return {**data, **GraphTables.from_json(data).to_json(), "array_format_version": 2,
            "arrays": {s: data["arrays"][s] for s in _ARRAY_NAMES[2]}}


class _Manifest(BaseModel):
    """The members of ``tables.json`` besides the arrays' names (format 2 holds the records too)."""

    model_config = ConfigDict(extra="allow")
    config: dict[str, Any] = {}
    version: StrictInt = 0
    stale_synonyms: list[StrictStr] = []
    attached: dict[str, Any] = {}
    sizes: dict[str, Annotated[StrictInt, Field(ge=0)]] = {}


def _read_tables(folder: Path) -> tuple[dict[str, Any], str]:
    """The checked ``tables.json`` of a saved graph and the digest of its bytes."""
    path = folder / TABLES_FILE
    if not path.is_file():
        raise DamagedFileError(f"{path}: no saved graph here")
    with cycle_collection_paused():
        data, digest = read_json_file(path)
    if (version := data.get("array_format_version")) not in _ARRAY_NAMES:
        raise ValueError(f"{path}: unsupported array format version {version!r} (this code reads "
                         f"{', '.join(map(str, _ARRAY_NAMES))})")
    names = data.get("arrays")
    if not isinstance(names, dict) or any(not isinstance(names.get(s), str) or not _ARRAY_NAME.fullmatch(names[s])
                                          or not names[s].startswith(f"{s}.") for s in _ARRAY_NAMES[version]):
        raise DamagedFileError(f"{path}: arrays: expected the file names of {', '.join(_ARRAY_NAMES[version])}")
    check_model(_Manifest, data, str(path))
    if version == 2:
        check_model(JsonRecords, data, str(path))
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


def check_saved_array(folder: Path, name: str) -> None:
    """Check a saved array against the digest its name records, before it is read. Raises DamagedFileError for a
    name no save writes or a changed file."""
    named = _ARRAY_NAME.fullmatch(name)
    if named is None:
        raise DamagedFileError(f"{folder}: {name!r} is not the name of a saved array")
    if named["digest"] is not None and (folder / name).is_file():  # a missing one: named by its read
        check_file_digest(folder / name, named["digest"])


def _open_arrays(folder: Path, tables: dict[str, Any], mmap: bool) -> dict[str, np.ndarray]:
    """The arrays ``tables`` names, each checked against its digest first; the records read from theirs into
    ``tables``."""
    names = tables["arrays"]
    for name in names.values():
        check_saved_array(folder, name)
    arrays = {stem: load_array(folder / names[stem], dtype, ndim, mmap and stem in ("edge_pairs", "edge_values"))
              for stem, (dtype, ndim) in _DTYPES.items() if stem in names}
    if "text" in names:
        try:
            sizes = tables.get("sizes")
            if not isinstance(sizes, dict) or set(sizes) != set(_SIZES):
                raise ValueError(f"sizes: expected the row counts of {', '.join(_SIZES)}")
            with cycle_collection_paused():
                tables.update(_records_from_arrays(arrays, sizes))
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            raise DamagedFileError(f"{folder}: the record arrays do not hold what tables.json says ({exc})") from None
    return arrays


def open_graph_files(folder: str | Path, mmap: bool) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """The checked ``tables.json`` of a saved graph, its records, its arrays (edges mmapped when ``mmap``) and its
    digest; re-read once if two saves finished meanwhile. Raises ValueError for a missing or malformed file."""
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
    """The node table and edge store read by :func:`open_graph_files`, checked against ``kinds``. Raises ValueError
    for malformed arrays or a node table that disagrees with ``kinds``."""
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
