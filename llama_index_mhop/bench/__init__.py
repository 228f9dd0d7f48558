"""The benchmark harness (seed 002): dataset loaders, the Searcher, the retriever registry and the Benchmarker.
Names are imported on first use."""

from __future__ import annotations

from ..rules.lazy_exports import lazy_exports

#: The modules (relative to this package) and the names each exports.
_MODULES = {
    ".benchmarker": ("DEFAULT_K_VALUES", "METRIC_NAMES", "Benchmarker", "passage_ids", "peak_rss_mb", "save_json",
                     "validate_result"),
    ".context": ("BenchContext", "passage_documents"),
    ".loaders": ("FORMATS", "BenchDataset", "BenchQuestion", "DatasetFormatError", "Passage", "detect_format",
                 "load_dataset", "load_hipporag", "load_hotpotqa", "load_hover", "load_musique"),
    ".cli": ("plot",),
    ".registry": ("RetrieverFactory", "RetrieverSpec", "get_retriever_spec", "register_retriever",
                  "registered_retrievers", "Searcher", "pool_rankings"),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}
__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
