"""The benchmark harness (seed 002): dataset loaders, the Searcher, the retriever registry and the Benchmarker."""

from .benchmarker import (
    DEFAULT_K_VALUES,
    METRIC_NAMES,
    Benchmarker,
    passage_ids,
    peak_rss_mb,
    save_json,
    score_rankings,
    validate_result,
)
from .context import BenchContext, passage_documents
from .loaders import (
    FORMATS,
    BenchDataset,
    BenchQuestion,
    DatasetFormatError,
    Passage,
    detect_format,
    load_dataset,
    load_hipporag,
    load_hotpotqa,
    load_hover,
    load_musique,
)
from .plots import plot
from .registry import (
    RetrieverFactory,
    RetrieverSpec,
    get_retriever_spec,
    register_retriever,
    registered_retrievers,
)
from .searcher import Searcher, pool_rankings

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
