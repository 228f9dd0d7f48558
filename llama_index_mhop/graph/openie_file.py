"""OpenIE results in HippoRAG's file format (``openie_results_ner_<model>.json``), read, written and served; the
file is untrusted, so it is validated record by record."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from llama_index.core.schema import MetadataMode

from ..rules.atomic_files import write_atomic
from ..stores.chroma_batches import CHROMA_BATCH
from .extraction import Extraction, Extractor, OpenIEExtractor

logger = logging.getLogger(__name__)

__all__ = ["OpenIEFileError", "StoredOpenIE", "export_openie", "passage_key", "read_openie", "report_stored_openie",
           "with_stored_openie", "write_openie"]


class OpenIEFileError(ValueError):
    """An OpenIE results file that is not in HippoRAG's format."""


def passage_key(passage: str) -> str:
    """The key a passage's extraction is stored under: the SHA-256 of its stripped text."""
    return hashlib.sha256(passage.strip().encode("utf-8")).hexdigest()


def _strings(value: Any, what: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise OpenIEFileError(f"{where}: {what} must be a list of strings")
    return value


def _record(record: Any, where: str) -> tuple[str, Extraction]:
    if not isinstance(record, dict):
        raise OpenIEFileError(f"{where}: expected an object with 'passage', 'extracted_entities', 'extracted_triples'")
    passage = record.get("passage")
    if not isinstance(passage, str) or not passage.strip():
        raise OpenIEFileError(f"{where}: 'passage' must be a non-empty string")
    entities = _strings(record.get("extracted_entities", []), "'extracted_entities'", where)
    raw_triples = record.get("extracted_triples", [])
    if not isinstance(raw_triples, list):
        raise OpenIEFileError(f"{where}: 'extracted_triples' must be a list of [subject, predicate, object]")
    parts = [_strings(triple, f"triple {number}", where) for number, triple in enumerate(raw_triples)]
    # HippoRAG keeps an LLM's malformed triples in the file and filters them when it builds the graph.
    triples = tuple((t[0], t[1], t[2]) for t in parts if len(t) == 3)
    return passage, Extraction(entities=tuple(entities), triples=triples, from_lm=True)


def read_openie(path: str | os.PathLike[str]) -> dict[str, Extraction]:
    """The extractions of a HippoRAG OpenIE results file by :func:`passage_key` (else :class:`OpenIEFileError`)."""
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise OpenIEFileError(f"{path}: not a readable JSON file ({type(exc).__name__}: {exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("docs"), list):
        raise OpenIEFileError(f"{path}: expected an object with a 'docs' list (HippoRAG's OpenIE results)")
    extractions: dict[str, Extraction] = {}
    for position, record in enumerate(data["docs"]):
        passage, extraction = _record(record, f"{path}: docs[{position}]")
        extractions.setdefault(passage_key(passage), extraction)
    return extractions


def write_openie(path: str | os.PathLike[str], extractions: Iterable[tuple[str, Extraction]]) -> Path:
    """Write (passage, extraction) pairs as a HippoRAG OpenIE results file (HippoRAG reads it); the path."""
    docs = [{"idx": "chunk-" + hashlib.md5(passage.encode("utf-8")).hexdigest(),  # noqa: S324 - HippoRAG's id
             "passage": passage, "extracted_entities": list(extraction.entities),
             "extracted_triples": [list(triple) for triple in extraction.triples]}
            for passage, extraction in extractions]
    names = [name for doc in docs for name in doc["extracted_entities"]]
    data = {"docs": docs,
            "avg_ent_chars": round(sum(len(n) for n in names) / len(names), 4) if names else 0,
            "avg_ent_words": round(sum(len(n.split()) for n in names) / len(names), 4) if names else 0}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))  # a reader never sees half a file
    return path


class StoredOpenIE:
    """An :class:`~.extraction.Extractor` serving the HippoRAG OpenIE results file at ``path``, the other passages
    extracted by ``fallback``."""

    def __init__(self, path: str | os.PathLike[str], fallback: Extractor | None = None) -> None:
        self.path = Path(path)
        self.stored = read_openie(self.path)
        self.fallback: Extractor = fallback if fallback is not None else OpenIEExtractor()
        self.from_file = 0
        self.extracted = 0
        self.served: list[tuple[str, Extraction]] = []
        self._lock = threading.Lock()

    @property
    def uses_lm(self) -> bool:
        return bool(getattr(self.fallback, "uses_lm", False))

    @property
    def fallback_counts(self) -> Any:
        return getattr(self.fallback, "fallback_counts", None)

    def lookup(self, text: str, title: str | None = None) -> Extraction | None:
        """The stored extraction of the passage, or None."""
        candidates = [f"{title}\n{text}", text] if title else [text]
        for passage in candidates:
            found = self.stored.get(passage_key(passage))
            if found is not None:
                return found
        return None

    def extract(self, text: str, title: str | None = None) -> Extraction:
        """The stored extraction when the file holds the passage, else the fallback's."""
        stored = self.lookup(text, title)
        extraction = stored if stored is not None else self.fallback.extract(text, title)
        with self._lock:
            self.from_file += stored is not None
            self.extracted += stored is None
            self.served.append((f"{title}\n{text}" if title else text, extraction))
        return extraction


def with_stored_openie(extractor: Extractor, path: str | os.PathLike[str] | None) -> Extractor:
    """``extractor`` behind the stored OpenIE results of ``path`` (None: ``extractor`` itself)."""
    return extractor if path is None else StoredOpenIE(path, fallback=extractor)


def report_stored_openie(extractor: Extractor) -> None:
    """Log how many passages took their extraction from a stored OpenIE file, and how many were extracted."""
    if isinstance(extractor, StoredOpenIE):
        logger.info("OpenIE: %d passages from %s, %d extracted", extractor.from_file, extractor.path,
                    extractor.extracted)


def export_openie(index: Any, path: str | os.PathLike[str]) -> Path:
    """Write a ``HippoGraphIndex``'s extractions (passages as ``"title\\ntext"``) as HippoRAG's file; the path."""
    state, graph = index.retrieval_state(), index.graph
    names, extractions = graph.entity_names, []
    for start in range(0, len(state.passage_ids), CHROMA_BATCH):
        rows = range(start, min(start + CHROMA_BATCH, len(state.passage_ids)))
        for row, node in state.passage_nodes(rows).items():
            record = graph.passages.get(state.passage_ids[row])
            if record is None:
                continue
            triples = tuple((names[s], p, names[o]) for s, p, o in (graph.facts[f] for f in record.facts))
            title = node.metadata.get("title") or ""
            text = node.get_content(metadata_mode=MetadataMode.NONE)
            extractions.append((f"{title}\n{text}" if title else text,
                                Extraction(entities=tuple(names[e] for e in record.entities), triples=triples)))
    return write_openie(path, extractions)
