"""The writing side of a graph index: every change it makes, each one unit, in the order that keeps it crash-safe. A
change holds the store's writer lock and the state's lock (:class:`~.state.VersionedState`), so queries answer from
the last finished change meanwhile; it ends as :mod:`.sync` orders it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

from llama_index.core import Document
from llama_index.core.schema import TextNode
from llama_index.core.storage.docstore import SimpleDocumentStore
from llama_index.core.storage.docstore.types import BaseDocumentStore

from ..stores.consistency import DEFAULT_LOCK_TIMEOUT, StoreLockedError, store_lock
from ..stores.passage_rows import passage_nodes
from ..stores.sync import resolve_doc_id
from .checkpoint import CHECKPOINT_FILE
from .extraction import Extractor
from .graph_stores import GraphStores, collection_passages
from .index_config import HippoGraphIndexConfig
from .indexing import BatchHook, BatchIndexer, PhaseTimer
from .knowledge_graph import KnowledgeGraph
from .layout import saved_index_exists
from .openie_file import report_stored_openie, with_stored_openie
from .reconcile import Drift, find_drift
from .state import VersionedState
from .state_files import STATE_FOLDER
from .sync import Removal, commit_removal, detach_passages, finish_removal, known_doc_ids, plan_refresh
from .synonym_lists import SynonymyRefresher
from .walk.basis_files import BASIS_FOLDER

__all__ = ["IndexWriter"]

logger = logging.getLogger(__name__)


class IndexWriter:
    """Every change of one graph index: inserts and refreshes by the sync rule, deletes, reconciling with its
    collections, and taking out passages a query found gone (``behind``: the next query reconciles first)."""

    def __init__(self, graph: KnowledgeGraph, stores: GraphStores, config: HippoGraphIndexConfig,
                 document_hashes: SimpleDocumentStore, persist_dir: Path | None, save: Callable[[], object]) -> None:
        self.graph = graph
        self.stores = stores
        self.config = config
        self.document_hashes = document_hashes
        self.persist_dir = persist_dir
        self.synonymy = SynonymyRefresher(stores, config.exact_synonymy_max_entities)
        self.timer = PhaseTimer()
        self.versions = VersionedState(graph, stores, before_load=self.refresh_synonymy,
                                       basis_folder=lambda: self._beside(BASIS_FOLDER),
                                       state_folder=lambda: self._beside(STATE_FOLDER),
                                       drop_gone=self.drop_gone, walk=config.walk_settings())
        self._save = save
        self._warned_drift = False
        self.behind = False
        self._dropped = Removal()  # what queries took out of the graph in memory, until the next change saves it

    def _beside(self, name: str) -> Path | None:
        """``name`` in a persisted index's folder (checkpoint, walk basis, query state files); None in memory."""
        return None if self.persist_dir is None else self.persist_dir / name

    @contextmanager
    def change(self, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> Iterator[None]:
        """One change: the store's writer lock across processes (a persisted index), then the state's lock; a
        removal a killed change left is completed first (only a writer deletes: readers never write)."""
        across = store_lock(self.persist_dir, lock_timeout) if self.persist_dir is not None else nullcontext()
        with across, self.versions.change():
            if self.persist_dir is not None:
                finish_removal(self.persist_dir, self.graph, self.stores)
            yield

    def _indexer(self, extractor: Extractor) -> BatchIndexer:
        return BatchIndexer(self.stores, self.graph, extractor, self.config.num_workers, self.synonymy,
                            self._beside(CHECKPOINT_FILE), self.timer)

    def sync(self, extractor: Extractor, docs: Sequence[Document], nodes: Sequence[TextNode],
             show_progress: bool | None, on_batch_end: BatchHook | None,
             openie_results: str | os.PathLike[str] | None = None,
             corpus: str | os.PathLike[str] | None = None) -> tuple[list[bool], list[str]]:
        """Apply the sync rule to documents (and add passage nodes that come without one) as one change; per
        document whether it was new or changed, and the ids of the passages added. Passages are chunked as the
        passage index chunks them (``corpus``: the folder or file they were read from), so they are the same nodes."""
        show = self.config.show_progress if show_progress is None else show_progress
        config = self.config
        with self.change():
            plan = plan_refresh(docs, self.document_hashes, self.graph,
                             lambda d: passage_nodes(d, corpus, config.chunk_size, config.chunk_overlap))
            extractor = with_stored_openie(extractor, openie_results)
            added = self._indexer(extractor).run([*nodes, *plan.nodes], config.insert_batch_size, show, on_batch_end)
            removal = detach_passages(self.graph, self.synonymy, plan.stale)
            self.document_hashes.set_document_hashes(plan.hashes)
            self._commit(removal, bool(added) or plan.changes_anything)
        report_stored_openie(extractor)
        return plan.refreshed, added

    def follow(self, extractor: Extractor, source: Any, docs: Sequence[Document], on_batch_end: BatchHook | None,
               corpus: str | os.PathLike[str] | None) -> None:
        """Index ``docs``, or follow a vector index's collection ``source``: read in place (in this index's Chroma
        store) the graph is reconciled with it; from another store its passages are copied with their stored
        embeddings (none embedded again either way)."""
        if source is not None and self.stores.read_passages_from(source):
            self.reconcile(extractor, None, on_batch_end)
        else:
            nodes = [] if source is None else collection_passages(source, with_embeddings=True)
            self.sync(extractor, docs, nodes, None, on_batch_end, corpus=corpus)

    def reconcile(self, extractor: Extractor, show_progress: bool | None, on_batch_end: BatchHook | None) -> Drift:
        """Bring the graph in step with the passages it stands on (``HippoGraphIndex.reconcile``)."""
        show = self.config.show_progress if show_progress is None else show_progress
        with self.change():
            drift = self._drift()
            self._follow(drift, extractor, show, on_batch_end)
        return drift

    def catch_up(self, extractor: Extractor) -> bool:
        """Reconcile after a query found passages gone (:attr:`behind`), before it answers, when at most
        ``auto_reconcile_max_passages`` passages are new; never waiting for another writer nor failing the query
        (a read-only store, a writer at work: it leaves the gone passages out). Whether it reconciled."""
        from chromadb.errors import ChromaError
        self.behind = False
        limit = self.config.auto_reconcile_max_passages
        if not limit or self.versions.changing:
            return False
        try:
            with self.change(lock_timeout=0):
                drift = self._drift()
                if len(drift.new) > limit:
                    logger.warning("index %s: %d passages are new in the vector index it reads, more than a query "
                                   "reconciles (auto_reconcile_max_passages=%d); index.reconcile() adds them",
                                   self.config.name, len(drift.new), limit)
                    return False
                self._follow(drift, extractor, False, None)
        # A writer at work, a read-only folder, the vector index changing under the read: left to a later query
        except (StoreLockedError, OSError, ChromaError) as exc:
            logger.warning("index %s: not reconciled on this query (%s); gone passages are left out", self.config.name,
                           exc)
            return False
        return True

    def _drift(self) -> Drift:
        """The passages gone from the index's collections (and those queries took out) and the new ones."""
        drift = find_drift(self.graph.passages, self.stores.passages, self.stores.passage_source)
        drift = Drift(tuple(sorted({*drift.gone, *self._dropped.passages})), drift.new)
        if drift:
            logger.info("index %s: %d passages gone, %d new in its collections", self.config.name,
                        len(drift.gone), len(drift.new))
        return drift

    def _follow(self, drift: Drift, extractor: Extractor, show: bool, on_batch_end: BatchHook | None) -> None:
        """Inside a change: the gone passages out, the new ones extracted and in, the change committed."""
        # Read batch by batch: a build over a large collection never holds all its passage nodes at once.
        added = self._indexer(extractor).run_ids(drift.new, self.stores.source_nodes,
                                                 self.config.insert_batch_size, show, on_batch_end, in_place=True)
        self._forget_documents([*drift.gone, *added])
        gone = [p for p in drift.gone if p in self.graph.passages]  # the rest a query already took out
        self._commit(detach_passages(self.graph, self.synonymy, gone), bool(drift))

    def delete(self, doc_id: str, docstore: BaseDocumentStore | None) -> list[str]:
        """``HippoGraphIndex.delete``, also from ``docstore`` when given; returns the ids removed. Raises
        UnknownDocumentError when no passage or document has this id."""
        with self.change():
            if doc_id in self.graph.passages:
                passage_ids = [doc_id]
            else:
                doc_id = resolve_doc_id(doc_id, known_doc_ids(self.document_hashes, self.graph))
                passage_ids = self.graph.passages_of_document(doc_id)
                self.document_hashes.delete_document(doc_id, raise_error=False)
                if docstore is not None:
                    docstore.delete_ref_doc(doc_id, raise_error=False)
            self._commit(detach_passages(self.graph, self.synonymy, passage_ids), changed=True)
            return passage_ids

    def delete_passages(self, node_ids: Sequence[str]) -> list[str]:
        """Remove these passages in one change (ids the graph does not hold are skipped); their ids."""
        with self.change():
            passage_ids = [p for p in dict.fromkeys(node_ids) if p in self.graph.passages]
            self._commit(detach_passages(self.graph, self.synonymy, passage_ids), changed=bool(passage_ids))
        return passage_ids

    def _commit(self, removal: Removal, changed: bool) -> None:
        """End a change: synonymy edges, then with a ``persist_dir`` the removal file, the saved graph and
        docstore, and only then the Chroma deletes (the order :mod:`.sync` explains)."""
        self.refresh_synonymy()
        removal, self._dropped = self._dropped.merged(removal).unnamed_by(self.graph), Removal()
        root = self.persist_dir
        unsaved = root is not None and (changed or bool(removal) or not saved_index_exists(root))
        commit_removal(removal, self.stores, root, self._save if unsaved else None)

    def refresh_synonymy(self) -> None:
        """Synonym lists for the entities that are new or lost a neighbour (run before a state is loaded too)."""
        with self.timer("synonymy"):
            self.synonymy.refresh(self.graph)

    def _forget_documents(self, passage_ids: Sequence[str]) -> None:
        """Drop the recorded hashes of the documents these passages belong to: their content changed under the
        graph, so the next ``refresh_ref_docs`` of them plans them again instead of trusting an old hash."""
        for pid in passage_ids:
            record = self.graph.passages.get(pid)
            if record is not None and record.ref_doc_id:
                self.document_hashes.delete_document(record.ref_doc_id, raise_error=False)

    def drop_gone(self, passage_ids: list[str]) -> None:
        """Leave passages a query found in no collection out of the graph in memory (the next save or
        :meth:`reconcile` keeps it so), so that no query serves their text, facts or entities."""
        self.behind = True
        if not self._warned_drift and not self.config.auto_reconcile_max_passages:
            self._warned_drift = True
            logger.warning("index %s: %d passages are gone from its Chroma collections (the vector index it reads "
                           "changed without it); queries leave them out. index.reconcile() or `mhop index DIR "
                           "--graph` brings the graph in step", self.config.name, len(passage_ids))
        self._forget_documents(passage_ids)
        # Their Chroma rows (entities and facts only they supported) go, and the graph is saved, with the next
        # change (_commit): a query never writes.
        self._dropped = self._dropped.merged(detach_passages(self.graph, self.synonymy, passage_ids))
