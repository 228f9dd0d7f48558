"""A graph index on disk: its config (JSON, checked by pydantic) and its graph (:mod:`.graph_files`; nothing is
pickled). Every file is replaced whole and checked against its recorded digest before use; all of it is derived
from Chroma and the corpus, so a damaged save is rebuilt (:func:`discard_damaged_save`). Format 1 saves (one
``hippo_graph.json``) are still read."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llama_index.core import StorageContext
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.graph_stores.types import DEFAULT_PERSIST_FNAME as GRAPH_STORE_FNAME
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import DEFAULT_PERSIST_FNAME as DOCSTORE_FNAME
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.storage.index_store.types import DEFAULT_PERSIST_FNAME as INDEX_STORE_FNAME
from pydantic import BaseModel, StrictInt, StrictStr

from ..stores.corpus import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE
from ..stores.embed_dtype import check_embed_dtype
from .checkpoint import CHECKPOINT_FILE
from .graph_files import open_graph_files
from .graph_stores import (
    CHROMA_DIR,
    DEFAULT_SHORT_TEXT_BATCH_SIZE,
    GraphStores,
    missing_collections,
    resolve_client,
    saved_client,
)
from .index_config import HippoGraphIndexConfig
from .index_struct import SAVED_BESIDE, HippoGraphStruct
from .indexing import DEFAULT_INSERT_BATCH_SIZE
from .json_files import (
    DamagedFileError,
    JsonRecords,
    check_links,
    check_model,
    read_json_object,
    write_json,
)
from .knowledge_graph import KnowledgeGraph
from .layout import (
    CONFIG_FILE,
    GRAPH_DIR,
    GRAPH_FILE,
    LEGACY_GRAPH_FILE,
    STORAGE_SCRATCH_DIR,
    saved_index_exists,
)
from .state_files import STATE_FOLDER
from .sync import DOCSTORE_FILE, docstore_from_dict, load_docstore
from .synonym_lists import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES
from .walk.basis_files import BASIS_FOLDER

__all__ = ["CONFIG_FILE", "GRAPH_DIR", "GRAPH_FILE", "INDEX_FORMAT_VERSION", "LEGACY_GRAPH_FILE", "OpenedIndex",
           "SavedConfig", "SavedIndex", "discard_damaged_save", "finish_reopen", "open_saved_index",
           "persist_storage_context", "read_saved_config", "read_saved_index", "save_index", "saved_config",
           "saved_index_exists", "saved_storage"]

logger = logging.getLogger(__name__)

INDEX_FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)  # 1: the graph as one JSON file (LEGACY_GRAPH_FILE)
#: What a damaged save's error tells the user to do: everything in the folder but Chroma is derived data.
_REBUILD = ("the graph index is derived from Chroma and the corpus: rebuild it with `mhop index CORPUS --graph` "
            "(or HippoGraphIndex.from_documents / from_vector_index with this persist_dir)")
#: LlamaIndex's files of the index's storage context, written by ``StorageContext.persist``.
_STORAGE_FILES = (DOCSTORE_FNAME, INDEX_STORE_FNAME, GRAPH_STORE_FNAME)
#: What a rebuild removes: every file the index derives from Chroma and the corpus (never Chroma's own folder, the
#: checkpoint a killed build resumes from, a pending removal or the LM programs).
_DERIVED = (CONFIG_FILE, GRAPH_DIR, LEGACY_GRAPH_FILE, STORAGE_SCRATCH_DIR, *_STORAGE_FILES, STATE_FOLDER,
            BASIS_FOLDER, DOCSTORE_FILE)


class _EmbedModel(BaseModel, extra="allow"):
    model_name: StrictStr | None = None


class _Config(BaseModel, extra="allow"):
    """The config file's fields; a setting an index saved before it existed defaults to what it was built with."""
    name: StrictStr
    chroma: Literal["local", "external"] = "local"
    collections: dict[str, StrictStr] = {}
    embed_model: _EmbedModel | None = None
    chunk_size: StrictInt = DEFAULT_CHUNK_SIZE
    chunk_overlap: StrictInt = DEFAULT_CHUNK_OVERLAP
    insert_batch_size: StrictInt = DEFAULT_INSERT_BATCH_SIZE
    short_text_batch_size: StrictInt | None = DEFAULT_SHORT_TEXT_BATCH_SIZE
    short_text_dtype: StrictStr = "float32"  # before the setting, short texts were embedded in float32
    exact_synonymy_max_entities: StrictInt = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES


#: The index settings (:class:`HippoGraphIndexConfig` fields) a config file records, in the order it writes them.
_SETTINGS = ("chunk_size", "chunk_overlap", "insert_batch_size", "short_text_batch_size", "short_text_dtype",
             "exact_synonymy_max_entities")


