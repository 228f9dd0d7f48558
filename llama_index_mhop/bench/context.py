"""What a retriever factory reads: the benchmark's shared corpus, index, embedder, store and LM, or a query's
indexes. It carries nothing about the questions, so nothing a retriever builds can be fitted to them."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import BaseNode, TextNode

from ..stores.corpus import chunk_documents, make_document, stable_id
from ..stores.vector_index import all_passages, build_vector_index
from .loaders import Passage

__all__ = ["BenchContext", "IndexContext", "passage_documents"]

logger = logging.getLogger(__name__)


def passage_documents(passages: Sequence[Passage]) -> list[Document]:
    """LlamaIndex Documents of a corpus; metadata holds ``title`` and ``passage_id`` (not embedded)."""
    return [make_document(p.title, p.text, passage_id=p.passage_id) for p in passages]


class BenchContext:
    """The shared resources of one benchmark run, passed to every retriever factory."""

    def __init__(self, documents: Sequence[Document], embed_model: BaseEmbedding, chroma_client: Any,
                 work_dir: str | Path, top_k: int, lm: Any = None, collection_name: str | None = None,
                 show_progress: bool = False, vector_index: VectorStoreIndex | None = None,
                 program: str | None = None) -> None:
        self.documents = list(documents)
        self.program = program
        self.embed_model = embed_model
        self.chroma_client = chroma_client
        self.work_dir = Path(work_dir)
        self.top_k = top_k
        self.lm = lm
        self.collection_name = collection_name or "mhop_bench_" + stable_id(*(d.id_ for d in self.documents))[:16]
        self.show_progress = show_progress
        self._vector_index: VectorStoreIndex | None = vector_index
        #: Seconds spent building the shared vector index (None until it is built; 0.0 when one was given).
        self.vector_index_seconds: float | None = None if vector_index is None else 0.0

    @property
    def vector_index(self) -> VectorStoreIndex:
        """The shared Chroma ``VectorStoreIndex`` of the corpus, built on first use into a fresh collection."""
        if self._vector_index is None:
            self.build_vector_index()
        assert self._vector_index is not None
        return self._vector_index

    def build_vector_index(self) -> float:
        """Build the shared index (once) and return the seconds it took; a collection left by an earlier run is
        dropped first, so the time always measures embedding and storing the whole corpus."""
        if self._vector_index is not None and self.vector_index_seconds is not None:
            return self.vector_index_seconds
        self._drop_collections(self.collection_name)
        start = time.perf_counter()
        self._vector_index = build_vector_index(self.documents, collection_name=self.collection_name,
                                                chroma_client=self.chroma_client, embed_model=self.embed_model,
                                                show_progress=self.show_progress)
        self.vector_index_seconds = time.perf_counter() - start
        logger.info("shared vector index %s: %d documents in %.1f s", self.collection_name, len(self.documents),
                    self.vector_index_seconds)
        return self.vector_index_seconds

    def _drop_collections(self, *names: str) -> None:
        """Delete those of ``names`` an earlier run left in the store."""
        existing = {getattr(c, "name", c) for c in self.chroma_client.list_collections()}
        for name in names:
            if name in existing:
                self.chroma_client.delete_collection(name)

    @cached_property
    def nodes(self) -> list[TextNode]:
        """The corpus chunked exactly as in the shared index (same node ids), for retrievers with their own index."""
        return chunk_documents(self.documents)

    @cached_property
    def graph_index(self) -> Any:
        """A HippoGraphIndex over the shared vector index's passages, built fresh on first use (so its build time is a
        real measurement); the passages' stored embeddings are reused, only entities and facts are embedded."""
        from ..graph import HippoGraphIndex
        name = self.collection_name.replace("mhop_bench_", "mhop_hippo_")
        self._drop_collections(*(f"{name}_{suffix}" for suffix in ("passages", "entities", "facts")))
        return HippoGraphIndex.from_vector_index(self.vector_index, embed_model=self.embed_model,
                                                 chroma_client=self.chroma_client, name=name,
                                                 show_progress=self.show_progress)


class IndexContext:
    """The indexes of ``mhop query`` or ``mhop demo``, opened by the given loaders on first use."""

    def __init__(self, top_k: int, lm: Any = None, vector_index: Callable[[], VectorStoreIndex] | None = None,
                 graph_index: Callable[[], Any] | None = None, program: str | None = None) -> None:
        self.top_k = top_k
        self.lm = lm
        self.program = program
        self._loaders: dict[str, Callable[[], Any] | None] = {"vector": vector_index, "graph": graph_index}

    def _open(self, which: str) -> Any:
        loader = self._loaders[which]
        if loader is None:
            raise ValueError(f"this context has no {which} index")
        return loader()

    @cached_property
    def vector_index(self) -> VectorStoreIndex:
        return self._open("vector")

    @cached_property
    def nodes(self) -> list[BaseNode]:
        """Every passage of the vector index (for retrievers that build their own index, such as BM25)."""
        return all_passages(self.vector_index)

    @cached_property
    def graph_index(self) -> Any:
        return self._open("graph")
