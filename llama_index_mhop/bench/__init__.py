"""The benchmark harness (seed 002): dataset loaders, the Searcher, the retriever registry and the Benchmarker.

The names below are imported on first use, so ``mhop query`` reads the retriever registry without importing the
Benchmarker and its statistics.
"""

from __future__ import annotations

from ..rules.lazy_exports import lazy_exports

__all__ = [
    "DEFAULT_K_VALUES",
    "FORMATS",
    "METRIC_NAMES",
    "BenchContext",
    "BenchDataset",
    "BenchQuestion",
    "Benchmarker",
    "DatasetFormatError",
    "Passage",
    "RetrieverFactory",
    "RetrieverSpec",
    "Searcher",
    "detect_format",
    "get_retriever_spec",
    "load_dataset",
    "load_hipporag",
    "load_hotpotqa",
    "load_hover",
    "load_musique",
    "passage_documents",
    "passage_ids",
    "peak_rss_mb",
    "plot",
    "pool_rankings",
    "register_retriever",
    "registered_retrievers",
    "save_json",
    "score_rankings",
    "validate_result",
]

#: Where each exported name lives (the module, relative to this package).
_EXPORTS = {
    "DEFAULT_K_VALUES": ".benchmarker",
    "METRIC_NAMES": ".benchmarker",
    "Benchmarker": ".benchmarker",
    "passage_ids": ".benchmarker",
    "peak_rss_mb": ".benchmarker",
    "save_json": ".benchmarker",
    "score_rankings": ".benchmarker",
    "validate_result": ".benchmarker",
    "BenchContext": ".context",
    "passage_documents": ".context",
    "FORMATS": ".loaders",
    "BenchDataset": ".loaders",
    "BenchQuestion": ".loaders",
    "DatasetFormatError": ".loaders",
    "Passage": ".loaders",
    "detect_format": ".loaders",
    "load_dataset": ".loaders",
    "load_hipporag": ".loaders",
    "load_hotpotqa": ".loaders",
    "load_hover": ".loaders",
    "load_musique": ".loaders",
    "plot": ".cli",
    "RetrieverFactory": ".registry",
    "RetrieverSpec": ".registry",
    "get_retriever_spec": ".registry",
    "register_retriever": ".registry",
    "registered_retrievers": ".registry",
    "Searcher": ".searcher",
    "pool_rankings": ".searcher",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