def _setting(config: dict[str, Any], key: str) -> Any:
    """A setting of a config file, or its default when the index was saved before it existed."""
    return config.get(key, _Config.model_fields[key].default)


def _damaged(exc: ValueError) -> DamagedFileError:
    return DamagedFileError(f"{exc}; {_REBUILD}")


def _read_config(path: Path) -> dict[str, Any]:
    """The checked config file of a saved index (a damaged one: :func:`_damaged`; one of an unknown format
    version: a ValueError, never a rebuild, which would write an older format over it)."""
    try:
        config = read_json_object(path)
    except DamagedFileError as exc:
        raise _damaged(exc) from None
    where = str(path)
    if config.get("format_version") not in _READABLE_VERSIONS:
        raise ValueError(f"{where}: unsupported format version {config.get('format_version')!r} "
                         f"(this code reads {', '.join(map(str, _READABLE_VERSIONS))})")
    try:
        check_model(_Config, config, where)
    except ValueError as exc:
        raise _damaged(exc) from None
    try:
        check_embed_dtype(_setting(config, "short_text_dtype"))
    except ValueError as exc:
        raise _damaged(ValueError(f"{where}: short_text_dtype: {exc}")) from None
    return config


@dataclass(frozen=True)
class SavedConfig:
    """The config file of a saved index, read and checked: what opening its store needs."""

    root: Path
    config: dict[str, Any]

    def embedder(self, embed_model: BaseEmbedding | None) -> BaseEmbedding:
        """The embedder of queries: ``embed_model``, else the default; one other than the index was built with is
        logged."""
        from ..stores.defaults import resolve_embed_model
        embed_model = resolve_embed_model(embed_model)
        saved = (self.config.get("embed_model") or {}).get("model_name")
        if saved and getattr(embed_model, "model_name", saved) != saved:
            logger.warning("index %s was built with embedder %s, queried with %s", self.root, saved,
                           getattr(embed_model, "model_name", None))
        return embed_model

    def open_store(self, chroma_client: Any) -> tuple[Any, str]:
        """The Chroma client of the index and its mode (see ``graph_stores.saved_client``), checked to hold the
        index's collections before anything is created in it."""
        from ..stores.defaults import describe_client
        client, mode = saved_client(chroma_client, self.config.get("chroma", "local"), self.root)
        name = self.config["name"]
        missing = missing_collections(client, self.collection_prefix or name)
        if missing:
            raise ValueError(f"{self.root / CONFIG_FILE}: name: {describe_client(client)} has no collection "
                             f"{missing[0]!r} of index {name!r}: pass the chroma_client the index was built with")
        return client, mode

    def open_stores(self, chroma_client: Any, embed_model: BaseEmbedding) -> GraphStores:
        """The index's collections in its store (checked as :meth:`open_store` does), the vector index collection
        it reads in place found again, to be read and searched with ``embed_model``."""
        client, mode = self.open_store(chroma_client)
        settings = self.settings()
        stores = GraphStores(client, settings["name"], embed_model, settings["short_text_batch_size"], mode,
                             self.collection_prefix, settings["short_text_dtype"])
        self.find_passage_source(stores)
        return stores

    def find_passage_source(self, stores: GraphStores) -> bool:
        """Find again the vector index collection the graph reads its passages from in place (one of the index's
        own client, as when it was saved); whether it has one."""
        source = (self.config.get("collections") or {}).get("passage_source")
        if source is not None:
            stores.passage_source = _collection(stores.client, source, self.root)
        return source is not None

    @property
    def collection_prefix(self) -> str | None:
        """The prefix of the index's collections when it is not its name (an index built in memory)."""
        passages = (self.config.get("collections") or {}).get("passages", "")
        return passages.removesuffix("_passages") if passages.endswith("_passages") else None

    def settings(self) -> dict[str, Any]:
        """The settings the index was saved with, as :class:`HippoGraphIndexConfig` fields (an index saved before a
        setting existed gets the value it was built with; its graph keeps its own synonymy settings)."""
        return {"name": self.config["name"], **{key: _setting(self.config, key) for key in _SETTINGS}}


@dataclass(frozen=True)
class SavedIndex(SavedConfig):
    """The files of a saved index, read and checked."""

    graph: KnowledgeGraph
    docstore: SimpleDocumentStore


