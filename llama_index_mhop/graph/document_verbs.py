"""LlamaIndex's document verbs of the graph index: insert, refresh, update and delete (each with its async form,
run in a worker thread), ``ref_doc_info``, and reconciling with the collections the graph stands on.

:class:`DocumentVerbs` is mixed into :class:`~.index.HippoGraphIndex`; each verb is one change of its
:class:`~.writer.IndexWriter`, which holds the rules (the sync rule, the commit order, the locks).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from llama_index.core import Document
from llama_index.core.schema import BaseNode, ImageNode, TextNode
from llama_index.core.storage.docstore.types import BaseDocumentStore, RefDocInfo

from .extraction import Extractor
from .indexing import BatchHook
from .knowledge_graph import KnowledgeGraph
from .reconcile import Drift
from .sync import as_documents, corpus_of
from .writer import IndexWriter

__all__ = ["DocumentVerbs"]


def _text_node(node: BaseNode) -> TextNode:
    """A passage node, or a clear error for a node that is not a text passage (an image)."""
    if not isinstance(node, TextNode) or isinstance(node, ImageNode):
        raise TypeError(f"HippoGraphIndex indexes text passages; node {node.node_id} is a {type(node).__name__}")
    return node


class DocumentVerbs:
    """LlamaIndex's document verbs over a graph index (a mixin of :class:`~.index.HippoGraphIndex`).

    The host provides its writer (``_writer``), its ``extractor``, its ``graph`` and the storage context's
    ``docstore``.
    """

    _writer: IndexWriter
    extractor: Extractor
    graph: KnowledgeGraph
    docstore: BaseDocumentStore

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
        return self._writer.reconcile(self.extractor, show_progress, on_batch_end)

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
        """Index passage nodes as they are (LlamaIndex's ``insert_nodes``): each is extracted and embedded unless
        the graph holds it already. Returns the ids of the passages added."""
        return self._writer.sync(self.extractor, [], [_text_node(n) for n in nodes], show_progress, None)[1]

    def update_ref_doc(self, document: Document, show_progress: bool | None = None, **update_kwargs: Any) -> None:
        """LlamaIndex's ``update_ref_doc``: the document's passages replaced by its new version's (:meth:`insert`)."""
        self.insert(document, show_progress=show_progress)

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
        return self._writer.delete(doc_id, None)

    def delete_ref_doc(self, ref_doc_id: str, delete_from_docstore: bool = False, **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_ref_doc``: :meth:`delete` of a document; with ``delete_from_docstore`` its entries
        leave the storage context's docstore too (``docstore.delete_ref_doc``)."""
        return self._writer.delete(ref_doc_id, self.docstore if delete_from_docstore else None)

    def delete_nodes(self, node_ids: list[str], delete_from_docstore: bool = False,
                     **delete_kwargs: Any) -> list[str]:
        """LlamaIndex's ``delete_nodes``: these passages leave the graph and Chroma in one change (ids the graph
        does not hold are skipped), and with ``delete_from_docstore`` their entries leave the docstore.

        Returns:
            The ids of the passages removed.
        """
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
        node_ids: dict[str, list[str]] = {}
        for pid, record in self.graph.passages.items():
            if record.ref_doc_id:
                node_ids.setdefault(record.ref_doc_id, []).append(pid)
        return {doc_id: RefDocInfo(node_ids=sorted(ids)) for doc_id, ids in sorted(node_ids.items())}
