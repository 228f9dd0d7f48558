"""``HippoGraphIndex``: HippoRAG 2's memory (passages, entities, facts and their graph) over Chroma.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", seeds 003/004) indexes a corpus in three embedding
stores and one graph: every passage is embedded, read once by OpenIE (:mod:`.extraction`) for its entities and
(subject, predicate, object) facts, the entities and facts are embedded too, and the graph
(:mod:`.knowledge_graph`) links entities to the passages that contain them, to each other by facts, and to their
synonyms. :class:`~llama_index_mhop.components.hippo_graph.HippoGraphRetriever` searches it.

This class is the facade over one module per job: its settings (:mod:`.index_config`), the three Chroma
collections (:mod:`.graph_stores`), every change it makes (:mod:`.writer`: the sync rule, the batched indexing
pipeline with its JSON Lines checkpoint, synonymy edges), the files on disk (:mod:`.persistence`,
:mod:`.lm_programs`), the versioned state queries read (:mod:`.state`) and the engines that answer from it
(:mod:`.engines`). Every record's id derives from its content, so indexing the same text twice adds nothing; an
interrupted build resumes from its checkpoint: :meth:`HippoGraphIndex.from_documents` with the same
``persist_dir`` skips the passages it lists without extracting or embedding them again.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core import StorageContext
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.graph_stores.simple import SimpleGraphStore
from llama_index.core.indices.base import BaseIndex
from llama_index.core.schema import BaseNode, NodeWithScore
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.vector_stores.simple import DEFAULT_VECTOR_STORE
from llama_index.vector_stores.chroma import ChromaVectorStore

from ..lm.steps import FallbackCounter
from ..stores.store_lock import store_lock
from ..stores.corpus import PassageChunker
from ..stores.sync import UnknownDocumentError
from .checkpoint import CHECKPOINT_FILE, resumed_index_id
from .document_verbs import DocumentVerbs
from .engines import GraphEngines
from .extraction import Extractor, OpenIEExtractor
from .graph_stores import (
    DEFAULT_SHORT_TEXT_BATCH_SIZE,
    DEFAULT_SHORT_TEXT_DTYPE,
    GraphStores,
    fact_text,
    index_prefix,
    resolve_client,
)
from .index_config import DEFAULT_INDEX_NAME, GRAPH_SETTINGS, HippoGraphIndexConfig
from .index_constructors import IndexConstructors
from .index_struct import SAVED_BESIDE, HippoGraphStruct, register_index_class
from .indexing import DEFAULT_INSERT_BATCH_SIZE
from .knowledge_graph import KnowledgeGraph
from .lm_programs import load_lm_programs, save_lm_programs
from .persistence import (
    CONFIG_FILE,
    GRAPH_FILE,
    INDEX_FORMAT_VERSION,
    finish_reopen,
    open_saved_index,
    save_index,
)
from .state import EmptyIndexError, RetrievalState
from .synonymy import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES
from .walk.ppr import DEFAULT_DAMPING
from .writer import IndexWriter

__all__ = [
    "CHECKPOINT_FILE", "CONFIG_FILE", "DEFAULT_INDEX_NAME", "DEFAULT_INSERT_BATCH_SIZE",
    "DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES", "DEFAULT_SHORT_TEXT_BATCH_SIZE", "DEFAULT_SHORT_TEXT_DTYPE",
    "GRAPH_FILE", "INDEX_FORMAT_VERSION",
    "EmptyIndexError", "HippoGraphIndex", "HippoGraphIndexConfig", "RetrievalState", "UnknownDocumentError",
    "fact_text",
]


class HippoGraphIndex(IndexConstructors, DocumentVerbs, GraphEngines, BaseIndex[HippoGraphStruct]):
    """HippoRAG 2's memory over Chroma: passage, entity and fact collections and the knowledge graph.

    A LlamaIndex index: its struct lives in a ``StorageContext``'s index store, its passage collection is the
    context's vector store, and ``load_index_from_storage`` reopens it. The graph's own tables and arrays, with the
    hashes of the documents it holds (:attr:`document_hashes`: kept apart from the context's docstore, which another
    index may share under the same doc ids), are saved beside LlamaIndex's files in ``persist_dir``.

    Build one with :meth:`from_documents`, reopen it with :meth:`from_persist_dir` (or
    ``load_index_from_storage``), change it with LlamaIndex's verbs (:meth:`insert`, :meth:`refresh_ref_docs`,
    :meth:`delete_ref_doc`, ...), and query it with :meth:`as_retriever`, :meth:`as_query_engine` or
    :meth:`as_chat_engine`. Its settings are one :class:`~.index_config.HippoGraphIndexConfig` (:attr:`config`).

    Example:
        >>> index = HippoGraphIndex.from_documents(documents, persist_dir="./hippo")  # doctest: +SKIP
        >>> nodes = index.as_retriever(similarity_top_k=5).retrieve("Who directed Lover Come Back?")  # doctest: +SKIP
        >>> same = load_index_from_storage(StorageContext.from_defaults(persist_dir="./hippo"),
        ...                                persist_dir="./hippo")  # doctest: +SKIP
    """

    index_struct_cls = HippoGraphStruct

    def __init__(
        self, nodes: Sequence[BaseNode] | None = None, index_struct: HippoGraphStruct | None = None,
        storage_context: StorageContext | None = None, *, config: HippoGraphIndexConfig | None = None,
        chroma_client: Any = None, embed_model: BaseEmbedding | None = None, graph: KnowledgeGraph | None = None,
        extractor: Extractor | None = None, persist_dir: str | os.PathLike[str] | None = None,
        chroma_mode: str | None = None, collection_prefix: str | None = None,
        docstore: SimpleDocumentStore | None = None, lm: Any = None, llm: Any = None,
        callback_manager: CallbackManager | None = None, **settings: Any,
    ) -> None:
        """An index over ``graph`` (default: an empty one) in ``chroma_client``'s collections, or, given the
        ``index_struct`` of a saved index and no graph (``load_index_from_storage``), the saved index reopened.

        Args:
            nodes: passage nodes to index at once (:meth:`insert_nodes`).
            index_struct: the index's struct; for a saved index, the one its storage context holds.
            storage_context: the LlamaIndex storage the index lives in (default: a new one around its own
                passage collection and docstore).
            config: the index's settings; or give them one by one as keywords (``**settings``), which replace
                those of ``config``. A saved index keeps those it was built with, and a given ``graph`` its own
                synonymy settings.
            chroma_client: the Chroma client of the collections; for a saved index, default its own
                ``persist_dir/chroma`` (see :meth:`from_persist_dir`), else a private in-memory store.
            embed_model: the embedder; default ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            graph: the knowledge graph (default: an empty one with the settings' synonymy).
            persist_dir: where the index is saved; for a saved index (``load_index_from_storage``), the folder
                its storage context was read from: required, since the context does not record it.
            lm, llm: the LM for OpenIE (unless ``extractor`` is given), as in :meth:`from_documents`.
            **settings: any field of :class:`~.index_config.HippoGraphIndexConfig`.
            The other arguments are :meth:`from_documents`'s.

        Raises:
            FileNotFoundError: a saved index's folder holds no index.
            ValueError: a setting unknown or out of range, a saved index's struct without ``persist_dir``, or a store
                without a saved index's collections.
        """
        from ..stores.defaults import resolve_embed_model  # the defaults layer, only once it is needed

        config = HippoGraphIndexConfig.of(config, settings)
        opened = None
        if index_struct is not None and graph is None:  # load_index_from_storage: the saved index
            opened = open_saved_index(persist_dir, index_struct, chroma_client, embed_model)
            saved = opened.saved
            config = config.replaced(**saved.settings())
            chroma_client, chroma_mode, embed_model = opened.client, opened.mode, opened.embed_model
            graph, docstore, persist_dir, collection_prefix = (saved.graph, saved.docstore, saved.root,
                                                               saved.collection_prefix)
        else:
            if chroma_client is None:
                chroma_client, chroma_mode = resolve_client(None, persist_dir)
            # A build resumed from its checkpoint keeps its index id, and so the collections it was writing.
            resumed = None if persist_dir is None else resumed_index_id(Path(persist_dir) / CHECKPOINT_FILE)
            index_struct = index_struct or HippoGraphStruct(**({"index_id": resumed} if resumed else {}))
            if collection_prefix is None:  # two indexes of one name in one store never share collections
                collection_prefix = (config.name if resumed == "" else
                                     index_prefix(config.name, index_struct.index_id))
        if graph is not None:  # the graph's own synonymy settings are the index's
            config = config.replaced(**{key: getattr(graph, key) for key in GRAPH_SETTINGS})
        #: The index's settings.
        self.config = config
        self.graph = graph if graph is not None else KnowledgeGraph(**config.graph_settings())
        self.extractor: Extractor = extractor if extractor is not None else OpenIEExtractor(lm=lm, llm=llm)
        self.fact_filter_program: Any = None  # a compiled fact filter program its retrievers start from (persisted)
        self.stores = GraphStores(chroma_client, config.name, resolve_embed_model(embed_model),
                                  config.short_text_batch_size, chroma_mode or "external", collection_prefix,
                                  config.short_text_dtype, owner=index_struct.index_id)
        #: The hashes of the documents the graph holds, by doc id (the sync rule's record; saved with the graph).
        self.document_hashes = docstore if docstore is not None else SimpleDocumentStore()
        self._writer = IndexWriter(self.graph, self.stores, config, self.document_hashes,
                                   None if persist_dir is None else Path(persist_dir), save=self.persist)
        self.stores.check_embedding_dimension()  # a store built with another embedder: refused before any write
        index_struct.persist_dir = None if self.persist_dir is None else SAVED_BESIDE
        super().__init__(index_struct=index_struct, storage_context=self._in_storage(storage_context),
                         callback_manager=callback_manager, show_progress=config.show_progress,
                         transformations=[PassageChunker(chunk_size=config.chunk_size,
                                                         chunk_overlap=config.chunk_overlap)])
        if opened is not None:
            finish_reopen(self.stores, opened.saved)
            self.fact_filter_program = load_lm_programs(opened.saved.root, self.extractor)
        if nodes:
            self.insert_nodes(nodes)

    def _in_storage(self, storage_context: StorageContext | None) -> StorageContext:
        """The storage context the index lives in: the given one, else one of its own; the passage collection is its
        vector store unless it has one."""
        if storage_context is None:
            return StorageContext(docstore=SimpleDocumentStore(), index_store=SimpleIndexStore(),
                                  vector_stores={DEFAULT_VECTOR_STORE: self.stores.vector_store},
                                  graph_store=SimpleGraphStore())
        if DEFAULT_VECTOR_STORE not in storage_context.vector_stores:
            storage_context.add_vector_store(self.stores.vector_store, DEFAULT_VECTOR_STORE)
        return storage_context

    # ------------------------------------------------------------------ settings and stores

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def persist_dir(self) -> Path | None:
        """Where the index is saved (None: kept in memory); every change saves it there."""
        return self._writer.persist_dir

    @property
    def chunk_size(self) -> int:
        return self.config.chunk_size

    @property
    def chunk_overlap(self) -> int:
        return self.config.chunk_overlap

    @property
    def insert_batch_size(self) -> int:
        return self.config.insert_batch_size

    @property
    def num_workers(self) -> int:
        return self.config.num_workers

    @property
    def show_progress(self) -> bool:
        return self.config.show_progress

    @property
    def exact_synonymy_max_entities(self) -> int:
        return self.config.exact_synonymy_max_entities

    @property
    def embed_model(self) -> BaseEmbedding:
        return self.stores.embed_model

    @property
    def chroma_client(self) -> Any:
        return self.stores.client

    @property
    def passages_collection(self) -> Any:
        return self.stores.passages

    @property
    def entities_collection(self) -> Any:
        return self.stores.entities

    @property
    def facts_collection(self) -> Any:
        return self.stores.facts

    @property
    def vector_store(self) -> ChromaVectorStore:
        """The graph's own passage collection as a LlamaIndex vector store (passages it reads in place from a vector
        index are in that index's store, :attr:`GraphStores.passage_source`)."""
        return self.stores.vector_store

    @property
    def build_seconds(self) -> dict[str, float]:
        """Seconds spent per indexing phase since this object was created (extraction, entities, facts, ...)."""
        return self._writer.timer.seconds

    @property
    def fallback_counts(self) -> FallbackCounter:
        """How often OpenIE fell back from the LM to the LLM-free extractor (empty for a custom extractor)."""
        counts = getattr(self.extractor, "fallback_counts", None)
        return counts if isinstance(counts, FallbackCounter) else FallbackCounter()

    def counts(self) -> dict[str, int]:
        """Records in each Chroma collection and nodes/edges of the graph (for checks and reports)."""
        graph, stores = self.graph, self.stores
        return {"passages": graph.num_passages, "entities": graph.num_entities, "facts": graph.num_facts,
                "chroma_passages": stores.passage_count(), "chroma_entities": stores.entities.count(),
                "chroma_facts": stores.facts.count(), "graph_nodes": graph.num_nodes, "graph_edges": graph.num_edges}

    # ------------------------------------------------------------------ persistence

    def persist(self, persist_dir: str | os.PathLike[str] | None = None) -> Path:
        """Write the config, the graph (``.npy`` arrays, see :mod:`.persistence`) and the LM programs (for an
        in-memory index, Chroma too) to ``persist_dir``.

        Returns:
            The directory written.

        Raises:
            ValueError: no directory given and none set.
        """
        target = Path(persist_dir) if persist_dir is not None else self.persist_dir
        if target is None:
            raise ValueError("persist() needs a directory: pass persist_dir=")
        with store_lock(target), self._writer.versions.lock:  # a complete version, never one a change is halfway
            self._writer.persist_dir = target
            self.index_struct.persist_dir = SAVED_BESIDE
            self.storage_context.index_store.add_index_struct(self.index_struct)
            save_index(target, self.config, self.graph, self.stores, self.document_hashes, self.storage_context)
            save_lm_programs(target, self.extractor, self.fact_filter_program)
        return target

    # ------------------------------------------------------------------ retrieval

    def retrieval_state(self, damping: float = DEFAULT_DAMPING) -> RetrievalState:
        """The current graph version's query state (its arrays and its walk), loaded from Chroma once per version.

        While another thread inserts or deletes, this is the graph as the last finished change left it (or, if that
        version was never loaded, the call waits for the running change): never a half-changed graph. The first
        call after a change loads the new version. When a query found passages gone from the vector index the graph
        reads in place (the app changed it), the graph is first reconciled with it, within
        ``auto_reconcile_max_passages`` (see :meth:`~.writer.IndexWriter.catch_up`).

        Raises:
            EmptyIndexError: the index holds no passage.
        """
        state = self._writer.versions.get(damping)
        if self._writer.behind and self._writer.catch_up(self.extractor):
            state = self._writer.versions.get(damping)
        return state

    def still_held(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without the passages gone from the index's collections since its state was loaded (the
        vector index it reads in place changed); finding one makes the next query load the graph again without
        them, reconciled. Only an index reading another index's collection in place can find any."""
        if self.stores.passage_source is None or not nodes:
            return list(nodes)
        held = self.stores.held_passages([n.node.node_id for n in nodes])
        if all(n.node.node_id in held for n in nodes):
            return list(nodes)
        self._writer.versions.invalidate()
        self._writer.behind = True
        return [n for n in nodes if n.node.node_id in held]

    # ------------------------------------------------------------------ LlamaIndex's abstract steps

    def _build_index_from_nodes(self, nodes: Sequence[BaseNode], **build_kwargs: Any) -> HippoGraphStruct:
        self.insert_nodes(nodes)
        return self.index_struct

    def _insert(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        self.insert_nodes(nodes)

    def _delete_node(self, node_id: str, **delete_kwargs: Any) -> None:
        self.delete_nodes([node_id])

    def __repr__(self) -> str:
        return f"HippoGraphIndex(name={self.name!r}, {self.graph!r})"


register_index_class(HippoGraphIndex)
