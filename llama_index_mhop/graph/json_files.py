"""The graph index's saved files read as untrusted input, and a graph's records as plain data and JSON. Every
problem is one ``ValueError`` line naming the file and field path, checked by pydantic before anything is built. A
JSON file this package writes ends with a ``digest`` member hashing every byte before it (older files are read as
they are)."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from array import array
from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Strict, StrictInt, ValidationError

from ..rules.atomic_files import write_atomic
from .graph_arrays import PassageRecord, SynonymList

__all__ = ["DamagedFileError", "Edge", "GraphTables", "JsonRecords", "check_digest", "check_fact_entities",
           "check_field", "check_file_digest", "check_links", "check_listed", "check_model", "check_value",
           "content_hash", "file_digest", "load_array", "packed_synonyms", "parse_json", "read_json_file",
           "read_json_object", "write_json"]

_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer", type(None): "null"}


class DamagedFileError(ValueError):
    """A saved file that is unreadable or not what was written: truncated, zeroed, changed, missing."""


DIGEST_BYTES = 16
# Spaces allowed: a file parsed and written again by hand keeps its digest, which no longer matches.
_TRAILER = re.compile(rb',\s*"digest"\s*:\s*"([0-9a-f]{%d})"\s*}\s*\Z' % (2 * DIGEST_BYTES))


def content_hash(data: bytes = b"") -> Any:
    """The hash every file of a saved index is named or checked by (fed ``data`` so far)."""
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES)


def file_digest(path: Path) -> str:
    """The :func:`content_hash` of a file's bytes; raises DamagedFileError when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return hashlib.file_digest(file, content_hash).hexdigest()
    except OSError as exc:
        raise DamagedFileError(f"{path}: not readable ({exc})") from None


def check_file_digest(path: Path, recorded: str) -> None:
    """Check a file's bytes against its recorded digest; raises DamagedFileError when unreadable or changed."""
    if file_digest(path) != recorded:
        raise _mismatch(path)


def _mismatch(path: Path) -> DamagedFileError:
    return DamagedFileError(f"{path}: its bytes do not match the digest recorded when it was written (damaged or "
                            "replaced)")


def check_digest(data: bytes, path: Path) -> str:
    """Check a JSON file against the digest recorded at its end and return the whole file's digest. Raises
    DamagedFileError when the bytes are not those that were written."""
    found = _TRAILER.search(data, max(0, len(data) - 128))
    start = len(data) if found is None else found.start()
    digest = content_hash(memoryview(data)[:start])  # a view: a file of gigabytes is never copied
    if found is not None and digest.hexdigest() != found.group(1).decode():
        raise _mismatch(path)
    digest.update(memoryview(data)[start:])
    return digest.hexdigest()


def parse_json(text: str, where: str) -> Any:
    """Parse JSON text named ``where``; raises ValueError for bad, too deep or oversized-integer JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a file this package wrote") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # e.g. an integer beyond Python's digit limit
        raise ValueError(f"{where}: not valid JSON ({exc})") from None


def load_array(path: Path, dtype: type, ndim: int, mmap: bool) -> np.ndarray:
    """A saved ``.npy`` array (memory-mapped read-only when ``mmap``), or a DamagedFileError naming the file."""
    try:
        array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DamagedFileError(f"{path}: not a readable .npy array ({exc})") from exc
    if array.dtype != np.dtype(dtype) or array.ndim != ndim:
        raise DamagedFileError(f"{path}: expected a {ndim}-D {np.dtype(dtype)} array, got {array.ndim}-D {array.dtype}")
    return array


def read_json_object(path: Path) -> dict[str, Any]:
    """A saved JSON object checked against its recorded digest (:func:`check_digest`), or a
    :class:`DamagedFileError` naming the file (a truncated or edited file is never half-read)."""
    return read_json_file(path)[0]


def read_json_file(path: Path) -> tuple[dict[str, Any], str]:
    """:func:`read_json_object` and the digest of the file's bytes."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedFileError(f"{path}: not readable ({exc})") from None
    digest = check_digest(data, path)
    try:
        parsed = check_value(parse_json(data.decode("utf-8"), str(path)), dict, str(path), "top level")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DamagedFileError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched") from None
    except ValueError as exc:
        raise DamagedFileError(str(exc)) from None
    parsed.pop("digest", None)  # the file's, checked: not a value of what it holds
    return parsed, digest


