"""The ``mhop`` command's argument definitions and checks, in the standard library alone.

``mhop --help``, ``mhop <command> --help`` and an argument error are answered from this module and ``cli.py``
without importing Chroma, LlamaIndex, DSPy, torch or numpy: the commands import what they need when they run.
The names and choices kept here mirror the modules that own them (the retriever registry, the dataset loaders,
``bench.optimize``); ``tests/test_cli_start.py`` checks that they agree.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from typing import Any

__all__ = [
    "DATASET_FORMATS",
    "OPTIMIZABLE",
    "OPTIMIZERS",
    "OPTIMIZE_METRICS",
    "RETRIEVER_NAMES",
    "SYNC_LOG_SUFFIX",
    "add_bench_arguments",
    "add_optimize_arguments",
    "collection_name_problem",
    "parse_k_values",
    "timeout_problem",
]

#: The registered retrievers (``bench.registry.registered_retrievers()``), in registration order.
RETRIEVER_NAMES = (
    "vector",
    "bm25",
    "query_fusion",
    "rrf_fusion",
    "confidence_loop",
    "hippo_graph",
    "rrf_fusion+hippo",
    "confidence_loop+hippo",
    "vector_fact_filter",
)
#: The dataset formats ``bench.loaders.load_dataset`` reads (``bench.loaders.FORMATS``), besides ``"auto"``.
DATASET_FORMATS = ("hotpotqa", "musique", "hipporag", "hover")
#: The retrievers whose LM flow is one DSPy program at ``retriever.program`` (``hippo_graph``'s is its fact
#: filter, the LM step that runs per query; OpenIE runs at indexing time and is not compiled here).
OPTIMIZABLE = ("rrf_fusion", "confidence_loop", "hippo_graph")
#: ``mhop optimize --optimizer``: ``dspy.BootstrapFewShot``, ``dspy.MIPROv2`` and ``dspy.GEPA``.
OPTIMIZERS = ("bootstrap", "mipro", "gepa")
#: ``mhop optimize --metric``: the names of ``bench.optimize.METRICS``.
OPTIMIZE_METRICS = ("all_gold@21", "recall@5")

#: The passage index keeps the time and counts of its last sync in a collection named after it plus this suffix.
SYNC_LOG_SUFFIX = ".sync"
# Chroma's rule for a collection name: 3-512 characters from [a-zA-Z0-9._-], starting and ending with a letter or
# a digit, no two consecutive periods, not an IPv4 address.
_CHROMA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{1,510}[A-Za-z0-9]")
_CHROMA_NAME_RULE = ("Chroma collection names have 3-512 characters from [a-zA-Z0-9._-], start and end with a "
                     "letter or digit, contain no '..' and are not an IPv4 address")


def _chroma_accepts(name: str) -> bool:
    if not _CHROMA_NAME.fullmatch(name) or ".." in name:
        return False
    try:
        ipaddress.IPv4Address(name)
    except ValueError:
        return True
    return False


def collection_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a passage collection (a one-line message naming Chroma's rule), or None."""
    if not _chroma_accepts(name):
        return f"--collection {name!r}: {_CHROMA_NAME_RULE}"
    if not _chroma_accepts(name + SYNC_LOG_SUFFIX):
        limit = 512 - len(SYNC_LOG_SUFFIX)
        return (f"--collection {name[:40]!r}... has {len(name)} characters: at most {limit} here, since the sync log "
                f"beside it is named NAME{SYNC_LOG_SUFFIX} ({_CHROMA_NAME_RULE})")
    return None


def timeout_problem(value: Any) -> str | None:
    """Why ``value`` (``--chroma-timeout``, None for the default) is not a usable timeout, or None."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if math.isfinite(seconds) and seconds > 0:
        return None
    return f"--chroma-timeout must be a positive finite number of seconds, got {value}"


def parse_k_values(text: str) -> list[int]:
    """``"2,5,10,21"`` -> ``[2, 5, 10, 21]``.

    Raises:
        argparse.ArgumentTypeError: a value that is not an integer >= 1.
    """
    values = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"k values must be integers, got {part!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"k values must be >= 1, got {value}")
        values.append(value)
    if not values:
        raise argparse.ArgumentTypeError("give at least one k value")
    return values


def add_bench_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``mhop bench`` options to ``parser`` (a sub-command parser or a stand-alone one)."""
    parser.add_argument("--dataset", required=True, help="dataset folder or question file")
    parser.add_argument("--format", default="auto", choices=("auto", *DATASET_FORMATS),
                        help="dataset format (default: auto)")
    parser.add_argument("--retrievers", default=None,
                        help="comma-separated registered retrievers (default: all registered)")
    parser.add_argument("--k", default="2,5,10,21", type=parse_k_values, help="cut-offs (default: 2,5,10,21)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--out", default=None, help="write the result JSON here")
    parser.add_argument("--plot", default=None, help="write a PNG of recall@k and all_gold@k here")
    parser.add_argument("--lm", default="none",
                        help="'none' (LLM-free), 'local' (SmolLM2 via llama-cpp) or a DSPy model string")
    parser.add_argument("--answer", action="store_true",
                        help="also answer each question from each retriever's top passages with the LM (--lm) and "
                             "report exact match and token F1 against the gold answer and its aliases")
    parser.add_argument("--program", default=None,
                        help="a compiled program (JSON from mhop optimize) of the one retriever benchmarked")
    parser.add_argument("--wandb", default=None, metavar="PROJECT",
                        help="also log to this Weights & Biases project (needs wandb installed)")
    parser.add_argument("--chroma-path", default=None, help="persistent Chroma directory (default: WORK_DIR/chroma)")
    parser.add_argument("--work-dir", default=".mhop/bench", help="working directory (default: .mhop/bench)")
    parser.add_argument("--embed-model", default=None,
                        help="a local model directory or a sentence-transformers model already on disk "
                             "(default: the packaged all-MiniLM-L6-v2)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return parser


def add_optimize_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``mhop optimize`` options to ``parser``."""
    parser.add_argument("--dataset", required=True, help="dataset folder or question file")
    parser.add_argument("--retriever", required=True, choices=OPTIMIZABLE)
    parser.add_argument("--lm", required=True, help="'local' (SmolLM2 via llama-cpp) or a DSPy model string")
    parser.add_argument("--optimizer", default="bootstrap", choices=OPTIMIZERS)
    parser.add_argument("--metric", default="all_gold@21", choices=OPTIMIZE_METRICS)
    parser.add_argument("--train", type=int, default=20, help="questions to compile on (the rest measure it)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the train/dev split")
    parser.add_argument("--out", required=True, help="where the compiled program's JSON goes")
    parser.add_argument("--work-dir", default=".mhop/optimize", help="working directory (default: %(default)s)")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars")
    return parser
