"""A graph index on disk: its config (JSON) and its graph as ``tables.json`` plus ``.npy`` arrays (nothing is
pickled), the arrays memory-mapped read-only on load so that every query process opening the same folder shares
one copy of the edges.

Every file is written to a temporary name and renamed into place, so a crash never leaves a half-written file,
and every file read is checked before anything is built from it: a truncated or edited file is an error naming
the file, never half-read. Indexes saved before the arrays (format 1: the graph as one ``hippo_graph.json``) are
still read, and written in the current format by their next save.
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.storage_context import StorageContext

from ..embed_dtype import check_embed_dtype
from ..stores import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from .checkpoint import CHECKPOINT_FILE
from .graph_files import load_graph, open_graph_files
from .graph_stores import CHROMA_DIR, DEFAULT_SHORT_TEXT_BATCH_SIZE, missing_collections, saved_client
from .indexing import DEFAULT_INSERT_BATCH_SIZE
from .json_files import check_field, check_value, read_json_object, string_map, triple_map, write_json
from .knowledge_graph import KnowledgeGraph
from .layout import (
    CONFIG_FILE,
    GRAPH_DIR,
    GRAPH_FILE,
    LEGACY_GRAPH_FILE,
    STORAGE_SCRATCH_DIR,
    saved_index_exists,
)
from .sync import DOCSTORE_FILE, docstore_from_dict, finish_removal, load_docstore
from .synonymy import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES

if TYPE_CHECKING:
    from .index import HippoGraphIndex

__all__ = [
    "CONFIG_FILE",
    "GRAPH_DIR",
    "GRAPH_FILE",
    "INDEX_FORMAT_VERSION",
    "LEGACY_GRAPH_FILE",
    "SavedIndex",
    "index_config",
    "finish_reopen",
    "persist_storage_context",
    "read_saved_index",
    "save_index",
    "saved_index_exists",
]

logger = logging.getLogger(__name__)

INDEX_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # 1: the graph as one JSON file (LEGACY_GRAPH_FILE)


_CONFIG_FIELDS: dict[str, tuple[type, ...]] = {
    "chroma": (str,),
    "collections": (dict,),
    "embed_model": (dict, type(None)),
    "chunk_size": (int,),
    "chunk_overlap": (int,),
    "insert_batch_size": (int,),
    "short_text_batch_size": (int, type(None)),
    "short_text_dtype": (str,),
    "exact_synonymy_max_entities": (int,),
}
#: An index saved before ``short_text_dtype`` existed embedded its short texts in float32: later ones match them.
_SAVED_BEFORE_SHORT_TEXT_DTYPE = "float32"
_GRAPH_FIELDS: dict[str, tuple[type, ...]] = {
    "version": (int,),
    "config": (dict,),
    "synonyms": (dict,),
    "stale_synonyms": (list,),
    "nodes": (list,),
    "edges": (list,),
    "node_keys": (list,),
    "free_slots": (list,),
}


def _check_config(config: dict[str, Any], where: str) -> None:
    if config.get("format_version") not in _READABLE_VERSIONS:
        raise ValueError(
            f"{where}: unsupported format version {config.get('format_version')!r} "
            f"(this code reads {', '.join(map(str, _READABLE_VERSIONS))})"
        )
    check_field(config, "name", str, where)
    for key, kinds in _CONFIG_FIELDS.items():
        check_field(config, key, kinds, where, default=None)
    try:
        check_embed_dtype(config.get("short_text_dtype", _SAVED_BEFORE_SHORT_TEXT_DTYPE))
    except ValueError as exc:
        raise ValueError(f"{where}: short_text_dtype: {exc}") from None
    if config.get("chroma", "local") not in ("local", "external"):
        raise ValueError(f"{where}: chroma: expected \"local\" or \"external\", got {config['chroma']!r}")
    check_field(config.get("embed_model") or {}, "model_name", (str, type(None)), where, "embed_model.", None)
    for kind, collection in (config.get("collections") or {}).items():
        check_value(collection, str, where, f"collections.{kind}")


def _check_graph_data(data: dict[str, Any], where: str) -> None:
    """The types of the graph file's fields (their contents are checked by ``KnowledgeGraph.from_dict``)."""
    for key, kinds in _GRAPH_FIELDS.items():
        check_field(data, key, kinds, where, default=None)
    string_map(data, "entities", where)
    triple_map(data, "facts", where)
    for pid, record in check_field(data, "passages", dict, where).items():
        check_value(record, dict, where, f"passages.{pid}")
        for key in ("entities", "facts"):
            check_field(record, key, list, where, f"passages.{pid}.")
        check_field(record, "title_entities", list, where, f"passages.{pid}.", None)