def read_saved_config(root: Path) -> SavedConfig:
    """Read and check the config saved in ``root`` (not the graph). Raises FileNotFoundError when nothing is saved
    there, ValueError for an unreadable config or unknown format."""
    if not saved_index_exists(root):
        raise FileNotFoundError(f"no HippoGraphIndex saved in {root} (expected {CONFIG_FILE} and {GRAPH_FILE})")
    return SavedConfig(root, _read_config(root / CONFIG_FILE))


def read_saved_index(root: Path) -> SavedIndex:
    """Read and check the config and graph saved in ``root``. Raises FileNotFoundError when nothing is saved there,
    DamagedFileError for a damaged file, ValueError otherwise."""
    saved = read_saved_config(root)
    try:
        graph, docstore = _read_graph(root)
    except ValueError as exc:  # every file was checked: whatever is wrong with one is damage
        raise _damaged(exc) from None
    return SavedIndex(root, saved.config, graph, docstore)


def _read_graph(root: Path) -> tuple[KnowledgeGraph, SimpleDocumentStore]:
    legacy = not (root / GRAPH_FILE).is_file()
    graph_path = root / (LEGACY_GRAPH_FILE if legacy else GRAPH_FILE)
    # the arrays are opened right after tables.json is read: see graph_files.open_graph_files
    data, arrays, digest = ((read_json_object(graph_path), {}, None) if legacy
                            else open_graph_files(root / GRAPH_DIR, mmap=True))
    if legacy:  # the tables of a saved folder are checked as they are read
        check_model(JsonRecords, data, str(graph_path))
    check_links(data, str(graph_path))
    attached = data.get("attached") or {}
    docstore = (docstore_from_dict(attached["docstore"], f"{graph_path}: attached")
                if "docstore" in attached else load_docstore(root / DOCSTORE_FILE))
    try:
        graph = (KnowledgeGraph.from_dict(data) if legacy
                 else KnowledgeGraph.from_files(root / GRAPH_DIR, data, arrays, digest))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise ValueError(f"{graph_path}: not a valid graph file ({type(exc).__name__}: {exc})") from None
    return graph, docstore


@dataclass(frozen=True)
class OpenedIndex:
    """A saved index opened: its files read and checked, its Chroma store checked to hold its collections, and the
    embedder it is opened with."""

    saved: SavedIndex
    client: Any
    mode: str
    embed_model: BaseEmbedding


def open_saved_index(folder: str | os.PathLike[str] | None, struct: HippoGraphStruct, chroma_client: Any,
                     embed_model: BaseEmbedding | None) -> OpenedIndex:
    """Open the index of ``struct`` saved in ``folder``, checking every file and the store's collections first.
    Raises FileNotFoundError when nothing is saved there, ValueError for a missing, foreign or unreadable save."""
    if folder is None and struct.persist_dir is None:
        raise ValueError(f"index {struct.index_id} was never saved: its struct names no folder; pass "
                         "persist_dir= to load_index_from_storage")
    if folder is None:
        raise ValueError(f"graph index {struct.index_id}: a StorageContext does not record the folder it was read "
                         "from; pass that folder again: load_index_from_storage(StorageContext.from_defaults("
                         "persist_dir=DIR), persist_dir=DIR), or HippoGraphIndex.from_persist_dir(DIR)")
    root = Path(folder)
    _check_holds(root, struct.index_id)
    saved = read_saved_index(root)
    return OpenedIndex(saved, *saved.open_store(chroma_client), saved.embedder(embed_model))


def _check_holds(root: Path, index_id: str) -> None:
    """Refuse a folder whose storage context holds graph indexes, none of them ``index_id`` (a folder saved before
    the index lived in a storage context is taken as it is)."""
    if not (root / INDEX_STORE_FNAME).is_file():
        return
    ids = [s.index_id for s in SimpleIndexStore.from_persist_dir(str(root)).index_structs()
           if isinstance(s, HippoGraphStruct)]
    if ids and index_id not in ids:
        raise ValueError(f"{root / INDEX_STORE_FNAME}: holds graph index {ids[0]}, not {index_id}: pass the folder "
                         "this storage context was saved in")


def saved_storage(root: Path) -> tuple[StorageContext | None, HippoGraphStruct]:
    """The LlamaIndex storage context saved in ``root`` with the graph index's struct in it, or (an index saved
    before it lived in one) no context and a new struct."""
    if not (root / INDEX_STORE_FNAME).is_file():
        return None, HippoGraphStruct(persist_dir=SAVED_BESIDE)
    for name in _STORAGE_FILES:  # LlamaIndex's own errors name no file (a zeroed one: "'utf-32-be' codec ...")
        if (root / name).is_file():
            try:
                read_json_object(root / name)
            except DamagedFileError as exc:
                raise _damaged(exc) from None
    try:
        storage_context = StorageContext.from_defaults(persist_dir=str(root))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _damaged(ValueError(f"{root}: LlamaIndex's storage files ({', '.join(_STORAGE_FILES)}) are not "
                                  f"what it wrote ({type(exc).__name__}: {exc})")) from None
    structs = [s for s in storage_context.index_store.index_structs() if isinstance(s, HippoGraphStruct)]
    if len(structs) != 1:
        raise ValueError(f"{root / INDEX_STORE_FNAME}: expected one graph index, found {len(structs)}: open it with "
                         "load_index_from_storage(storage_context, index_id=..., persist_dir=...)")
    return storage_context, structs[0]


