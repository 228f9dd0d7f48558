"""Multi-hop retrieval for LlamaIndex over Chroma: :class:`RRFFusionRetriever` (perspective queries from
:class:`PerspectiveQueryTransform`, fused by Reciprocal Rank Fusion), :class:`ConfidenceLoopRetriever` (entity
chains, a confidence check, targeted follow-up, listwise rerank), :class:`HippoGraphIndex` with its retriever
and reader (HippoRAG 2 memory, Personalized PageRank), :class:`DSPyFactFilter` (recognition memory over facts)
and the passage index beneath (:func:`build_vector_index`, :func:`sync_vector_index`).

Names are imported on first use: a light module (as ``mhop --help`` loads) imports no LlamaIndex, Chroma or
DSPy; importing the package in any way lets ``load_index_from_storage`` open a saved HippoGraphIndex."""

from __future__ import annotations

import importlib.util
import logging
import sys
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import TYPE_CHECKING, Any

from .rules.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from .components import ConfidenceLoopRetriever, HippoGraphRetriever, RRFFusionRetriever
    from .components.fact_filter import DSPyFactFilter, fact_node
    from .components.rrf_fusion import PerspectiveQueryTransform
    from .graph import HippoGraphIndex, HippoGraphReader
    from .rules.ranking import reciprocal_rank_fusion
    from .stores.corpus import load_documents
    from .stores.defaults import default_embed_model
    from .stores.minilm import MiniLMEmbedding
    from .stores.vector_index import (
        build_vector_index,
        delete_documents,
        load_vector_index,
        sync_vector_index,
    )

__all__ = ["ConfidenceLoopRetriever", "DSPyFactFilter", "HippoGraphIndex", "HippoGraphReader", "HippoGraphRetriever",
           "MiniLMEmbedding", "PerspectiveQueryTransform", "RRFFusionRetriever", "build_vector_index",
           "default_embed_model", "delete_documents", "fact_node", "load_documents", "load_vector_index",
           "reciprocal_rank_fusion", "sync_vector_index"]
__version__ = "0.1.0"

#: The modules (relative to this package) and the names each exports.
_MODULES = {
    ".components": ("ConfidenceLoopRetriever", "HippoGraphRetriever", "RRFFusionRetriever"),
    ".components.fact_filter": ("DSPyFactFilter", "fact_node"),
    ".components.rrf_fusion": ("PerspectiveQueryTransform",),
    ".graph": ("HippoGraphIndex", "HippoGraphReader"),
    ".rules.ranking": ("reciprocal_rank_fusion",),
    ".stores.corpus": ("load_documents",),
    ".stores.defaults": ("default_embed_model",),
    ".stores.minilm": ("MiniLMEmbedding",),
    ".stores.vector_index": ("build_vector_index", "delete_documents", "load_vector_index", "sync_vector_index"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


#: The LlamaIndex module whose type table ``load_index_from_storage`` reads.
_REGISTRY = "llama_index.core.indices.registry"


def _register_graph_index() -> None:
    try:
        from .graph.index_struct import register_index_opener

        register_index_opener()
    except Exception:  # never let it break LlamaIndex's own import: only opening a saved graph needs it
        logging.getLogger(__name__).warning("the graph index could not be registered with LlamaIndex",
                                            exc_info=True)


class _RegistryWatcher(MetaPathFinder):
    """Registers the graph index the moment LlamaIndex's type table is imported, so that importing this package
    stays free of LlamaIndex's own import time (one use, then it leaves ``sys.meta_path``)."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> ModuleSpec | None:
        if fullname != _REGISTRY:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)  # as the finders after this one find it
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module: ModuleType) -> None:
            exec_module(module)
            _register_graph_index()

        spec.loader.exec_module = exec_and_register  # type: ignore[method-assign]  # this module's loader only
        return spec


if _REGISTRY in sys.modules:
    _register_graph_index()
elif not any(isinstance(finder, _RegistryWatcher) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegistryWatcher())
