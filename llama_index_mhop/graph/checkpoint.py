"""The JSON Lines checkpoint of a graph index build, so a killed build resumes: a first line naming the format and
the index (a resumed build keeps its id and collections), then one line per finished batch, appended and fsync'ed
after its Chroma writes. A cut-off last line is ignored; any other unreadable line is an error naming the file and
line."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, StrictStr

from .json_files import check_fact_entities, check_model, check_value, parse_json
from .knowledge_graph import KnowledgeGraph

__all__ = ["CHECKPOINT_FILE", "CHECKPOINT_FORMAT_VERSION", "GraphEntry", "append_checkpoint", "read_checkpoint",
           "resumed_index_id"]

CHECKPOINT_FILE = "hippo_checkpoint.jsonl"
CHECKPOINT_FORMAT_VERSION = 1


@dataclass(frozen=True)
class GraphEntry:
    """What the graph records of one passage: its entities, facts, document and title entities."""

    entities: dict[str, str]  # entity id -> key
    facts: dict[str, tuple[str, str, str]]  # fact id -> (subject id, predicate, object id)
    ref_doc_id: str | None = None
    title: str = ""
    title_entities: tuple[str, ...] = field(default_factory=tuple)  # ids of the entities the title names

    def add_to(self, graph: KnowledgeGraph, passage_id: str) -> None:
        """Add the passage to the graph."""
        graph.add_passage(passage_id, self.entities, self.facts, ref_doc_id=self.ref_doc_id, title=self.title,
                          title_entities=self.title_entities)

    def to_json(self) -> dict[str, Any]:
        return {"entities": self.entities, "facts": {f: list(t) for f, t in self.facts.items()},
                "ref_doc_id": self.ref_doc_id, "title": self.title, "title_entities": list(self.title_entities)}

    @classmethod
    def from_json(cls, record: dict[str, Any], where: str, field: str) -> GraphEntry:
        """The entry a checked checkpoint record describes; ValueError for a fact naming an unlisted entity."""
        entities, facts = record["entities"], {f: (s, p, o) for f, (s, p, o) in record["facts"].items()}
        check_fact_entities(facts, entities, f"{where}: {field}.facts", "among the record's entities")
        return cls(entities=entities, facts=facts, ref_doc_id=record.get("ref_doc_id"), title=record.get("title", ""),
                   title_entities=tuple(record.get("title_entities", ())))


class _Entry(BaseModel, extra="allow"):
    entities: dict[str, StrictStr]
    facts: dict[str, tuple[StrictStr, StrictStr, StrictStr]]
    ref_doc_id: StrictStr | None = None
    title: StrictStr = ""
    title_entities: list[StrictStr] = []


class _Line(BaseModel, extra="allow"):
    passages: dict[str, _Entry] = {}


def append_checkpoint(path: Path, name: str, entries: Mapping[str, GraphEntry], index_id: str | None = None) -> None:
    """Append one batch's line (and the header line first, for a new file), flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    with path.open("a", encoding="utf-8") as handle:
        if new_file:
            header = {"format_version": CHECKPOINT_FORMAT_VERSION, "name": name, "index_id": index_id}
            handle.write(json.dumps(header) + "\n")
        line = {"passages": {pid: entry.to_json() for pid, entry in entries.items()}}
        handle.write(json.dumps(line, ensure_ascii=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_checkpoint(path: Path, name: str) -> dict[str, GraphEntry]:
    """The passages a checkpoint lists (empty without one). Raises ValueError for an unreadable line, a bad record,
    or a checkpoint of another index."""
    if not path.is_file():
        return {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc}); delete the checkpoint to rebuild") from None
    entries: dict[str, GraphEntry] = {}
    for number, line in enumerate(lines):
        where = f"{path}: line {number + 1}"
        try:
            data = check_value(parse_json(line, where), dict, where, "line")
        except json.JSONDecodeError:
            if number == len(lines) - 1:
                break  # the last line was being written when the run stopped
            raise ValueError(f"{where}: not valid JSON; delete the checkpoint to rebuild") from None
        if number == 0:
            if data.get("format_version") != CHECKPOINT_FORMAT_VERSION or data.get("name") != name:
                raise ValueError(f"{path} belongs to another index ({data}); delete it to rebuild")
            continue
        check_model(_Line, data, where)
        for pid, record in data.get("passages", {}).items():
            entries[pid] = GraphEntry.from_json(record, where, f"passages.{pid}")
    return entries


def resumed_index_id(path: Path) -> str | None:
    """The index id of the build that wrote the checkpoint at ``path`` (None: no checkpoint, or a first line
    :func:`read_checkpoint` refuses later; "": a checkpoint of before ids named the collections, which are named
    by the index's name)."""
    try:
        with path.open(encoding="utf-8") as handle:
            header = json.loads(handle.readline())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    index_id = header.get("index_id", "") if isinstance(header, dict) else None
    return index_id if isinstance(index_id, str) else None
