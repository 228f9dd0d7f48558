"""How a graph index is built and changed: its constructors and document verbs, each one
:class:`~.writer.IndexWriter` change."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from llama_index.core import Document, StorageContext, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.callbacks import CallbackManager
from llama_index.core.schema import BaseNode, ImageNode, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore, RefDocInfo

from ..adapters.llama_index import index_embed_model
from ..stores.corpus import load_documents
from ..stores.dimension_check import check_embedding_dimension
from .extraction import Extractor, OpenIEExtractor
from .graph_stores import resolve_client, vector_index_collection
from .index_config import HippoGraphIndexConfig
from .indexing import BatchHook
from .json_files import DamagedFileError
from .knowledge_graph import KnowledgeGraph
from .layout import saved_index_exists
from .openie_file import with_stored_openie
from .persistence import discard_damaged_save, saved_storage
from .reconcile import Drift
from .sync import as_documents, corpus_of, passages_by_document
from .writer import IndexWriter

__all__ = ["IndexVerbs"]

#: The index class a constructor builds (the host of the mixin).
Index = TypeVar("Index", bound="IndexVerbs")


def _text_node(node: BaseNode) -> TextNode:
    """A passage node, or a clear error for a node that is not a text passage (an image)."""
    if not isinstance(node, TextNode) or isinstance(node, ImageNode):
        raise TypeError(f"HippoGraphIndex indexes text passages; node {node.node_id} is a {type(node).__name__}")
    return node


class IndexVerbs:
    """The constructors and document verbs of :class:`~.index.HippoGraphIndex`, which provides the fields."""

    _writer: IndexWriter
    extractor: Extractor
    graph: KnowledgeGraph
    docstore: BaseDocumentStore

    @classmethod
    def from_documents(
        cls: type[Index], documents: Sequence[Document] | str | os.PathLike[str] | VectorStoreIndex,
        embed_model: BaseEmbedding | None = None, chroma_client: Any = None,
        persist_dir: str | os.PathLike[str] | None = None, lm: Any = None, llm: Any = None,
        show_progress: bool | None = None, *, config: HippoGraphIndexConfig | None = None,
        extractor: Extractor | None = None, on_batch_end: BatchHook | None = None,
        openie_results: str | os.PathLike[str] | None = None, storage_context: StorageContext | None = None,
        callback_manager: CallbackManager | None = None, **settings: Any,
    ) -> Index:
        """Index documents (LlamaIndex documents, a corpus path, or a ``VectorStoreIndex`` over Chroma) into a new
        or resumed index; with ``persist_dir`` a killed build resumes and a finished one gets only missing documents.
        Raises ``CorpusError`` for no text, ``ValueError`` for a bad setting."""
        from ..stores.defaults import resolve_embed_model  # the defaults layer, only once it is needed
        config = HippoGraphIndexConfig.of(config, settings if show_progress is None
                                          else {**settings, "show_progress": show_progress})
        source = None
        docs: list[Document] = []
        if isinstance(documents, VectorStoreIndex):
            source = vector_index_collection(documents)
            # LlamaIndex keeps the index's embedder private; its stored vectors are only comparable with its queries.
            embed_model = embed_model or index_embed_model(documents)
        else:
            docs = load_documents(documents)
        embed_model = resolve_embed_model(embed_model)
        if source is not None:  # its stored vectors are read as they are: the embedder must fit them
            check_embedding_dimension(source, embed_model)
        index = None
        if persist_dir is not None and saved_index_exists(Path(persist_dir)):
            index = cls.reopen_or_discard(persist_dir, chroma_client=chroma_client, embed_model=embed_model, lm=lm,
                                          llm=llm, storage_context=storage_context,  # with the saved OpenIE program
                                          config=config)
        if index is not None:
            index.extractor = with_stored_openie(extractor or index.extractor, openie_results)
        else:
            client, mode = resolve_client(chroma_client, persist_dir)
            index = cls(storage_context=storage_context, callback_manager=callback_manager, config=config,
                        chroma_client=client, embed_model=embed_model, persist_dir=persist_dir, chroma_mode=mode,
                        extractor=with_stored_openie(extractor or OpenIEExtractor(lm=lm, llm=llm), openie_results))
        index._writer.follow(index.extractor, source, docs, on_batch_end, corpus_of(documents))
        return index

    @classmethod
    def from_vector_index(cls: type[Index], vector_index: VectorStoreIndex, **kwargs: Any) -> Index:
        """A graph index over the passages of a Chroma-backed ``VectorStoreIndex``, reusing their nodes and
        embeddings; a ``TypeError`` when the index does not keep its nodes in Chroma."""
        return cls.from_documents(vector_index, **kwargs)

    @classmethod
    def reopen_or_discard(cls: type[Index], persist_dir: str | os.PathLike[str], **kwargs: Any) -> Index | None:
        """The index saved in ``persist_dir``, or None when its save is damaged (its derived files removed)."""
        try:
            return cls.from_persist_dir(persist_dir, **kwargs)
        except DamagedFileError as exc:
            discard_damaged_save(Path(persist_dir), exc, kwargs.get("chroma_client"))
            return None

    @classmethod
    def from_persist_dir(cls: type[Index], persist_dir: str | os.PathLike[str], chroma_client: Any = None,
                         embed_model: BaseEmbedding | None = None, lm: Any = None, llm: Any = None,
                         show_progress: bool | None = None, storage_context: StorageContext | None = None, *,
                         config: HippoGraphIndexConfig | None = None) -> Index:
        """Reopen an index saved by ``persist``. Raises ``FileNotFoundError`` for no saved index, ``ValueError``
        for an unknown format or missing collections."""
        root = Path(persist_dir)
        saved_context, struct = saved_storage(root)
        settings = {} if show_progress is None else {"show_progress": show_progress}
        return cls(index_struct=struct, storage_context=storage_context or saved_context, chroma_client=chroma_client,
                   embed_model=embed_model, persist_dir=root, lm=lm, llm=llm, config=config, **settings)

    def reconcile(self, show_progress: bool | None = None, on_batch_end: BatchHook | None = None) -> Drift:
        """Bring the graph in step with the passages it stands on (:mod:`.reconcile`): passages in no collection
        leave it, passages of the collection read in place it lacks are extracted and added. Idempotent, and safe
        to kill; queries meanwhile answer from the graph as it was. Returns the passages gone and new."""
        return self._writer.reconcile(self.extractor, show_progress, on_batch_end)

    def insert(self, documents: Document | Sequence[Document] | str | os.PathLike[str],
               show_progress: bool | None = None, on_batch_end: BatchHook | None = None,
               openie_results: str | os.PathLike[str] | None = None) -> list[str]:
        """Index documents by :mod:`.sync`'s rule (new added, changed replaced, unchanged left); the ids of the
        passages added."""
        return self._writer.sync(self.extractor, as_documents(documents), [], show_progress, on_batch_end,
                                 openie_results, corpus=corpus_of(documents))[1]

    def refresh_ref_docs(self, documents: Sequence[Document], show_progress: bool | None = None,
                         on_batch_end: BatchHook | None = None,
                         openie_results: str | os.PathLike[str] | None = None, **update_kwargs: Any) -> list[bool]:
        """LlamaIndex's refresh: :meth:`insert`'s rule, reporting per document whether it was new or changed."""
        return self._writer.sync(self.extractor, as_documents(documents), [], show_progress, on_batch_end,
                                 openie_results, corpus=corpus_of(documents))[0]

    def insert_nodes(self, nodes: Sequence[BaseNode], show_progress: bool | None = None,
                     **insert_kwargs: Any) -> list[str]:
        """Index passage nodes as they are, each extracted and embedded unless the graph holds it; the ids added."""
        return self._writer.sync(self.extractor, [], [_text_node(n) for n in nodes], show_progress, None)[1]

    def update_ref_doc(self, document: Document, show_progress: bool | None = None, **update_kwargs: Any) -> None:
        """LlamaIndex's ``update_ref_doc``: the document's passages replaced by its new version's (:meth:`insert`)."""
        self.insert(document, show_progress=show_progress)

    def delete(self, doc_id: str) -> list[str]:
        """Remove a passage (node id) or a document's passages (doc id or file name); the ids removed. Raises
        ``UnknownDocumentError`` for no such passage or document, or a file name naming several."""
        return self._writer.delete(doc_id, None)

    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_ref_doc``: :meth:`delete` of a document (and its docstore entries if asked)."""
        return self._writer.delete(ref_doc_id, self.docstore if delete_from_docstore else None)

    def delete_nodes(self, node_ids: list[str], delete_from_docstore: bool = False,
                     **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_nodes``: one change removing the passages the graph holds; the ids removed."""
        passage_ids = self._writer.delete_passages(node_ids)
        if delete_from_docstore:
            for node_id in node_ids:
                self.docstore.delete_document(node_id, raise_error=False)
        return passage_ids

    async def ainsert(self, document: Document, **insert_kwargs: Any) -> list[str]:
        """:meth:`insert` in a worker thread."""
        return await asyncio.to_thread(self.insert, document)

    async def arefresh_ref_docs(self, documents: Sequence[Document], **update_kwargs: Any) -> list[bool]:
        """:meth:`refresh_ref_docs` in a worker thread."""
        return await asyncio.to_thread(self.refresh_ref_docs, documents)

    async def ainsert_nodes(self, nodes: Sequence[BaseNode], **insert_kwargs: Any) -> list[str]:
        """:meth:`insert_nodes` in a worker thread."""
        return await asyncio.to_thread(self.insert_nodes, nodes)

    async def aupdate_ref_doc(self, document: Document, **update_kwargs: Any) -> None:
        """:meth:`update_ref_doc` in a worker thread."""
        await asyncio.to_thread(self.update_ref_doc, document)

    async def adelete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False,
                              **delete_kwargs: Any) -> list[str]:
        """:meth:`delete_ref_doc` in a worker thread."""
        return await asyncio.to_thread(self.delete_ref_doc, ref_doc_id, delete_from_docstore)

    async def adelete_nodes(self, node_ids: list[str], delete_from_docstore: bool = False,
                            **delete_kwargs: Any) -> list[str]:
        """:meth:`delete_nodes` in a worker thread."""
        return await asyncio.to_thread(self.delete_nodes, node_ids, delete_from_docstore)

    @property
    def ref_doc_info(self) -> dict[str, RefDocInfo]:
        """LlamaIndex's ``ref_doc_info``: each document the graph holds passages of, with their node ids."""
        by_document = passages_by_document(self.graph)
        return {doc_id: RefDocInfo(node_ids=sorted(ids)) for doc_id, ids in sorted(by_document.items())}