def _check_graph_links(data: dict[str, Any], where: str) -> None:
    """Every fact and passage of the graph file names entities (and facts) it holds: a query never meets an unknown
    id. Checked on the file's data, before the graph is built, so the error names the field."""
    entities, facts = data["entities"], data["facts"]
    for fact_id, (subject, _, obj) in facts.items():
        for entity_id in (subject, obj):
            if entity_id not in entities:
                raise ValueError(f"{where}: facts.{fact_id}: names entity {entity_id!r}, which is not in entities")
    for pid, record in data["passages"].items():
        for field, known in (("entities", entities), ("facts", facts)):
            for item in record[field]:
                if not isinstance(item, str) or item not in known:
                    raise ValueError(f"{where}: passages.{pid}.{field}: {item!r} is not in {field}")


@dataclass(frozen=True)
class SavedIndex:
    """The files of a saved index, read and checked."""

    root: Path
    config: dict[str, Any]
    graph: KnowledgeGraph
    docstore: SimpleDocumentStore

    def warn_if_other_embedder(self, embed_model: Any) -> None:
        """Log a warning when the index is opened with another embedder than it was built with."""
        saved = (self.config.get("embed_model") or {}).get("model_name")
        if saved and getattr(embed_model, "model_name", saved) != saved:
            logger.warning("index %s was built with embedder %s, queried with %s", self.root, saved,
                           getattr(embed_model, "model_name", None))

    def open_store(self, chroma_client: Any) -> tuple[Any, str]:
        """The Chroma client of the index and its mode (see ``graph_stores.saved_client``), checked to hold the
        index's collections before anything is created in it."""
        client, mode = saved_client(chroma_client, self.config.get("chroma", "local"), self.root)
        self._check_store(client)
        return client, mode

    def _check_store(self, client: Any) -> None:
        """Refuse a Chroma store without this index's collections."""
        from ..defaults import describe_client

        name = self.config["name"]
        missing = missing_collections(client, self.index_arguments()["collection_prefix"] or name)
        if missing:
            raise ValueError(
                f"{self.root / CONFIG_FILE}: name: {describe_client(client)} has no collection {missing[0]!r} of "
                f"index {name!r}: pass the chroma_client the index was built with"
            )

    def index_arguments(self) -> dict[str, Any]:
        """The saved name and indexing settings as ``HippoGraphIndex`` arguments."""
        config = self.config
        passages = (config.get("collections") or {}).get("passages", "")
        return {
            "name": config["name"],
            "collection_prefix": passages.removesuffix("_passages") if passages.endswith("_passages") else None,
            "chunk_size": config.get("chunk_size", DEFAULT_CHUNK_SIZE),
            "chunk_overlap": config.get("chunk_overlap", DEFAULT_CHUNK_OVERLAP),
            "insert_batch_size": config.get("insert_batch_size", DEFAULT_INSERT_BATCH_SIZE),
            "short_text_batch_size": config.get("short_text_batch_size", DEFAULT_SHORT_TEXT_BATCH_SIZE),
            "short_text_dtype": config.get("short_text_dtype", _SAVED_BEFORE_SHORT_TEXT_DTYPE),
            "exact_synonymy_max_entities": config.get("exact_synonymy_max_entities",
                                                      DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES),
        }