def check_model(model: type[BaseModel], data: Any, where: str) -> None:
    """Check ``data`` against a pydantic model; raises ValueError naming the first bad field by its path."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        field = ".".join(map(str, error["loc"])) or "top level"
        if error["type"] == "missing":
            raise ValueError(f"{where}: {field}: missing") from None
        expected = _EXPECTED.get(error["type"]) or error["msg"][0].lower() + error["msg"][1:]
        raise ValueError(f"{where}: {field}: expected {expected}, got {_describe(error['input'])}") from None


_EXPECTED = {"dict_type": "an object", "model_type": "an object", "list_type": "a list", "tuple_type": "a list",
             "string_type": "a string", "int_type": "an integer", "bool_type": "a boolean"}


def write_json(path: Path, data: dict[str, Any]) -> str:
    """Write a JSON object atomically (:func:`~..rules.atomic_files.write_atomic`), ending with a ``digest`` member
    that hashes every byte before it, and return the digest of the file's bytes."""
    body = json.dumps({key: value for key, value in data.items() if key != "digest"}, ensure_ascii=False).encode()
    if body != b"{}":  # the digest follows the last member
        body = body[:-1] + f',"digest":"{content_hash(body[:-1]).hexdigest()}"}}'.encode()
    write_atomic(path, body)
    return content_hash(body).hexdigest()


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        text = repr(value)
        return text if len(text) <= 40 else f"a {len(text)}-digit number"
    return _NAMES.get(type(value), type(value).__name__)


def check_value(value: Any, kinds: type | tuple[type, ...], where: str, field: str) -> Any:
    """``value`` if it is one of ``kinds`` (a bool is never an integer), else a ValueError naming the field."""
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    if isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds):
        return value
    expected = " or ".join(_NAMES.get(k, k.__name__) for k in kinds)
    raise ValueError(f"{where}: {field}: expected {expected}, got {_describe(value)}")


def check_field(data: Mapping[str, Any], key: str, kinds: type | tuple[type, ...], where: str, prefix: str = "",
                default: Any = ...) -> Any:
    """``data[key]`` checked by :func:`check_value`; ``default`` when absent, or an error when no default."""
    field = f"{prefix}{key}"
    if key not in data:
        if default is ...:
            raise ValueError(f"{where}: {field}: missing")
        return default
    return check_value(data[key], kinds, where, field)


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
                "entities": dict(sorted(self.entity_names.items())),
                "facts": {f: list(t) for f, t in sorted(self.facts.items())},
                "passages": {pid: {"entities": list(r.entities), "facts": list(r.facts), "ref_doc_id": r.ref_doc_id,
                                   "title": r.title, "title_entities": list(r.title_entities)}
                             for pid, r in sorted(self.passages.items())},
                "synonyms": {e: [[o, s] for o, s in lst] for e, lst in sorted(self.synonyms.items())},
                "stale_synonyms": sorted(self.stale_synonyms)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> GraphTables:
        """The records :meth:`to_json` wrote, ids and predicates interned (each held once). Raises ValueError for a
        record of the wrong shape."""
        one = sys.intern

        def ids(values: Sequence[str]) -> tuple[str, ...]:
            return tuple(map(one, values))

        try:
            entity_names = {one(k): v for k, v in data["entities"].items()}
            facts = {one(k): (one(s), one(p), one(o)) for k, (s, p, o) in data["facts"].items()}
            passages = {one(pid): rec if isinstance(rec, PassageRecord) else PassageRecord(
                            ids(rec["entities"]), ids(rec["facts"]),
                            None if rec.get("ref_doc_id") is None else one(rec["ref_doc_id"]), rec.get("title", ""),
                            ids(rec.get("title_entities", ())))
                        for pid, rec in data["passages"].items()}
            return cls(dict(data.get("config", {})), int(data.get("version", 0)), entity_names, facts, passages,
                       {one(e): lst if isinstance(lst, SynonymList) else packed_synonyms(e, lst)
                        for e, lst in data.get("synonyms", {}).items()},
                       {one(e) for e in data.get("stale_synonyms", [])})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"graph tables: malformed record ({exc})") from None

    def node_list(self) -> list[list[str]]:
        """Every node as ``[key, kind, name]`` (a passage's name is its title), sorted."""
        nodes = [[pid, "passage", r.title] for pid, r in self.passages.items()]
        nodes += [[e, "entity", name] for e, name in self.entity_names.items()]
        return sorted(nodes)


