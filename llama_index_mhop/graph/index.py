"""``HippoGraphIndex``: HippoRAG 2's memory (passages, entities, facts and their graph) over Chroma.

HippoRAG 2 (Gutiérrez et al., 2025, "From RAG to Memory", seeds 003/004) indexes a corpus in three embedding
stores and one graph: every passage is embedded, read once by OpenIE (:mod:`.extraction`) for its entities and
(subject, predicate, object) facts, the entities and facts are embedded too, and the graph
(:mod:`.knowledge_graph`) links entities to the passages that contain them, to each other by facts, and to their
synonyms. :class:`~llama_index_mhop.retrievers.hippo_graph.HippoGraphRetriever` searches it.

This class is the facade over one module per job: the three Chroma collections (:mod:`.graph_stores`), the
batched indexing pipeline (:mod:`.indexing`) with its JSON Lines checkpoint (:mod:`.checkpoint`), synonymy edges
(:mod:`.synonymy`), the files on disk (:mod:`.persistence`) and the versioned state queries read
(:mod:`.state`). Every record's id derives from its content, so indexing the same text twice adds nothing; an
interrupted build resumes from its checkpoint: :meth:`HippoGraphIndex.from_documents` with the same
``persist_dir`` skips the passages it lists without extracting or embedding them again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.graph_stores.simple import SimpleGraphStore
from llama_index.core.indices.base import BaseIndex
from llama_index.core.schema import BaseNode, ImageNode, NodeWithScore, TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import RefDocInfo
from llama_index.core.storage.index_store import SimpleIndexStore
from llama_index.core.storage.index_store.types import DEFAULT_PERSIST_FNAME as INDEX_STORE_FNAME
from llama_index.core.vector_stores.simple import DEFAULT_VECTOR_STORE
from llama_index.vector_stores.chroma import ChromaVectorStore

from ..defaults import resolve_embed_model
from ..embed_dtype import EmbedDType
from ..lm import FallbackCounter
from ..store_lock import store_lock
from ..stores import DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, load_documents
from ..sync import UnknownDocumentError, resolve_doc_id
from ..vector_index import check_embedding_dimension, passage_nodes
from .checkpoint import CHECKPOINT_FILE
from .extraction import Extractor, OpenIEExtractor
from .graph_stores import (
    DEFAULT_SHORT_TEXT_BATCH_SIZE,
    DEFAULT_SHORT_TEXT_DTYPE,
    GraphStores,
    collection_passages,
    fact_text,
    resolve_client,
    unique_prefix,
    vector_index_collection,
)
from .index_struct import HippoGraphStruct, register_index_class
from .indexing import DEFAULT_INSERT_BATCH_SIZE, BatchHook, BatchIndexer, PhaseTimer
from .knowledge_graph import (
    DEFAULT_SYNONYMY_THRESHOLD,
    DEFAULT_SYNONYMY_TOP_K,
    DEFAULT_TITLE_EDGE_WEIGHT,
    KnowledgeGraph,
)
from .lm_programs import load_lm_programs, save_lm_programs
from .openie_file import report_stored_openie, with_stored_openie
from .persistence import (
    CONFIG_FILE,
    GRAPH_FILE,
    INDEX_FORMAT_VERSION,
    finish_reopen,
    index_config,
    read_saved_index,
    save_index,
    saved_index_exists,
)
from .reconcile import Drift, find_drift
from .state import EmptyIndexError, RetrievalState, VersionedState
from .sync import (
    Removal,
    as_documents,
    commit_removal,
    detach_passages,
    known_doc_ids,
    plan_sync,
)
from .synonymy import DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES, SynonymyRefresher
from .walk.basis_files import BASIS_FOLDER
from .walk.ppr import DEFAULT_DAMPING

if TYPE_CHECKING:
    from llama_index.core.chat_engine.types import BaseChatEngine
    from llama_index.core.query_engine import RetrieverQueryEngine

    from ..retrievers.hippo_graph import HippoGraphRetriever

__all__ = [
    "CHECKPOINT_FILE", "CONFIG_FILE", "DEFAULT_INDEX_NAME", "DEFAULT_INSERT_BATCH_SIZE",
    "DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES", "DEFAULT_SHORT_TEXT_BATCH_SIZE", "DEFAULT_SHORT_TEXT_DTYPE",
    "GRAPH_FILE", "INDEX_FORMAT_VERSION",
    "EmptyIndexError", "HippoGraphIndex", "RetrievalState", "UnknownDocumentError", "fact_text",
]

DEFAULT_INDEX_NAME = "hippo"

logger = logging.getLogger(__name__)


def _text_node(node: BaseNode) -> TextNode:
    """A passage node, or a clear error for a node that is not a text passage (an image)."""
    if not isinstance(node, TextNode) or isinstance(node, ImageNode):
        raise TypeError(f"HippoGraphIndex indexes text passages; node {node.node_id} is a {type(node).__name__}")
    return node


def _saved_storage(root: Path) -> tuple[StorageContext | None, HippoGraphStruct]:
    """The LlamaIndex storage context saved in ``root`` with the graph index's struct in it, or (an index saved
    before it lived in one) no context and a new struct."""
    if not (root / INDEX_STORE_FNAME).is_file():
        return None, HippoGraphStruct(persist_dir=str(root.resolve()))
    storage_context = StorageContext.from_defaults(persist_dir=str(root))
    structs = [s for s in storage_context.index_store.index_structs() if isinstance(s, HippoGraphStruct)]
    if len(structs) != 1:
        raise ValueError(f"{root / INDEX_STORE_FNAME}: expected one graph index, found {len(structs)}: open it with "
                         "load_index_from_storage(storage_context, index_id=...)")
    return storage_context, structs[0]


def _corpus(documents: Any) -> str | os.PathLike[str] | None:
    """The folder or file documents were read from (None: documents given as objects)."""
    return documents if isinstance(documents, str | os.PathLike) else None


class HippoGraphIndex(BaseIndex[HippoGraphStruct]):
    """HippoRAG 2's memory over Chroma: passage, entity and fact collections and the knowledge graph.

    A LlamaIndex index: its struct lives in a ``StorageContext``'s index store, its passage collection is the
    context's vector store, and ``load_index_from_storage`` reopens it. The graph's own tables and arrays, with the
    hashes of the documents it holds (:attr:`document_hashes`: kept apart from the context's docstore, which another
    index may share under the same doc ids), are saved beside LlamaIndex's files in ``persist_dir``.

    Build one with :meth:`from_documents`, reopen it with :meth:`from_persist_dir` (or
    ``load_index_from_storage``), change it with LlamaIndex's verbs (:meth:`insert`, :meth:`refresh_ref_docs`,
    :meth:`delete_ref_doc`, ...), and query it with :meth:`as_retriever`, :meth:`as_query_engine` or
    :meth:`as_chat_engine`.

    Example:
        >>> index = HippoGraphIndex.from_documents(documents, persist_dir="./hippo")  # doctest: +SKIP
        >>> nodes = index.as_retriever(similarity_top_k=5).retrieve("Who directed Lover Come Back?")  # doctest: +SKIP
        >>> same = load_index_from_storage(StorageContext.from_defaults(persist_dir="./hippo"))  # doctest: +SKIP
    """

    index_struct_cls = HippoGraphStruct

    def __init__(
        self, nodes: Sequence[BaseNode] | None = None, index_struct: HippoGraphStruct | None = None,
        storage_context: StorageContext | None = None, *, chroma_client: Any = None,
        embed_model: BaseEmbedding | None = None, graph: KnowledgeGraph | None = None,
        name: str = DEFAULT_INDEX_NAME, extractor: Extractor | None = None,
        persist_dir: str | os.PathLike[str] | None = None, chroma_mode: str | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE, chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        insert_batch_size: int = DEFAULT_INSERT_BATCH_SIZE, num_workers: int = 4, show_progress: bool = True,
        short_text_batch_size: int | None = DEFAULT_SHORT_TEXT_BATCH_SIZE,
        short_text_dtype: EmbedDType = DEFAULT_SHORT_TEXT_DTYPE,
        exact_synonymy_max_entities: int = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES,
        collection_prefix: str | None = None, docstore: SimpleDocumentStore | None = None,
        lm: Any = None, llm: Any = None, callback_manager: CallbackManager | None = None,
    ) -> None:
        """An index over ``graph`` (default: an empty one) in ``chroma_client``'s collections, or, given the
        ``index_struct`` of a saved index and no graph (``load_index_from_storage``), the saved index reopened.

        Args:
            nodes: passage nodes to index at once (:meth:`insert_nodes`).
            index_struct: the index's struct; for a saved index, the one its storage context holds.
            storage_context: the LlamaIndex storage the index lives in (default: a new one around its own
                passage collection and docstore).
            chroma_client: the Chroma client of the collections; for a saved index, default its own
                ``persist_dir/chroma`` (see :meth:`from_persist_dir`), else a private in-memory store.
            embed_model: the embedder; default ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            persist_dir: where the index is saved; for a saved index, where its files are if they moved since
                its struct was written.
            lm, llm: the LM for OpenIE (unless ``extractor`` is given), as in :meth:`from_documents`.
            The other arguments are :meth:`from_documents`'s.

        Raises:
            FileNotFoundError: a saved index's folder holds no index.
            ValueError: a bad batch size, or a store without a saved index's collections.
        """
        if index_struct is not None and graph is None:  # load_index_from_storage: the saved index
            self._reopen(index_struct, storage_context, chroma_client, embed_model, persist_dir, extractor, lm, llm,
                         num_workers, show_progress, callback_manager)
            return
        if insert_batch_size < 1:
            raise ValueError(f"insert_batch_size must be >= 1, got {insert_batch_size}")
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if chroma_client is None:
            chroma_client, chroma_mode = resolve_client(None, persist_dir)
            collection_prefix = collection_prefix or (unique_prefix(name) if chroma_mode == "ephemeral" else None)
        self.name = name
        self.graph = graph if graph is not None else KnowledgeGraph()
        self.extractor: Extractor = extractor if extractor is not None else OpenIEExtractor(lm=lm, llm=llm)
        self.fact_filter_program: Any = None  # a compiled fact filter program its retrievers start from (persisted)
        self.persist_dir = Path(persist_dir) if persist_dir is not None else None
        self.chunk_size = chunk_size
        self.chunk_overlap = chunk_overlap
        self.insert_batch_size = insert_batch_size
        self.num_workers = num_workers
        self.show_progress = show_progress
        self.stores = GraphStores(chroma_client, name, resolve_embed_model(embed_model), short_text_batch_size,
                                  chroma_mode or "external", collection_prefix, short_text_dtype)
        self._synonymy = SynonymyRefresher(self.stores, exact_synonymy_max_entities)
        self._timer = PhaseTimer()
        self._versions = VersionedState(self.graph, self.stores, before_load=self._refresh_synonymy,
                                        basis_folder=self._basis_folder, drop_gone=self._drop_gone)
        self._warned_drift = False
        self._dropped = Removal()  # what queries took out of the graph in memory, until the next change saves it
        self.stores.check_embedding_dimension()  # a store built with another embedder: refused before any write
        index_struct = index_struct or HippoGraphStruct()
        index_struct.persist_dir = None if self.persist_dir is None else str(self.persist_dir.resolve())
        #: The hashes of the documents the graph holds, by doc id (the sync rule's record; saved with the graph).
        self.document_hashes = docstore if docstore is not None else SimpleDocumentStore()
        super().__init__(index_struct=index_struct, storage_context=self._in_storage(storage_context),
                         callback_manager=callback_manager, show_progress=show_progress)
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

    def _reopen(self, index_struct: HippoGraphStruct, storage_context: StorageContext | None, chroma_client: Any,
                embed_model: BaseEmbedding | None, persist_dir: str | os.PathLike[str] | None,
                extractor: Extractor | None, lm: Any, llm: Any, num_workers: int, show_progress: bool,
                callback_manager: CallbackManager | None) -> None:
        """Open the index saved in ``persist_dir`` (default the folder its struct names): every file is checked,
        and the store is checked to hold the index's collections, before anything is written."""
        folder = persist_dir if persist_dir is not None else index_struct.persist_dir
        if folder is None:
            raise ValueError(f"index {index_struct.index_id} was never saved: its struct names no folder; pass "
                             "persist_dir= to load_index_from_storage")
        saved = read_saved_index(Path(folder))
        client, mode = saved.open_store(chroma_client)
        embed_model = resolve_embed_model(embed_model)
        saved.warn_if_other_embedder(embed_model)
        self.__init__(index_struct=index_struct, storage_context=storage_context, chroma_client=client,
                      embed_model=embed_model, graph=saved.graph, extractor=extractor, persist_dir=saved.root,
                      chroma_mode=mode, lm=lm, llm=llm, num_workers=num_workers, show_progress=show_progress,
                      docstore=saved.docstore, callback_manager=callback_manager, **saved.index_arguments())
        finish_reopen(self, saved)
        load_lm_programs(self, saved.root)  # the saved OpenIE and fact filter programs

    def _basis_folder(self) -> Path | None:
        """Where the walk's solved dense share is kept: beside a persisted index (see :mod:`.walk.basis_files`)."""
        return None if self.persist_dir is None else self.persist_dir / BASIS_FOLDER

    # ------------------------------------------------------------------ stores

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
    def exact_synonymy_max_entities(self) -> int:
        return self._synonymy.exact_max_entities

    @property
    def build_seconds(self) -> dict[str, float]:
        """Seconds spent per indexing phase since this object was created (extraction, entities, facts, ...)."""
        return self._timer.seconds

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

    # ------------------------------------------------------------------ building

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Document] | str | os.PathLike[str] | VectorStoreIndex,
        embed_model: BaseEmbedding | None = None,
        chroma_client: Any = None,
        persist_dir: str | os.PathLike[str] | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool = True,
        *,
        name: str = DEFAULT_INDEX_NAME,
        extractor: Extractor | None = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        chunk_overlap: int = DEFAULT_CHUNK_OVERLAP,
        insert_batch_size: int = DEFAULT_INSERT_BATCH_SIZE,
        num_workers: int = 4,
        synonymy_threshold: float = DEFAULT_SYNONYMY_THRESHOLD,
        synonymy_top_k: int = DEFAULT_SYNONYMY_TOP_K,
        title_edge_weight: float = DEFAULT_TITLE_EDGE_WEIGHT,
        short_text_batch_size: int | None = DEFAULT_SHORT_TEXT_BATCH_SIZE,
        short_text_dtype: EmbedDType = DEFAULT_SHORT_TEXT_DTYPE,
        exact_synonymy_max_entities: int = DEFAULT_EXACT_SYNONYMY_MAX_ENTITIES,
        on_batch_end: BatchHook | None = None,
        openie_results: str | os.PathLike[str] | None = None,
        storage_context: StorageContext | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> HippoGraphIndex:
        """Index documents (a corpus path, see ``stores.load_documents``, or the passages of a Chroma-backed
        ``VectorStoreIndex`` with their stored embeddings) into a new or resumed index, by :meth:`insert`'s rule.

        With ``persist_dir``, the index is saved there when done, its Chroma data lives in ``persist_dir/chroma``
        (unless a ``chroma_client`` is given), and an interrupted build resumes from its checkpoint: calling this
        again with the same arguments continues where the last batch ended. A finished index already in
        ``persist_dir`` is reopened and only documents it lacks are added.

        Args:
            documents: LlamaIndex documents (their metadata is kept on the passage nodes), a corpus path, or a
                ``VectorStoreIndex`` over Chroma (see :meth:`from_vector_index`).
            embed_model: the embedder of all three stores; default the vector index's, else
                ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            chroma_client: a Chroma client; default ``persist_dir/chroma``, or a store of this index alone.
            persist_dir: where the config, graph and checkpoint are written.
            lm: a DSPy LM for OpenIE. llm: a LlamaIndex LLM for OpenIE. Neither: the LLM-free extractor (unless
                ``dspy.settings.lm`` is set).
            show_progress: show a progress bar over passages.
            name: prefix of the Chroma collection names.
            extractor: a custom extractor (anything with ``extract(text, title) -> Extraction``); overrides lm/llm.
            chunk_size: passage size in tokens (longer documents are split, as ``vector_index.build_vector_index`` does).
            chunk_overlap: tokens shared by neighbouring chunks.
            insert_batch_size: passages per batch (one checkpoint line per batch).
            num_workers: concurrent OpenIE calls when an LM extracts.
            synonymy_threshold, synonymy_top_k: cosine similarity for a synonymy edge (HippoRAG 2: 0.8), and
                most synonyms per entity.
            title_edge_weight: weight of a passage's edge to its own title entity (see ``knowledge_graph``).
            short_text_batch_size: embedding batch size for entity names and facts (None: the embedder's own).
            short_text_dtype: "bfloat16" (default) embeds entity names and facts in bfloat16 where the CPU
                multiplies it natively, about twice as fast (float32 elsewhere); "float32" always. Passages and
                queries are float32 either way (see :mod:`llama_index_mhop.embed_dtype`).
            exact_synonymy_max_entities: above this many entities, synonyms come from Chroma's HNSW index of the
                entity collection instead of exact all-pairs similarities.
            on_batch_end: called as ``on_batch_end(batch_number, passages_done)`` after each checkpointed batch.
            openie_results: a HippoRAG ``openie_results_ner_<model>.json``: passages whose text it holds take their
                extraction from it; the rest are extracted (the counts are logged at INFO).
            storage_context: the app's LlamaIndex storage for the index (its index store keeps the index's
                struct; default one of the index's own, saved in ``persist_dir``).
            callback_manager: LlamaIndex's callbacks (default ``Settings.callback_manager``).

        Raises:
            CorpusError: no text to index.
            ValueError: a bad name or batch size.
        """
        source = None
        docs: list[Document] = []
        if isinstance(documents, VectorStoreIndex):
            source = vector_index_collection(documents)
            # LlamaIndex keeps the index's embedder private; its stored vectors are only comparable with its queries.
            embed_model = embed_model or getattr(documents, "_embed_model", None)
        else:
            docs = load_documents(documents)
        embed_model = resolve_embed_model(embed_model)
        if source is not None:  # its stored vectors are read as they are: the embedder must fit them
            check_embedding_dimension(source, embed_model)
        if persist_dir is not None and saved_index_exists(Path(persist_dir)):
            index = cls.from_persist_dir(persist_dir, chroma_client=chroma_client, embed_model=embed_model, lm=lm,
                                         llm=llm, show_progress=show_progress,  # with the saved OpenIE program
                                         storage_context=storage_context)
            index.extractor = with_stored_openie(extractor or index.extractor, openie_results)
            index._follow(source, docs, on_batch_end, _corpus(documents))
            return index
        extractor = with_stored_openie(extractor or OpenIEExtractor(lm=lm, llm=llm), openie_results)
        client, mode = resolve_client(chroma_client, persist_dir)
        graph = KnowledgeGraph(synonymy_threshold=synonymy_threshold, synonymy_top_k=synonymy_top_k,
                               title_edge_weight=title_edge_weight)
        index = cls(storage_context=storage_context, callback_manager=callback_manager,
                    chroma_client=client, embed_model=embed_model, graph=graph, name=name, extractor=extractor,
                    persist_dir=persist_dir, chroma_mode=mode, chunk_size=chunk_size, chunk_overlap=chunk_overlap,
                    insert_batch_size=insert_batch_size, num_workers=num_workers, show_progress=show_progress,
                    short_text_batch_size=short_text_batch_size, short_text_dtype=short_text_dtype,
                    exact_synonymy_max_entities=exact_synonymy_max_entities,
                    collection_prefix=unique_prefix(name) if mode == "ephemeral" else None)
        index._follow(source, docs, on_batch_end, _corpus(documents))
        return index

    def _follow(self, source: Any, docs: Sequence[Document], on_batch_end: BatchHook | None,
                corpus: str | os.PathLike[str] | None) -> None:
        """Index ``docs``, or follow a vector index's collection ``source``: read in place (in this index's Chroma
        store) the graph is reconciled with it; from another store its passages are copied with their stored
        embeddings (none embedded again either way)."""
        if source is not None and self.stores.read_passages_from(source):
            self.reconcile(on_batch_end=on_batch_end)
        else:
            nodes = [] if source is None else collection_passages(source, with_embeddings=True)
            self._sync(docs, nodes, None, on_batch_end, corpus=corpus)

    @classmethod
    def from_vector_index(cls, vector_index: VectorStoreIndex, **kwargs: Any) -> HippoGraphIndex:
        """A graph index over the passages of a Chroma-backed ``VectorStoreIndex``, reusing their nodes and
        stored embeddings (only entities and facts are embedded). ``kwargs`` are :meth:`from_documents`'s.

        In the vector index's own Chroma store (the same ``chroma_client``, or the same persistent path) the graph
        reads the vector index's collection in place instead of copying it: its passages are stored once, and
        the graph neither writes to that collection nor deletes from it. Passages the graph gets later that the
        vector index lacks go into the graph's own passage collection. In another store the passages are copied.

        Raises:
            TypeError: the index does not keep its nodes in Chroma.
        """
        return cls.from_documents(vector_index, **kwargs)

    def reconcile(self, show_progress: bool | None = None, on_batch_end: BatchHook | None = None) -> Drift:
        """Bring the graph in step with the passages it stands on, whatever changed them (see :mod:`.reconcile`).

        Passages in none of the index's collections (deleted, or old versions of edited documents) leave the
        graph, with the facts and entities only they supported; passages of the vector index collection it reads
        in place that the graph lacks are extracted and added (their vectors are read, not embedded again). Only
        what changed is extracted or embedded, and a run killed anywhere ends, when run again, where an
        uninterrupted one ends. Queries in other threads meanwhile answer from the graph as it was before.

        Returns:
            What was found and fixed: the passages gone and the passages new.
        """
        show = self.show_progress if show_progress is None else show_progress
        with self._writing(), self._versions.change():
            drift = find_drift(self.graph.passages, self.stores.passages, self.stores.passage_source)
            drift = Drift(tuple(sorted({*drift.gone, *self._dropped.passages})), drift.new)
            if drift:
                logger.info("index %s: %d passages gone, %d new in its collections", self.name, len(drift.gone),
                            len(drift.new))
            nodes = self.stores.source_nodes(drift.new)
            indexer = BatchIndexer(self.stores, self.graph, self.extractor, self.num_workers, self._synonymy,
                                   self._checkpoint(), self._timer)
            indexer.run(nodes, self.insert_batch_size, show, on_batch_end)
            self._forget_documents([*drift.gone, *(n.node_id for n in nodes)])
            gone = [p for p in drift.gone if p in self.graph.passages]  # the rest a query already took out
            self._commit(detach_passages(self.graph, self._synonymy, gone), bool(drift))
        return drift

    def _forget_documents(self, passage_ids: Sequence[str]) -> None:
        """Drop the recorded hashes of the documents these passages belong to: their content changed under the
        graph, so the next ``refresh_ref_docs`` of them plans them again instead of trusting an old hash."""
        for pid in passage_ids:
            record = self.graph.passages.get(pid)
            if record is not None and record.ref_doc_id:
                self.document_hashes.delete_document(record.ref_doc_id, raise_error=False)

    def _drop_gone(self, passage_ids: list[str]) -> None:
        """Leave passages a query found in no collection out of the graph in memory (the next save or
        :meth:`reconcile` keeps it so), so that no query serves their text, facts or entities."""
        if not self._warned_drift:
            self._warned_drift = True
            logger.warning(
                "index %s: %d passages are gone from its Chroma collections (the vector index it reads changed "
                "without it); queries leave them out. index.reconcile() or `mhop index DIR --graph` brings the "
                "graph in step", self.name, len(passage_ids))
        self._forget_documents(passage_ids)
        # Their Chroma rows (entities and facts only they supported) go, and the graph is saved, with the next
        # change (_commit): a query never writes.
        self._dropped = self._dropped.merged(detach_passages(self.graph, self._synonymy, passage_ids))

    def _writing(self) -> AbstractContextManager[None]:
        """The store's writer lock across processes (a persisted index), held for a whole change."""
        return store_lock(self.persist_dir) if self.persist_dir is not None else nullcontext()

    def _checkpoint(self) -> Path | None:
        return None if self.persist_dir is None else self.persist_dir / CHECKPOINT_FILE

    def insert(
        self,
        documents: Document | Sequence[Document] | str | os.PathLike[str],
        show_progress: bool | None = None,
        on_batch_end: BatchHook | None = None,
        openie_results: str | os.PathLike[str] | None = None,
    ) -> list[str]:
        """Index documents by one rule: a document is known by its doc id (``Document.id_``) and content hash.

        New documents are added; a changed document (known id, another hash) replaces its old version: its old
        passages, and the facts and entities only they supported, leave the graph and Chroma; unchanged documents
        are left untouched (nothing is extracted or embedded again). With a ``persist_dir`` the work is
        checkpointed per batch and saved crash-safely (see :mod:`.sync`). Queries running in other threads
        meanwhile answer from the index as it was before; later queries see all of it. ``openie_results``: as in
        :meth:`from_documents`.

        Returns:
            The ids of the passages added.
        """
        return self._sync(as_documents(documents), [], show_progress, on_batch_end, openie_results,
                          corpus=_corpus(documents))[1]

    def refresh_ref_docs(self, documents: Sequence[Document], show_progress: bool | None = None,
                         on_batch_end: BatchHook | None = None,
                         openie_results: str | os.PathLike[str] | None = None, **update_kwargs: Any) -> list[bool]:
        """LlamaIndex's refresh: :meth:`insert`'s rule, reporting per document whether it was new or changed."""
        return self._sync(as_documents(documents), [], show_progress, on_batch_end, openie_results,
                          corpus=_corpus(documents))[0]

    def _sync(self, docs: Sequence[Document], nodes: Sequence[TextNode], show_progress: bool | None,
              on_batch_end: BatchHook | None, openie_results: str | os.PathLike[str] | None = None,
              corpus: str | os.PathLike[str] | None = None) -> tuple[list[bool], list[str]]:
        """Apply the sync rule to documents (and add passage nodes that come without one) as one change.

        Passages are chunked as the passage index chunks them (``vector_index.passage_nodes``, ``corpus`` the
        folder or file they were read from), so the same passage is the same node, metadata included, in both.
        """
        show = self.show_progress if show_progress is None else show_progress
        with self._writing(), self._versions.change():
            plan = plan_sync(docs, self.document_hashes, self.graph,
                             lambda d: passage_nodes(d, corpus, self.chunk_size, self.chunk_overlap))
            extractor = with_stored_openie(self.extractor, openie_results)
            indexer = BatchIndexer(self.stores, self.graph, extractor, self.num_workers, self._synonymy,
                                   self._checkpoint(), self._timer)
            added = indexer.run([*nodes, *plan.nodes], self.insert_batch_size, show, on_batch_end)
            removal = detach_passages(self.graph, self._synonymy, plan.stale)
            self.document_hashes.set_document_hashes(plan.hashes)
            self._commit(removal, bool(added) or plan.changes_anything)
        report_stored_openie(extractor)
        return plan.refreshed, added

    def _commit(self, removal: Removal, changed: bool) -> None:
        """End a change: synonymy edges, then with a ``persist_dir`` the removal file, the saved graph and
        docstore, and only then the Chroma deletes (the order :mod:`.sync` explains)."""
        self._refresh_synonymy()
        removal, self._dropped = self._dropped.merged(removal).unnamed_by(self.graph), Removal()
        root = self.persist_dir
        unsaved = root is not None and (changed or bool(removal) or not saved_index_exists(root))
        commit_removal(removal, self.stores, root, self.persist if unsaved else None)

    def _refresh_synonymy(self) -> None:
        with self._timer("synonymy"):
            self._synonymy.refresh(self.graph)

    def delete(self, doc_id: str) -> list[str]:
        """Remove a passage (by node id) or every passage of a document (by doc id, or by its file name when
        that names one document), and the document's hash.

        The passage nodes, their edges, and the facts and entities no other passage supports leave the graph and
        the Chroma collections; synonym lists are repaired. Queries running in other threads meanwhile answer
        from the graph as it was before the delete.

        Returns:
            The ids of the passages removed.

        Raises:
            UnknownDocumentError: (a ``KeyError``) no passage or document has this id (the message lists close
                matches), or a file name names several documents.
        """
        return self._delete(doc_id, from_docstore=False)

    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_ref_doc``: :meth:`delete` of a document; with ``delete_from_docstore`` its entries
        leave the storage context's docstore too (``docstore.delete_ref_doc``)."""
        return self._delete(ref_doc_id, from_docstore=delete_from_docstore)

    async def adelete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False,
                              **delete_kwargs: Any) -> list[str]:
        """:meth:`delete_ref_doc` in a worker thread."""
        return await asyncio.to_thread(self.delete_ref_doc, ref_doc_id, delete_from_docstore)

    def _delete(self, doc_id: str, from_docstore: bool) -> list[str]:
        with self._writing(), self._versions.change():
            if doc_id in self.graph.passages:
                passage_ids = [doc_id]
            else:
                doc_id = resolve_doc_id(doc_id, known_doc_ids(self.document_hashes, self.graph))
                passage_ids = self.graph.passages_of_document(doc_id)
                self.document_hashes.delete_document(doc_id, raise_error=False)
                if from_docstore:
                    self.docstore.delete_ref_doc(doc_id, raise_error=False)
            self._commit(detach_passages(self.graph, self._synonymy, passage_ids), changed=True)
            return passage_ids

    def delete_nodes(self, node_ids: list[str], delete_from_docstore: bool = False,
                     **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_nodes``: these passages leave the graph and Chroma in one change (ids the graph
        does not hold are skipped), and with ``delete_from_docstore`` their entries leave the docstore.

        Returns:
            The ids of the passages removed.
        """
        with self._writing(), self._versions.change():
            passage_ids = [p for p in dict.fromkeys(node_ids) if p in self.graph.passages]
            self._commit(detach_passages(self.graph, self._synonymy, passage_ids), changed=bool(passage_ids))
        if delete_from_docstore:
            for node_id in node_ids:
                self.docstore.delete_document(node_id, raise_error=False)
        return passage_ids

    async def adelete_nodes(self, node_ids: list[str], delete_from_docstore: bool = False,
                            **delete_kwargs: Any) -> list[str]:
        """:meth:`delete_nodes` in a worker thread."""
        return await asyncio.to_thread(self.delete_nodes, node_ids, delete_from_docstore)

    def insert_nodes(self, nodes: Sequence[BaseNode], show_progress: bool | None = None,
                     **insert_kwargs: Any) -> list[str]:
        """Index passage nodes as they are (LlamaIndex's ``insert_nodes``): each is extracted and embedded unless
        the graph holds it already. Returns the ids of the passages added."""
        return self._sync([], [_text_node(n) for n in nodes], show_progress, None)[1]

    async def ainsert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> list[str]:
        """:meth:`insert_nodes` in a worker thread."""
        return await asyncio.to_thread(self.insert_nodes, nodes)

    async def ainsert(self, document: Document, **insert_kwargs: Any) -> list[str]:
        """:meth:`insert` in a worker thread."""
        return await asyncio.to_thread(self.insert, document)

    async def arefresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> list[bool]:
        """:meth:`refresh_ref_docs` in a worker thread."""
        return await asyncio.to_thread(self.refresh_ref_docs, documents)

    def update_ref_doc(self, document: Document, show_progress: bool | None = None, **update_kwargs: Any) -> None:
        """LlamaIndex's ``update_ref_doc``: the document's passages replaced by its new version's (:meth:`insert`)."""
        self.insert(document, show_progress=show_progress)

    async def aupdate_ref_doc(self, document: Document, **update_kwargs: Any) -> None:
        """:meth:`update_ref_doc` in a worker thread."""
        await asyncio.to_thread(self.update_ref_doc, document)

    @property
    def ref_doc_info(self) -> dict[str, RefDocInfo]:
        """LlamaIndex's ``ref_doc_info``: each document the graph holds passages of, with their node ids."""
        node_ids: dict[str, list[str]] = {}
        for pid, record in self.graph.passages.items():
            if record.ref_doc_id:
                node_ids.setdefault(record.ref_doc_id, []).append(pid)
        return {doc_id: RefDocInfo(node_ids=sorted(ids)) for doc_id, ids in sorted(node_ids.items())}

    # ------------------------------------------------------------------ persistence

    def config(self) -> dict[str, Any]:
        """What :meth:`from_persist_dir` needs besides the graph: names, embedder and indexing settings."""
        return index_config(self)

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
        with store_lock(target), self._versions.lock:  # a complete version, never one a change is halfway through
            self.persist_dir = target
            self._index_struct.persist_dir = str(target.resolve())
            self.storage_context.index_store.add_index_struct(self._index_struct)
            save_index(self, target)
            save_lm_programs(self, target)
        return target

    @classmethod
    def from_persist_dir(
        cls,
        persist_dir: str | os.PathLike[str],
        chroma_client: Any = None,
        embed_model: BaseEmbedding | None = None,
        lm: Any = None,
        llm: Any = None,
        show_progress: bool = True,
        storage_context: StorageContext | None = None,
    ) -> HippoGraphIndex:
        """Reopen an index saved by :meth:`persist` (or by a build with ``persist_dir``), in the storage context
        saved beside it (``load_index_from_storage(StorageContext.from_defaults(persist_dir=...))`` is the same).

        Args:
            persist_dir: the directory :meth:`persist` wrote (the graph's edge arrays are memory-mapped read-only).
            chroma_client: the Chroma client holding the collections; default ``persist_dir/chroma`` for an index
                whose Chroma data lives there, else :func:`~llama_index_mhop.defaults.default_chroma_client`.
            embed_model: the embedder (it must be the one the index was built with); default
                ``Settings.embed_model`` if the app set one, else all-MiniLM-L6-v2.
            lm, llm: the LM for OpenIE of later inserts.
            storage_context: the app's storage context to reopen the index in, instead of the one saved beside it.

        Raises:
            FileNotFoundError: no saved index in ``persist_dir``.
            ValueError: an unknown format version, or Chroma collections that do not hold the graph's records.
        """
        root = Path(persist_dir)
        saved_context, struct = _saved_storage(root)
        storage_context = storage_context or saved_context
        return cls(index_struct=struct, storage_context=storage_context, chroma_client=chroma_client,
                   embed_model=embed_model, persist_dir=root, lm=lm, llm=llm, show_progress=show_progress)

    # ------------------------------------------------------------------ retrieval

    def retrieval_state(self, damping: float = DEFAULT_DAMPING) -> RetrievalState:
        """The arrays and PageRank matrix of the current graph version, loaded from Chroma once per version.

        While another thread inserts or deletes, this is the graph as the last finished change left it (or, if that
        version was never loaded, the call waits for the running change): never a half-changed graph. The first
        call after a change loads the new version.

        Raises:
            EmptyIndexError: the index holds no passage.
        """
        return self._versions.get(damping)

    def still_held(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without the passages gone from the index's collections since its state was loaded (the
        vector index it reads in place changed); finding one makes the next query load the graph again without
        them. Only an index reading another index's collection in place can find any."""
        if self.stores.passage_source is None or not nodes:
            return list(nodes)
        held = self.stores.held_passages([n.node.node_id for n in nodes])
        if all(n.node.node_id in held for n in nodes):
            return list(nodes)
        self._versions.invalidate()
        return [n for n in nodes if n.node.node_id in held]

    def as_retriever(self, **kwargs: Any) -> HippoGraphRetriever:
        """A :class:`~llama_index_mhop.retrievers.hippo_graph.HippoGraphRetriever` over this index."""
        from ..retrievers.hippo_graph import HippoGraphRetriever

        return HippoGraphRetriever(index=self, **kwargs)

    def as_query_engine(self, llm: Any = None, **kwargs: Any) -> RetrieverQueryEngine:
        """A ``RetrieverQueryEngine`` answering from this index's retriever.

        Args:
            llm: the LlamaIndex LLM that writes answers (default: LlamaIndex's ``Settings.llm``).
            **kwargs: retriever arguments (see ``HippoGraphRetriever``) and ``RetrieverQueryEngine.from_args``
                arguments (``response_mode``, ``node_postprocessors``, ...).
        """
        from llama_index.core.query_engine import RetrieverQueryEngine

        return RetrieverQueryEngine.from_args(self._retriever_from(kwargs), llm=llm, **kwargs)

    def as_chat_engine(self, chat_mode: str = "condense_plus_context", llm: Any = None,
                       **kwargs: Any) -> BaseChatEngine:
        """A LlamaIndex chat engine answering from this index's retriever.

        Args:
            chat_mode: ``"condense_plus_context"`` (a follow-up is condensed into a standalone question first; also
                what LlamaIndex's default ``ChatMode.BEST`` gives) or
                ``"context"`` (each message retrieves as it is).
            llm: the LlamaIndex LLM that answers (default: LlamaIndex's ``Settings.llm``).
            **kwargs: retriever arguments (see ``HippoGraphRetriever``) and the chat engine's ``from_defaults``
                arguments (``system_prompt``, ``memory``, ``node_postprocessors``, ...).

        Raises:
            ValueError: another chat mode.
        """
        from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine

        engines = {"condense_plus_context": CondensePlusContextChatEngine, "context": ContextChatEngine,
                   "best": CondensePlusContextChatEngine}  # LlamaIndex's default mode: its best engine here
        chat_mode = str(getattr(chat_mode, "value", chat_mode))
        if chat_mode not in engines:
            raise ValueError(f"chat_mode must be one of {', '.join(engines)}, got {chat_mode!r}")
        return engines[chat_mode].from_defaults(retriever=self._retriever_from(kwargs), llm=llm, **kwargs)

    def _retriever_from(self, kwargs: dict[str, Any]) -> HippoGraphRetriever:
        """The retriever an engine answers from, built from the retriever arguments among an engine's ``kwargs``
        (taken out of them; the rest are the engine's)."""
        from ..retrievers.hippo_graph import HippoGraphRetriever

        return self.as_retriever(**{k: kwargs.pop(k) for k in list(kwargs) if k in HippoGraphRetriever.ARGUMENTS})

    # ------------------------------------------------------------------ LlamaIndex's abstract steps

    def _build_index_from_nodes(self, nodes: Sequence[BaseNode], **build_kwargs: Any) -> HippoGraphStruct:
        self.insert_nodes(nodes)
        return self._index_struct

    def _insert(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> None:
        self.insert_nodes(nodes)

    def _delete_node(self, node_id: str, **delete_kwargs: Any) -> None:
        self.delete_nodes([node_id])

    def __repr__(self) -> str:
        return f"HippoGraphIndex(name={self.name!r}, {self.graph!r})"


register_index_class(HippoGraphIndex)
