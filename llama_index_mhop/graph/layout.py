"""Where a saved graph index keeps its files, and whether a folder holds one: names only, nothing opened."""

from __future__ import annotations

from pathlib import Path

__all__ = ["CONFIG_FILE", "GRAPH_DIR", "GRAPH_FILE", "LEGACY_GRAPH_FILE", "STORAGE_SCRATCH_DIR", "TABLES_FILE", "saved_index_exists"]

CONFIG_FILE = "hippo_config.json"
GRAPH_DIR = "hippo_graph"
TABLES_FILE = "tables.json"
GRAPH_FILE = f"{GRAPH_DIR}/{TABLES_FILE}"
#: Where LlamaIndex's storage files are written before each is renamed into the index's folder.
STORAGE_SCRATCH_DIR = "storage.partial"
#: Format 1: the whole graph as one JSON file.
LEGACY_GRAPH_FILE = "hippo_graph.json"


def saved_index_exists(root: Path) -> bool:
    """Whether ``root`` holds a saved index: its graph and, written last, its config. A folder a first save was
    killed in does not (the next build starts again, resuming from its checkpoint)."""
    return (root / CONFIG_FILE).is_file() and ((root / GRAPH_FILE).is_file() or (root / LEGACY_GRAPH_FILE).is_file())