def saved_config(config: HippoGraphIndexConfig, stores: GraphStores) -> dict[str, Any]:
    """The config file of an index: what reopening it needs besides the graph (names, embedder, settings)."""
    model = stores.embed_model
    return {"format_version": INDEX_FORMAT_VERSION, "name": config.name,
            "chroma": stores.mode if stores.mode != "ephemeral" else "local", "collections": stores.collection_names(),
            "embed_model": {"class": type(model).__name__, "model_name": getattr(model, "model_name", None)},
            **{key: getattr(config, key) for key in _SETTINGS}}


def save_index(target: Path, config: HippoGraphIndexConfig, graph: KnowledgeGraph, stores: GraphStores,
               document_hashes: SimpleDocumentStore, storage_context: StorageContext) -> None:
    """Write graph and document hashes, then the storage context, then the config (last: a killed first save holds
    no index yet) into ``target``; the checkpoint and older-format files go after."""
    target.mkdir(parents=True, exist_ok=True)
    if stores.mode == "ephemeral":
        stores.copy_to(target / CHROMA_DIR, sorted(graph.passages))
    graph.save(target / GRAPH_DIR, attached={"docstore": document_hashes.to_dict()})
    persist_storage_context(storage_context, target)
    write_json(target / CONFIG_FILE, saved_config(config, stores))
    for done in (target / CHECKPOINT_FILE, target / LEGACY_GRAPH_FILE, target / DOCSTORE_FILE):
        done.unlink(missing_ok=True)


def discard_damaged_save(root: Path, error: DamagedFileError, chroma_client: Any = None) -> None:
    """Remove the derived files of a damaged save in ``root`` so the next build rewrites them from Chroma. Raises
    ValueError, removing nothing, when the Chroma store the rebuild reads cannot be read."""
    from chromadb.errors import ChromaError

    from ..stores.defaults import describe_client
    damage = str(error).removesuffix(f"; {_REBUILD}")
    where = str(root / CHROMA_DIR) if chroma_client is None else describe_client(chroma_client)
    try:
        resolve_client(chroma_client, root)[0].list_collections()
    except (ChromaError, OSError, ValueError) as exc:  # a damaged store: the source of truth itself
        raise ValueError(f"{damage}; the graph cannot be rebuilt: the Chroma store {where} cannot be read ({exc}): "
                         "restore it from a backup, or index the corpus into a new store (mhop index CORPUS "
                         "--graph --chroma-path NEW_PATH)") from None
    removed = [name for name in _DERIVED if (root / name).exists()]
    logger.warning("%s: rebuilding the graph index in %s from Chroma and the corpus (removing %s)", damage, root,
                   ", ".join(removed))
    for path in (root / name for name in removed):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


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


def finish_reopen(stores: GraphStores, saved: SavedIndex) -> None:
    """What reopening an index does once its stores are open: the vector index collection it read in place is
    found again, and a store missing passages is refused. Nothing is written: a removal a killed sync left is
    completed by the index's next change, which holds the writer lock (``IndexWriter.change``)."""
    # A vector index whose collection the graph reads in place may have synced first: no count to hold it to.
    if saved.find_passage_source(stores):
        return
    stored = stores.passages.count()
    if saved.graph.num_passages and stored < saved.graph.num_passages:
        raise ValueError(f"the Chroma collection {stores.passages.name!r} holds {stored} passages but the graph in "
                         f"{saved.root} has {saved.graph.num_passages}: pass the chroma_client the index was built "
                         "with")


def _collection(client: Any, name: str, root: Path) -> Any:
    """The named collection of ``client``, or a clear error naming the saved index that expects it."""
    from chromadb.errors import NotFoundError

    from ..stores.defaults import describe_client
    try:
        return client.get_collection(name)
    except NotFoundError:
        raise ValueError(f"{root / CONFIG_FILE}: {describe_client(client)} has no collection {name!r}, the vector "
                         "index collection the graph reads its passages from: pass the chroma_client the index was "
                         "built with") from None
