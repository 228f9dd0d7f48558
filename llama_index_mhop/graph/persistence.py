"""A graph index on disk: its config and its graph as JSON files with a format version (nothing is pickled).

Every file is written to a temporary name and renamed into place, so a crash never leaves a half-written file,
and every file read is checked before anything is built from it: a truncated or edited file is an error naming
the file, never half-read.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..stores import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from .checkpoint import CHECKPOINT_FILE
from .graph_stores import CHROMA_DIR, DEFAULT_SHORT_TEXT_BATCH_SIZE
from .indexing import DEFAULT_INSERT_BATCH_SIZE
from .knowledge_graph import KnowledgeGraph
from .synonymy import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES

if TYPE_CHECKING:
    from .index import HippoGraphIndex

__all__ = [
    "CONFIG_FILE",
    "GRAPH_FILE",
    "INDEX_FORMAT_VERSION",
    "SavedIndex",
    "index_config",
    "read_json",
    "read_saved_index",
    "save_index",
    "write_json",
]

logger = logging.getLogger(__name__)

INDEX_FORMAT_VERSION = 1
CONFIG_FILE = "hippo_config.json"
GRAPH_FILE = "hippo_graph.json"


def read_json(path: Path) -> dict[str, Any]:
    """A saved JSON object, or a ValueError naming the file (a truncated or edited file is never half-read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); the Chroma data is untouched") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write JSON atomically: to a temporary file first, then renamed over ``path``."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)  # never leave a half-written file behind


@dataclass(frozen=True)
class SavedIndex:
    """The files of a saved index, read and checked."""

    root: Path
    config: dict[str, Any]
    graph: KnowledgeGraph

    def warn_if_other_embedder(self, embed_model: Any) -> None:
        """Log a warning when the index is opened with another embedder than it was built with."""
        saved = (self.config.get("embed_model") or {}).get("model_name")
        if saved and getattr(embed_model, "model_name", saved) != saved:
            logger.warning("index %s was built with embedder %s, queried with %s", self.root, saved,
                           getattr(embed_model, "model_name", None))

    def index_arguments(self) -> dict[str, Any]:
        """The saved name and indexing settings as ``HippoGraphIndex`` arguments."""
        config = self.config
        return {
            "name": config["name"],
            "chunk_size": config.get("chunk_size", DEFAULT_CHUNK_SIZE),
            "chunk_overlap": config.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
            "insert_batch_size": config.get("insert_batch_size", DEFAULT_INSERT_BATCH_SIZE),
            "short_text_batch_size": config.get("short_text_batch_size", DEFAULT_SHORT_TEXT_BATCH_SIZE),
            "exact_synonymy_max_entities": config.get("exact_synonymy_max_entities",
                                                      DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES),
        }


def read_saved_index(root: Path) -> SavedIndex:
    """Read and check the config and graph saved in ``root``.

    Raises:
        FileNotFoundError: no saved index in ``root``.
        ValueError: an unreadable file or an unknown format version.
    """
    config_path, graph_path = root / CONFIG_FILE, root / GRAPH_FILE
    if not config_path.is_file() or not graph_path.is_file():
        raise FileNotFoundError(f"no HippoGraphIndex saved in {root} (expected {CONFIG_FILE} and {GRAPH_FILE})")
    config = read_json(config_path)
    if config.get("format_version") != INDEX_FORMAT_VERSION:
        raise ValueError(
            f"{config_path}: unsupported format version {config.get('format_version')!r} "
            f"(this code reads {INDEX_FORMAT_VERSION})"
        )
    try:
        graph = KnowledgeGraph.from_dict(read_json(graph_path))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{graph_path}: not a valid graph file ({type(exc).__name__}: {exc})") from exc
    return SavedIndex(root, config, graph)


def index_config(index: HippoGraphIndex) -> dict[str, Any]:
    """What reopening an index needs besides the graph: names, embedder and indexing settings."""
    model = index.embed_model
    stores = index.stores
    return {
        "format_version": INDEX_FORMAT_VERSION,
        "name": index.name,
        "chroma": stores.mode if stores.mode != "ephemeral" else "local",
        "collections": stores.collection_names(),
        "embed_model": {"class": type(model).__name__, "model_name": getattr(model, "model_name", None)},
        "chunk_size": index.chunk_size,
        "chunk_overlap": index.chunk_overlap,
        "insert_batch_size": index.insert_batch_size,
        "short_text_batch_size": stores.short_text_batch_size,
        "exact_synonymy_max_entities": index.exact_synonymy_max_entities,
    }


def save_index(index: HippoGraphIndex, target: Path) -> None:
    """Write the config and the graph into ``target`` (copying an in-memory Chroma to ``target/chroma`` first);
    the checkpoint goes, since the graph file now holds everything it listed."""
    target.mkdir(parents=True, exist_ok=True)
    if index.stores.mode == "ephemeral":
        index.stores.copy_to(target / CHROMA_DIR)
    write_json(target / CONFIG_FILE, index_config(index))
    write_json(target / GRAPH_FILE, index.graph.to_dict())
    checkpoint = target / CHECKPOINT_FILE
    if checkpoint.exists():
        checkpoint.unlink()
