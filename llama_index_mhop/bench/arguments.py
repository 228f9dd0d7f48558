"""The ``mhop bench`` and ``mhop optimize`` arguments and their choices, in the standard library alone (``mhop
--help`` imports this and nothing heavy). The choices mirror the modules that own them (the retriever registry, the
dataset loaders, ``bench.optimize``); ``tests/test_cli_start.py`` checks that they agree."""

from __future__ import annotations

import argparse

__all__ = [
    "DATASET_FORMATS",
    "OPTIMIZABLE",
    "OPTIMIZERS",
    "OPTIMIZE_METRICS",
    "RETRIEVER_NAMES",
    "add_bench_arguments",
    "add_optimize_arguments",
    "parse_k_values",
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
