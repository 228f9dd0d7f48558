"""``HippoGraphIndex``: HippoRAG 2's memory over Chroma, as a query reads it (building and changing: :mod:`.index_verbs`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

from ..lm.steps import FallbackCounter, app_llm
from ..stores.consistency import store_lock
from ..stores.corpus import PassageChunker
from ..stores.sync import UnknownDocumentError
from .checkpoint import CHECKPOINT_FILE, resumed_index_id
from .extraction import Extractor, OpenIEExtractor
from .graph_stores import GraphStores, fact_text, index_prefix, resolve_client
from .index_config import GRAPH_SETTINGS, HippoGraphIndexConfig
from .index_struct import SAVED_BESIDE, HippoGraphStruct, register_index_class
from .index_verbs import IndexVerbs
from .knowledge_graph import KnowledgeGraph
from .lm_programs import load_lm_programs, save_lm_programs
from .persistence import CONFIG_FILE, GRAPH_FILE, finish_reopen, open_saved_index, save_index
from .state import EmptyIndexError, RetrievalState
from .walk.exact import DEFAULT_DAMPING
from .writer import IndexWriter

if TYPE_CHECKING:
    from llama_index.core.base.base_retriever import BaseRetriever
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ..components.hippo_graph import HippoGraphRetriever

__all__ = ["CHECKPOINT_FILE", "CONFIG_FILE", "GRAPH_FILE", "EmptyIndexError", "GraphEngines", "HippoGraphIndex",
           "HippoGraphIndexConfig", "UnknownDocumentError", "chat_engine", "fact_text", "query_engine"]

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def query_engine(retriever: BaseRetriever, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
    """A ``RetrieverQueryEngine`` answering from ``retriever``; without any LLM it retrieves without answering
    (LlamaIndex's ``NoText``) and says so once, rather than reach for LlamaIndex's OpenAI default."""
    from llama_index.core.query_engine import RetrieverQueryEngine
    if llm is None and app_llm() is None and "response_synthesizer" not in kwargs:
        from llama_index.core.llms import MockLLM
        from llama_index.core.response_synthesizers.no_text import NoText
        message = ("no LLM given and none set in Settings.llm: the query engine returns the retrieved passages "
                   "(response.source_nodes) without an answer; pass llm= or set Settings.llm for answers")
        if message not in _warned:
            _warned.add(message)
            logger.warning(message)
        # An LLM it never calls: LlamaIndex's factory builds NoText without one, which reaches for its OpenAI default.
        llm = MockLLM()
        kwargs.pop("response_mode", None)
        kwargs["response_synthesizer"] = NoText(llm=llm)
    return RetrieverQueryEngine.from_args(retriever, llm=llm, **kwargs)


def chat_engine(retriever: BaseRetriever, chat_mode: Any = "condense_plus_context", llm: Any = None,
                **kwargs: Any) -> BaseChatEngine:
    """A ``"condense_plus_context"`` or ``"context"`` chat engine answering from ``retriever``; a ``ValueError`` for
    another chat mode, or no ``llm`` and no ``Settings.llm``."""
    from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine
    if llm is None and app_llm() is None:
        raise ValueError("a chat engine answers with an LLM: pass llm= or set Settings.llm "
                         "(as_retriever() or as_query_engine() retrieve without one)")
    engines = {"condense_plus_context": CondensePlusContextChatEngine, "context": ContextChatEngine,
               "best": CondensePlusContextChatEngine}  # LlamaIndex's default mode: its best engine here
    chat_mode = str(getattr(chat_mode, "value", chat_mode))
    if chat_mode not in engines:
        raise ValueError(f"chat_mode must be one of {', '.join(engines)}, got {chat_mode!r}")
    return engines[chat_mode].from_defaults(retriever=retriever, llm=llm, **kwargs)


class GraphEngines:
    """The retriever and engines of a :class:`~.retrieval_source.RetrievalSource` (the index, or a reader of it)."""

    stores: GraphStores

    def as_retriever(self, **kwargs: Any) -> HippoGraphRetriever:
        """A ``HippoGraphRetriever`` over this graph; ``kwargs`` are its arguments (``similarity_top_k``, ...)."""
        from ..components.hippo_graph import HippoGraphRetriever
        return HippoGraphRetriever(index=self, **kwargs)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
        """:func:`query_engine` over this graph's retriever; ``kwargs``: retriever and ``from_args`` arguments."""
        return query_engine(self._retriever_from(kwargs), llm, **kwargs)

    def as_chat_engine(self, chat_mode: str = "condense_plus_context", llm: Any = None,
                       **kwargs: Any) -> BaseChatEngine:
        """:func:`chat_engine` over this graph's retriever; ``kwargs``: retriever and ``from_defaults`` arguments."""
        return chat_engine(self._retriever_from(kwargs), chat_mode, llm, **kwargs)

    def _retriever_from(self, kwargs: dict[str, Any]) -> HippoGraphRetriever:
        from ..components.hippo_graph import HippoGraphRetriever
        return self.as_retriever(**{k: kwargs.pop(k) for k in list(kwargs) if k in HippoGraphRetriever.ARGUMENTS})

    def passage_sources(self) -> list[tuple[Any, Any]]:
        """The passage collections of its ``stores``, each with its version row (None: the index's own, versioned by
        the process that writes it), for the flows' title lookups over this graph's retriever."""
        return self.stores.passage_sources()


def _config_view(name: str) -> property:
    return property(lambda self: getattr(self.config, name), doc=f"The ``{name}`` setting (:attr:`config`).")


def _stores_view(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.stores, name), doc=doc)


