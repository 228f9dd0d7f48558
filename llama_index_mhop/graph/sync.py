"""One sync rule for a graph index: a document is known by its doc id and content hash; new documents are added,
changed ones replaced, unchanged ones left. A sync killed anywhere leaves the old graph or the new one with a
removal file (:func:`finish_removal`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore

from ..stores.corpus import load_documents
from .graph_stores import GraphStores
from .json_files import check_field, check_value, read_json_object, write_json
from .knowledge_graph import KnowledgeGraph
from .synonym_lists import SynonymyRefresher

__all__ = ["DOCSTORE_FILE", "REMOVAL_FILE", "RefreshPlan", "Removal", "as_documents", "commit_removal", "corpus_of",
           "detach_passages", "docstore_from_dict", "finish_removal", "known_doc_ids", "load_docstore",
           "passages_by_document", "plan_refresh"]

DOCSTORE_FILE = "hippo_docstore.json"
REMOVAL_FILE = "hippo_removal.json"


@dataclass
class RefreshPlan:
    """What a refresh changes: per document whether new or changed, their ``nodes``, ``stale`` passages, ``hashes``."""

    refreshed: list[bool] = field(default_factory=list)
    nodes: list[TextNode] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    hashes: dict[str, str] = field(default_factory=dict)

    @property
    def changes_anything(self) -> bool:
        return bool(self.nodes or self.stale or self.hashes)


def plan_refresh(documents: Sequence[Document], docstore: SimpleDocumentStore, graph: KnowledgeGraph,
                 chunk: Callable[[Sequence[Document]], list[TextNode]]) -> RefreshPlan:
    """Sort documents into new, changed and unchanged by doc id and hash (a repeated id counts once, first)."""
    first: dict[str, int] = {}
    for position, doc in enumerate(documents):
        first.setdefault(doc.id_, position)
    old_passages = passages_by_document(graph)
    recorded = {doc.id_: docstore.get_document_hash(doc.id_) if doc.id_ in old_passages else None
                for doc in documents}
    candidates = [doc for position, doc in enumerate(documents)
                  if first[doc.id_] == position and recorded[doc.id_] != doc.hash]
    new_passages: dict[str, list[TextNode]] = {}
    for node in chunk(candidates):  # one call: passages shared by two documents are kept once
        new_passages.setdefault(node.ref_doc_id or "", []).append(node)
    plan = RefreshPlan(refreshed=[False] * len(documents))
    for position, doc in enumerate(documents):
        if first[doc.id_] != position or recorded[doc.id_] == doc.hash:
            continue
        nodes = new_passages.get(doc.id_, [])
        new_ids = {n.node_id for n in nodes}
        old_ids = old_passages.get(doc.id_, [])
        plan.hashes[doc.id_] = doc.hash
        if recorded[doc.id_] is None and old_ids and set(old_ids) == new_ids:
            continue
        plan.refreshed[position] = True
        plan.nodes.extend(nodes)
        plan.stale.extend(p for p in old_ids if p not in new_ids)
    return plan


def passages_by_document(graph: KnowledgeGraph) -> dict[str, list[str]]:
    """Each doc id's passage ids, in one pass over the graph's passages."""
    out: dict[str, list[str]] = {}
    for pid, record in graph.passages.items():
        if record.ref_doc_id:
            out.setdefault(record.ref_doc_id, []).append(pid)
    return out


@dataclass
class Removal:
    """Records leaving the index: passage ids and the entity and fact ids only they supported."""

    passages: list[str] = field(default_factory=list)
    entities: list[str] = field(default_factory=list)
    facts: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.passages or self.entities or self.facts)

    def merged(self, other: Removal) -> Removal:
        """Both removals as one."""
        return Removal([*self.passages, *other.passages], [*self.entities, *other.entities],
                       [*self.facts, *other.facts])

    def unnamed_by(self, graph: KnowledgeGraph) -> Removal:
        """The records of this removal the graph does not name (again), each once."""
        return Removal([p for p in dict.fromkeys(self.passages) if p not in graph.passages],
                       [e for e in dict.fromkeys(self.entities) if e not in graph.entity_names],
                       [f for f in dict.fromkeys(self.facts) if f not in graph.facts])

    def to_json(self) -> dict[str, list[str]]:
        return {"passages": self.passages, "entities": self.entities, "facts": self.facts}

    def delete_from(self, stores: GraphStores) -> None:
        stores.delete(self.passages, self.entities, self.facts)


def detach_passages(graph: KnowledgeGraph, synonymy: SynonymyRefresher, passage_ids: Iterable[str]) -> Removal:
    """Take passages out of the graph (not yet out of Chroma: see the module docstring for the order)."""
    passages = list(passage_ids)
    entities, facts = graph.remove_passages(passages)
    synonymy.forget(entities)
    return Removal(passages, entities, facts)


def commit_removal(removal: Removal, stores: GraphStores, root: Path | None, save: Callable[[], object] | None) -> None:
    """End a change in the module docstring's order: record the ids to delete in ``root``, ``save``, delete."""
    if save is not None and root is not None:
        if removal:
            write_json(root / REMOVAL_FILE, removal.to_json())
        save()
    removal.delete_from(stores)
    if root is not None:
        (root / REMOVAL_FILE).unlink(missing_ok=True)


def as_documents(documents: Document | Sequence[Document] | str | os.PathLike[str]) -> list[Document]:
    """Documents from one ``Document``, a sequence of them, or a corpus path (``stores.corpus.load_documents``)."""
    if isinstance(documents, Document):
        return [documents]
    return load_documents(documents if isinstance(documents, str | os.PathLike) else list(documents))


def corpus_of(documents: Any) -> str | os.PathLike[str] | None:
    """The folder or file documents were read from (None: documents given as objects)."""
    return documents if isinstance(documents, str | os.PathLike) else None


def finish_removal(root: Path, graph: KnowledgeGraph, stores: GraphStores) -> None:
    """Complete a removal a killed sync left: delete the listed rows the saved graph no longer names."""
    path = root / REMOVAL_FILE
    if not path.is_file():
        return
    data = read_json_object(path)
    lists = {}
    for key in ("passages", "entities", "facts"):
        lists[key] = check_field(data, key, list, str(path), default=[])
        for item in lists[key]:
            check_value(item, str, str(path), key)
    Removal(**lists).unnamed_by(graph).delete_from(stores)
    path.unlink()


def load_docstore(path: Path) -> SimpleDocumentStore:
    """The document store an older index saved at ``path`` (checked first), or an empty one."""
    return docstore_from_dict(read_json_object(path), str(path)) if path.is_file() else SimpleDocumentStore()


def docstore_from_dict(data: dict, where: str) -> SimpleDocumentStore:
    """A document store from its saved dict, each field checked first (a ValueError names ``where``)."""
    check_value(data, dict, where, "docstore")
    for collection, entries in data.items():
        check_value(entries, dict, where, collection)
        for key, value in entries.items():
            check_value(value, dict, where, f"{collection}.{key}")
            check_field(value, "doc_hash", str, where, f"{collection}.{key}.", None)
    return SimpleDocumentStore.from_dict(data)


def known_doc_ids(docstore: SimpleDocumentStore, graph: KnowledgeGraph) -> set[str]:
    """Every doc id the index knows: those with a recorded hash and those the graph's passages name."""
    return set(docstore.get_all_document_hashes().values()) | set(passages_by_document(graph))
