"""``HippoGraphReader``: a query worker over a saved graph index. It maps the current save's query snapshot
(:mod:`.state_load`), shared by every worker, instead of parsing the graph and reading every vector from Chroma, and
answers exactly as the index does from the version it opened; a save without a snapshot is opened once as an index
to file one. It never writes the graph or Chroma; on an embedded store another process changed, a query or
``refresh`` raises ``StaleStoreError``."""

from __future__ import annotations

import gc
import importlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore

from .graph_files import saved_tables_digest
from .index import GraphEngines, HippoGraphIndex
from .layout import GRAPH_DIR, GRAPH_FILE, LEGACY_GRAPH_FILE
from .lm_programs import load_lm_programs
from .persistence import read_saved_config
from .state import RetrievalState
from .state_files import STATE_FOLDER
from .state_load import open_saved_state
from .walk import BASIS_FOLDER, WalkSettings
from .walk.exact import DEFAULT_DAMPING

if TYPE_CHECKING:
    from .graph_stores import GraphStores

__all__ = ["HippoGraphReader"]

logger = logging.getLogger(__name__)

#: What a reader's queries import on first use, besides this module's own imports: torch for the int8 products,
#: the retriever and engines, Chroma's HTTP client.
_READER_MODULES = ("torch", "chromadb", "llama_index_mhop.components.hippo_graph", "llama_index.core.query_engine",
                   "llama_index.core.chat_engine", "llama_index_mhop.stores.defaults")


class HippoGraphReader(GraphEngines):
    """The read side of a saved :class:`~.index.HippoGraphIndex`: retrievers and engines over the save it opened,
    from its query snapshot (``digest``: its ``tables.json``'s). Open one with :meth:`open`."""

    def __init__(self, persist_dir: Path, stores: GraphStores, fact_filter_program: Any) -> None:
        self.persist_dir = persist_dir
        self.name = stores.name
        self.stores = stores
        self.fact_filter_program = fact_filter_program
        self.digest = ""
        self._states: dict[float, RetrievalState] = {}
        self.walk = WalkSettings(name=stores.name)  # the paths of a large graph: by size, as an index's defaults

    @classmethod
    def open(cls, persist_dir: str | os.PathLike[str], chroma_client: Any = None,
             embed_model: BaseEmbedding | None = None, damping: float = DEFAULT_DAMPING) -> HippoGraphReader:
        """Open the index saved in ``persist_dir`` for queries, its state loaded for walks with ``damping``. Raises
        FileNotFoundError when nothing is saved there, ValueError for an unreadable, format 1 or store-less save."""
        root = Path(persist_dir)
        saved = read_saved_config(root)
        if not (root / GRAPH_FILE).is_file():
            raise ValueError(f"{root}: the graph is saved in format 1 (one JSON file, {LEGACY_GRAPH_FILE}), which has "
                             "no query snapshot: open it once with HippoGraphIndex.from_persist_dir and persist() it")
        reader = cls(root, saved.open_stores(chroma_client, saved.embedder(embed_model)), load_lm_programs(root, None))
        reader._open_current(damping, reader.stores.client)
        return reader

    @staticmethod
    def preload() -> None:
        """Import what a reader runs and ``gc.freeze`` the heap in a pre-fork server's parent, so forked workers share
        its pages; :meth:`open` a reader in each worker after the fork (nothing is opened or started here)."""
        for module in _READER_MODULES:
            importlib.import_module(module)
        gc.collect()
        gc.freeze()

    @property
    def embed_model(self) -> BaseEmbedding:
        """The embedder of queries."""
        return self.stores.embed_model

    @property
    def version(self) -> int:
        """The graph version this reader answers from."""
        return next(iter(self._states.values())).version

    def refresh(self, chroma_client: Any = None) -> bool:
        """Open the newest save if the index was saved since; return whether the reader moved to another save."""
        if saved_tables_digest(self.persist_dir / GRAPH_DIR) == self.digest:
            return False
        self._open_current(next(iter(self._states)), chroma_client if chroma_client is not None else self.stores.client)
        return True

    def retrieval_state(self, damping: float = DEFAULT_DAMPING) -> RetrievalState:
        """The query state of the save this reader opened, for a walk with ``damping``."""
        state = self._states.get(damping)
        if state is None:
            state = self._saved_state(self.digest, damping)
            if state is None:
                raise ValueError(f"index {self.name!r}: the query snapshot of the save this reader opened is gone "
                                 "(a newer save replaced it): call refresh()")
            self._states[damping] = state
        return state

    def still_held(self, nodes: Sequence[NodeWithScore]) -> list[NodeWithScore]:
        """``nodes`` without the passages gone from the vector index collection the index reads in place (never
        served once gone; the writer's next change takes them out of the graph)."""
        if self.stores.passage_source is None or not nodes:
            return list(nodes)
        held = self.stores.held_passages([n.node.node_id for n in nodes])
        return [n for n in nodes if n.node.node_id in held]

    def _saved_state(self, digest: str, damping: float) -> RetrievalState | None:
        return open_saved_state(self.persist_dir / STATE_FOLDER, digest, self.stores, damping,
                                basis_folder=self.persist_dir / BASIS_FOLDER, walk=self.walk)

    def _open_current(self, damping: float, chroma_client: Any) -> None:
        """Answer from the current save: its snapshot, filed first by opening the index when there is none."""
        for attempt in range(3):
            digest = saved_tables_digest(self.persist_dir / GRAPH_DIR)
            state = self._saved_state(digest, damping)
            if state is not None:
                self.digest, self._states = digest, {damping: state}
                return
            if attempt < 2:  # open the index and load its state once, which files the current save's snapshot
                logger.info("index %s: filing the query snapshot of its current save", self.name)
                HippoGraphIndex.from_persist_dir(self.persist_dir, chroma_client=chroma_client,
                                                 embed_model=self.embed_model).retrieval_state(damping)
        raise ValueError(f"index {self.name!r}: no query snapshot could be filed in "
                         f"{self.persist_dir / STATE_FOLDER} (the index was saved meanwhile, or the folder cannot "
                         "be written): open it with HippoGraphIndex.from_persist_dir")