class HippoGraphIndex(IndexVerbs, GraphEngines, BaseIndex[HippoGraphStruct]):
    """HippoRAG 2's memory over Chroma: passage, entity and fact collections and the knowledge graph.

    Example:
        >>> index = HippoGraphIndex.from_documents(documents, persist_dir="./hippo")  # doctest: +SKIP"""

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
        """An index over ``graph`` in ``chroma_client``'s collections, or the index saved in ``persist_dir``. Raises
        ``FileNotFoundError`` (no saved index) or ``ValueError`` (a bad setting or a store without its collections)."""
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
                collection_prefix = config.name if resumed == "" else index_prefix(config.name, index_struct.index_id)
        if graph is not None:  # the graph's own synonymy settings are the index's
            config = config.replaced(**{key: getattr(graph, key) for key in GRAPH_SETTINGS})
        self.config = config
        self.name = config.name
        self.graph = graph if graph is not None else KnowledgeGraph(**config.graph_settings())
        self.extractor: Extractor = extractor if extractor is not None else OpenIEExtractor(lm=lm, llm=llm)
        self.fact_filter_program: Any = None
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
        """The given storage context (the passage collection its vector store unless it has one), else its own."""
        if storage_context is None:
            return StorageContext(docstore=SimpleDocumentStore(), index_store=SimpleIndexStore(),
                                  vector_stores={DEFAULT_VECTOR_STORE: self.stores.vector_store},
                                  graph_store=SimpleGraphStore())
        if DEFAULT_VECTOR_STORE not in storage_context.vector_stores:
            storage_context.add_vector_store(self.stores.vector_store, DEFAULT_VECTOR_STORE)
        return storage_context

    @property
    def persist_dir(self) -> Path | None:
        """Where the index is saved (None: kept in memory); every change saves it there."""
        return self._writer.persist_dir

    chunk_size = _config_view("chunk_size")
    chunk_overlap = _config_view("chunk_overlap")
    insert_batch_size = _config_view("insert_batch_size")
    num_workers = _config_view("num_workers")
    show_progress = _config_view("show_progress")
    exact_synonymy_max_entities = _config_view("exact_synonymy_max_entities")
    embed_model = _stores_view("embed_model", "The embedder of passages, entities, facts and queries.")
    chroma_client = _stores_view("client", "The Chroma client of its collections.")
    passages_collection = _stores_view("passages", "Its own passage collection.")
    entities_collection = _stores_view("entities", "Its entity collection.")
    facts_collection = _stores_view("facts", "Its fact collection.")

    @property
    def vector_store(self) -> ChromaVectorStore:
        """The graph's own passage collection as a LlamaIndex vector store (not a vector index's it reads in place)."""
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

    def persist(self, persist_dir: str | os.PathLike[str] | None = None) -> Path:
        """Write the index (its own folder by default; for an in-memory index Chroma too); the folder."""
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

    def retrieval_state(self, damping: float = DEFAULT_DAMPING) -> RetrievalState:
        """The current graph version's query state, loaded once per version (reconciled first when needed);
        ``EmptyIndexError`` without passages."""
        writer = self._writer
        state = writer.versions.get(damping)
        if writer.behind and writer.catch_up(self.extractor):
            state = writer.versions.get(damping)
        return state

    def still_held(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without passages gone from a source read in place (the next query reloads the graph)."""
        if self.stores.passage_source is None or not nodes:
            return list(nodes)
        held = self.stores.held_passages([n.node.node_id for n in nodes])
        if all(n.node.node_id in held for n in nodes):
            return list(nodes)
        self._writer.versions.invalidate()
        self._writer.behind = True
        return [n for n in nodes if n.node.node_id in held]

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