def check_listed(data: Mapping[str, Any], tables: GraphTables, edges: Sequence[Edge]) -> None:
    """Check a one-object form's node and edge lists against the graph built from its records. Raises ValueError
    when they disagree."""
    if "nodes" in data and sorted(n for n, _, _ in data["nodes"]) != sorted(n for n, _, _ in tables.node_list()):
        raise ValueError("graph file is inconsistent: its node list does not match its passages and entities")
    if "edges" in data:
        stored = sorted((str(u), str(v), int(f), float(s), float(p)) for u, v, f, s, p in data["edges"])
        if stored != list(edges):
            raise ValueError("graph file is inconsistent: its edge list does not match its passages, facts and "
                             "synonym lists")


def packed_synonyms(entity_id: str, pairs: Sequence[Sequence[Any]]) -> SynonymList:
    """One entity's saved ``[[id, similarity], ...]`` list packed, ids interned; raises TypeError or ValueError."""
    return SynonymList.from_columns(tuple([sys.intern(other) for other, _ in pairs]),
                                    array("d", [similarity for _, similarity in pairs]))


_Id = Annotated[str, Strict()]


class _JsonPassage(BaseModel):
    model_config = ConfigDict(extra="allow")
    entities: list[Any]  # each an id of the entities: checked with the links
    facts: list[Any]
    title_entities: list[Any] = []


class JsonRecords(BaseModel):
    """The records of a graph held as JSON (array format 2, and the one-object graph file of index format 1)."""

    model_config = ConfigDict(extra="allow")
    entities: dict[str, _Id]
    facts: dict[str, tuple[_Id, _Id, _Id]]
    passages: dict[str, _JsonPassage]
    synonyms: dict[str, list[Any]] = {}
    node_keys: list[_Id | None] = []
    free_slots: list[StrictInt] = []
    nodes: list[Any] = []
    edges: list[Any] = []
    attached: dict[str, Any] = {}


def check_fact_entities(facts: Mapping[str, Sequence[str]], entities: Container[str], field: str,
                        known_as: str) -> None:
    """A ValueError for the first fact (of ``field``) whose subject or object is not in ``entities`` (``known_as``)."""
    for fact_id, (subject, _, obj) in facts.items():
        for entity_id in (subject, obj):
            if entity_id not in entities:
                raise ValueError(f"{field}.{fact_id}: names entity {entity_id!r}, which is not {known_as}")


def check_links(data: dict[str, Any], where: str) -> None:
    """Check every fact and passage names only entities and facts the records hold. Raises ValueError naming the
    first unknown id by its field."""
    entities, facts = data["entities"], data["facts"]
    check_fact_entities(facts, entities, f"{where}: facts", "in entities")
    for pid, record in data["passages"].items():
        for field, known in (("entities", entities), ("facts", facts)):
            for item in record[field] if isinstance(record, dict) else getattr(record, field):
                if not isinstance(item, str) or item not in known:
                    raise ValueError(f"{where}: passages.{pid}.{field}: {item!r} is not in {field}")