def read_saved_index(root: Path) -> SavedIndex:
    """Read and check the config and graph saved in ``root``.

    Raises:
        FileNotFoundError: no saved index in ``root``.
        ValueError: an unreadable file or an unknown format version.
    """
    config_path = root / CONFIG_FILE
    graph_path = root / GRAPH_FILE if (root / GRAPH_FILE).is_file() else root / LEGACY_GRAPH_FILE
    if not config_path.is_file() or not graph_path.is_file():
        raise FileNotFoundError(f"no HippoGraphIndex saved in {root} (expected {CONFIG_FILE} and {GRAPH_FILE})")
    config = read_json_object(config_path)
    _check_config(config, str(config_path))
    legacy = graph_path.name == LEGACY_GRAPH_FILE
    # the arrays are opened right after tables.json is read: see graph_files.open_graph_files
    data, arrays = (read_json_object(graph_path), {}) if legacy else open_graph_files(root / GRAPH_DIR, mmap=True)
    _check_graph_data(data, str(graph_path))
    _check_graph_links(data, str(graph_path))
    attached = check_field(data, "attached", dict, str(graph_path), default={})
    docstore = (docstore_from_dict(attached["docstore"], f"{graph_path}: attached")
                if "docstore" in attached else load_docstore(root / DOCSTORE_FILE))
    try:
        if legacy:
            graph = KnowledgeGraph.from_dict(data)
        else:
            graph = KnowledgeGraph(**data.get("config", {}))
            load_graph(graph, root / GRAPH_DIR, data, arrays)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"{graph_path}: not a valid graph file ({type(exc).__name__}: {exc})") from None
    return SavedIndex(root, config, graph, docstore)


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
        "short_text_dtype": stores.short_text_dtype,
        "exact_synonymy_max_entities": index.exact_synonymy_max_entities,
    }


def save_index(index: HippoGraphIndex, target: Path) -> None:
    """Write the graph with its documents' hashes, then LlamaIndex's files of its storage context, then the config,
    into ``target`` (copying an in-memory Chroma to ``target/chroma`` first).

    The graph and its documents' hashes become visible together, in one atomic replace of ``tables.json``; the
    config goes last, so a folder a first save was killed in holds no index yet (the next build starts it again,
    resuming from the checkpoint), never half of one. The checkpoint goes once the graph holds everything it
    listed, and so do the files of older formats."""
    target.mkdir(parents=True, exist_ok=True)
    if index.stores.mode == "ephemeral":
        index.stores.copy_to(target / CHROMA_DIR, sorted(index.graph.passages))
    index.graph.save(target / GRAPH_DIR, attached={"docstore": index.document_hashes.to_dict()})
    persist_storage_context(index.storage_context, target)
    write_json(target / CONFIG_FILE, index_config(index))
    for done in (target / CHECKPOINT_FILE, target / LEGACY_GRAPH_FILE, target / DOCSTORE_FILE):
        done.unlink(missing_ok=True)


def persist_storage_context(storage_context: StorageContext, target: Path) -> None:
    """LlamaIndex's files of a storage context (``docstore.json``, ``index_store.json``, ...) written into
    ``target``, each replaced whole: LlamaIndex writes them in place, so they are written into a scratch folder
    first and renamed into ``target``, and a crash never leaves a truncated one."""
    scratch = target / STORAGE_SCRATCH_DIR
    shutil.rmtree(scratch, ignore_errors=True)  # one a killed save left (writers hold the store lock: never a live one)
    storage_context.persist(persist_dir=scratch)
    for written in sorted(scratch.iterdir()):
        os.replace(written, target / written.name)
    scratch.rmdir()


def finish_reopen(index: HippoGraphIndex, saved: SavedIndex) -> None:
    """What reopening an index does once it is built from ``saved``: the vector index collection it read in place
    is found again, a removal a killed sync left is completed, and a store missing passages is refused."""
    root = saved.root
    source = (saved.config.get("collections") or {}).get("passage_source")
    if source is not None:  # a collection of the index's own client: read in place, as when it was saved
        index.stores.passage_source = _collection(index.chroma_client, source, root)
    finish_removal(root, saved.graph, index.stores)
    # A vector index whose collection the graph reads in place may have synced first: no count to hold it to.
    stored = index.passages_collection.count()
    if source is None and saved.graph.num_passages and stored < saved.graph.num_passages:
        raise ValueError(
            f"the Chroma collection {index.passages_collection.name!r} holds {stored} passages but the graph in "
            f"{root} has {saved.graph.num_passages}: pass the chroma_client the index was built with"
        )


def _collection(client: Any, name: str, root: Path) -> Any:
    """The named collection of ``client``, or a clear error naming the saved index that expects it."""
    from chromadb.errors import NotFoundError

    from ..defaults import describe_client

    try:
        return client.get_collection(name)
    except NotFoundError:
        raise ValueError(
            f"{root / CONFIG_FILE}: {describe_client(client)} has no collection {name!r}, the vector index "
            "collection the graph reads its passages from: pass the chroma_client the index was built with"
        ) from None
