"""What ``mhop status`` reports, read from Chroma's records and the graph index's saved files as they are: no
index is opened, no embedder loaded, nothing written. ``tests/test_cli_start.py`` checks both readings agree."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..graph.graph_files import open_graph_files
from ..graph.json_files import read_json_object
from ..graph.layout import CONFIG_FILE, GRAPH_DIR, LEGACY_GRAPH_FILE, TABLES_FILE
from ..stores.chroma_batches import pages
from .arguments import SYNC_LOG_SUFFIX

__all__ = ["graph_status", "passage_status"]

#: Row metadata of the passage index: LlamaIndex's document id, and the folder or file a document came from.
DOCUMENT_ID_KEY = "document_id"
SOURCE_KEY = "source"
#: ``KnowledgeGraph``'s default title edge weight (its module is not imported: ``mhop status`` stays light).
DEFAULT_TITLE_EDGE_WEIGHT = 10.0
_PAGE = 5000


def _has_collection(client: Any, name: str) -> bool:
    return name in {getattr(c, "name", c) for c in client.list_collections()}


def passage_status(client: Any, collection_name: str) -> dict[str, Any]:
    """A passage collection's documents, passages, sources and last sync (ValueError when there is none)."""
    if not _has_collection(client, collection_name):
        raise ValueError(f"no Chroma collection {collection_name!r}; index a corpus first (mhop index PATH)")
    collection = client.get_collection(collection_name)
    passages = collection.count()
    documents: set[str] = set()
    sources: set[str] = set()
    for page in pages(collection, ["metadatas"], _PAGE):
        for meta in page["metadatas"] or []:
            meta = meta or {}
            documents.add(str(meta.get(DOCUMENT_ID_KEY, "")))
            if meta.get(SOURCE_KEY):
                sources.add(meta[SOURCE_KEY])
    last = None
    log_name = collection_name + SYNC_LOG_SUFFIX
    if _has_collection(client, log_name):
        rows = client.get_collection(log_name).get(ids=["last"], include=["metadatas"])["metadatas"]
        last = dict(rows[0]) if rows else None
    return {"collection": collection_name, "documents": len(documents), "passages": passages,
            "sources": sorted(sources), "last_sync": last}


def _sized(data: dict[str, Any], key: str, kind: type, where: Path) -> Any:
    value = data.get(key)
    if not isinstance(value, kind):
        raise ValueError(f"{where}: {key}: expected a JSON {'object' if kind is dict else 'array'}")
    return value


def _edge_count(folder: Path, tables: dict[str, Any], values: Any) -> int:
    """Edges of positive weight in the saved edge table ``values`` (``KnowledgeGraph.num_edges``)."""
    import numpy as np

    from ..graph.graph_arrays import FACTS, PLAIN, SYNONYMY, SYNONYMY_SCALE, TITLE
    if values.shape[1] != 4:
        raise ValueError(f"{folder / tables['arrays']['edge_values']}: expected 4 edge channels, got shape "
                         f"{values.shape}")
    config = tables.get("config") if isinstance(tables.get("config"), dict) else {}
    title_weight = float(config.get("title_edge_weight", DEFAULT_TITLE_EDGE_WEIGHT))
    weight = (values[:, FACTS].astype(np.float64) + values[:, SYNONYMY] / SYNONYMY_SCALE + values[:, PLAIN]
              + values[:, TITLE] * title_weight)
    return int((weight > 0).sum())


def _graph_counts(root: Path) -> tuple[dict[str, Any], dict[str, int], list[str]]:
    """The saved config, the graph's own counts and its passage ids, from the files alone."""
    config_path, tables_path = root / CONFIG_FILE, root / GRAPH_DIR / TABLES_FILE
    legacy_path = root / LEGACY_GRAPH_FILE
    if not config_path.is_file() or not (tables_path.is_file() or legacy_path.is_file()):
        raise FileNotFoundError(
            f"no HippoGraphIndex saved in {root} (expected {CONFIG_FILE} and {GRAPH_DIR}/{TABLES_FILE})")
    config = read_json_object(config_path)  # each checked against its recorded digest
    path = tables_path if tables_path.is_file() else legacy_path
    if path == tables_path:
        data, arrays, _ = open_graph_files(root / GRAPH_DIR, mmap=True)
        nodes = sum(key is not None for key in _sized(data, "node_keys", list, path))
        edges = _edge_count(root / GRAPH_DIR, data, arrays["edge_values"])
    else:  # format 1: node and edge lists (the edges of positive weight)
        data = read_json_object(path)
        nodes, edges = len(_sized(data, "nodes", list, path)), len(_sized(data, "edges", list, path))
    counts = {key: len(_sized(data, key, dict, path)) for key in ("passages", "entities", "facts")}
    return config, {**counts, "graph_nodes": nodes, "graph_edges": edges}, list(data["passages"])


def graph_status(client: Any, graph_dir: str | Path) -> dict[str, Any]:
    """The counts of the graph index saved in ``graph_dir``, keyed as ``HippoGraphIndex.counts()``:
    FileNotFoundError when none is saved there, ValueError for an unreadable file or a store without its collections."""
    from chromadb.errors import NotFoundError

    from ..graph.reconcile import find_drift
    root = Path(graph_dir)
    config, counts, passage_ids = _graph_counts(root)
    name = config.get("name")
    collections = config.get("collections") if isinstance(config.get("collections"), dict) else {}
    records: dict[str, int] = {}
    opened: dict[str, Any] = {}
    for kind in ("passages", "entities", "facts", "passage_source"):
        collection = collections.get(kind) or (f"{name}_{kind}" if kind != "passage_source" else None)
        if collection is None:
            continue
        try:
            opened[kind] = client.get_collection(str(collection))
            records[kind] = opened[kind].count()
        except NotFoundError:
            raise ValueError(f"{root / CONFIG_FILE}: the Chroma store has no collection {collection!r} of "
                             f"graph index {name!r}: give the --chroma-path (or server) it was built with") from None
    return {"passages": counts["passages"], "entities": counts["entities"], "facts": counts["facts"],
            "chroma_passages": records["passages"] + records.get("passage_source", 0),
            "chroma_entities": records["entities"], "chroma_facts": records["facts"],
            "graph_nodes": counts["graph_nodes"], "graph_edges": counts["graph_edges"],
            **_drift_report(find_drift(passage_ids, opened["passages"], opened.get("passage_source")))}


def _drift_report(drift: Any) -> dict[str, Any]:
    """The graph's drift from the passages it stands on, and when there is any, what brings it in step."""
    report: dict[str, Any] = {"drift": drift.counts()}
    if drift:
        report["warning"] = (f"the graph is behind its passages ({len(drift.gone)} gone, {len(drift.new)} new): "
                             "`mhop index PATH` (or HippoGraphIndex.reconcile()) brings it in step")
    return report
