"""``mhop bench``: run the benchmark from the command line, print its tables and draw its plot.

Its choices mirror the modules that own them (standard library only); tests/test_cli_start.py checks they agree."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DATASET_FORMATS", "OPTIMIZABLE", "OPTIMIZERS", "OPTIMIZE_METRICS", "RETRIEVER_NAMES", "SIGNIFICANCE_ALPHA",
           "add_bench_arguments", "add_optimize_arguments", "main", "parse_k_values", "plot", "run_bench"]

logger = logging.getLogger(__name__)

#: The registered retrievers (``bench.registry.registered_retrievers()``), in registration order.
RETRIEVER_NAMES = ("vector", "bm25", "query_fusion", "rrf_fusion", "confidence_loop", "hippo_graph", "rrf_fusion+hippo",
                   "confidence_loop+hippo", "vector_fact_filter")
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
    """``"2,5,10,21"`` -> ``[2, 5, 10, 21]``; argparse.ArgumentTypeError for a value that is not an integer >= 1."""
    values = []
    for part in [piece.strip() for piece in text.split(",") if piece.strip()]:
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


#: A difference whose paired p-value is below this is drawn as a filled marker, else a hollow one.
SIGNIFICANCE_ALPHA = 0.05
_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"), ((0, (5, 1)), "v"), ((0, (1, 1)), "P")]
_METRICS = (("recall", "recall@k (%)"), ("all_gold", "all gold in top k (%)"))


def _log_k_axis(ax: Any, ks: list[int]) -> None:
    ax.set_xscale("log")
    ax.set_xticks(ks)
    ax.set_xticklabels([str(k) for k in ks])
    ax.minorticks_off()
    ax.set_xlabel("k")
    ax.grid(True, alpha=0.3)


def _differences(ax: Any, result: Mapping[str, Any], metric: str, ks: list[int], colors: dict[str, str]) -> None:
    significance = result["significance"]
    compared = significance["runs"]
    for position, (name, comparisons) in enumerate(compared.items()):
        _, marker = _STYLES[position % len(_STYLES)]
        # Spread the runs a little along the (log) k axis so their intervals do not hide each other.
        shift = 1 + 0.035 * (position - (len(compared) - 1) / 2)
        for k in ks:
            cell = comparisons[f"{metric}@{k}"]
            filled = cell["p_value"] < SIGNIFICANCE_ALPHA
            ax.errorbar(k * shift, cell["difference"],
                        yerr=[[cell["difference"] - cell["ci_low"]], [cell["ci_high"] - cell["difference"]]],
                        fmt=marker, color=colors[name], markerfacecolor=colors[name] if filled else "white",
                        capsize=3, label=name if k == ks[0] else None)
    ax.axhline(0, color="black", linewidth=1)
    _log_k_axis(ax, ks)
    ax.set_title(f"{metric}@k minus {significance['baseline']} (points, 95% CI; filled: p < {SIGNIFICANCE_ALPHA})",
                 fontsize="small")


def plot(result: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """A PNG of recall@k and all_gold@k against k, one line per retriever (with ``significance``, a second row of
    differences to the baseline); returns the path."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        from .registry import BENCH_EXTRA
        raise ImportError(BENCH_EXTRA.format(what="--plot")) from exc
    from .benchmarker import validate_result
    validate_result(result)
    ks = list(result["k_values"])
    with_differences = bool(result.get("significance", {}).get("runs"))
    rows = 2 if with_differences else 1
    figure = Figure(figsize=(11, 4.2 * rows), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, 2, squeeze=False)
    colors: dict[str, str] = {}
    for column, (metric, label) in enumerate(_METRICS):
        ax = axes[0][column]
        for position, run in enumerate(result["runs"]):
            # Distinct dash and marker per run: two runs with equal scores stay visible on top of each other.
            linestyle, marker = _STYLES[position % len(_STYLES)]
            (line,) = ax.plot(ks, [run["metrics"][f"{metric}@{k}"] for k in ks], linestyle=linestyle,
                              marker=marker, markersize=7 - 1.5 * (position % 3),
                              linewidth=2.2 - 0.4 * (position % 3), label=run["name"])
            colors[run["name"]] = line.get_color()
        _log_k_axis(ax, ks)
        ax.set_title(label)
        ax.set_ylim(0, 100)
        if with_differences:
            _differences(axes[1][column], result, metric, ks, colors)
    axes[0][0].legend(loc="lower right", fontsize="small")
    if with_differences:
        axes[1][0].legend(loc="best", fontsize="x-small")
    figure.suptitle(f"{result['dataset']}: {result['n_questions']} questions, {result['n_passages']} passages")
    figure.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png")
    return out


def _print_table(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    ks = result["k_values"]
    table = Table(title=f"{result['dataset']}: {result['n_questions']} questions, {result['n_passages']} passages")
    table.add_column("retriever", style="bold")
    answered = any("answer" in run for run in result["runs"])
    answer_headers = ("EM", "ans F1", "ans fb") if answered else ()
    for header in (*(f"R@{k}" for k in ks), *(f"all@{k}" for k in ks), *answer_headers, "index s", "p50 ms", "p95 ms",
                   "RSS MB"):
        table.add_column(header, justify="right")
    for run in result["runs"]:
        metrics = run["metrics"]
        table.add_row(run["name"], *(f"{metrics[f'recall@{k}']:.1f}" for k in ks),
                      *(f"{metrics[f'all_gold@{k}']:.1f}" for k in ks),
                      *(_answer_cells(run.get("answer")) if answered else ()), f"{run['index_seconds']:.1f}",
                      f"{run['latency_ms_p50']:.1f}", f"{run['latency_ms_p95']:.1f}", f"{run['peak_rss_mb']:.0f}")
    console = Console()
    if not console.is_terminal:  # a pipe or a log file: do not squeeze the columns to 80 characters
        console = Console(width=max(console.width, 220))
    console.print(table)
    significance = result.get("significance") or {}
    if significance.get("runs"):
        console.print(_significance_table(significance, ks))


def _answer_cells(answer: dict[str, Any] | None) -> tuple[str, str, str]:
    """Exact match, token F1 (percent) and the answers that fell back, of one run ("-" when it has none)."""
    if answer is None:
        return "-", "-", "-"
    return f"{answer['exact_match']:.1f}", f"{answer['f1']:.1f}", f"{answer['n_fallbacks']}/{answer['n_questions']}"


def _significance_table(significance: dict[str, Any], ks: list[int]) -> Any:
    """Each run minus the baseline per metric and k: mean difference, 95% interval and paired p-value."""
    from rich.table import Table
    table = Table(title=f"against {significance['baseline']}: difference in points [95% CI], paired permutation p")
    table.add_column("retriever", style="bold")
    keys = [f"{metric}@{k}" for metric in ("recall", "all_gold") for k in ks]
    for key in keys:
        table.add_column(key.replace("recall@", "R@").replace("all_gold@", "all@"), justify="right")
    for name, comparisons in significance["runs"].items():
        cells = (comparisons[key] for key in keys)
        table.add_row(name, *(f"{c['difference']:+.1f} [{c['ci_low']:+.1f}, {c['ci_high']:+.1f}] p={c['p_value']:.2f}"
                              for c in cells))
    return table


def _log_wandb(project: str, result: dict[str, Any]) -> None:
    try:
        import wandb
    except ImportError:
        logger.warning("--wandb %s given but wandb is not installed; skipping Weights & Biases logging", project)
        return
    ks = result["k_values"]
    columns = ["retriever", "index_seconds", "latency_ms_p50", "latency_ms_p95", "peak_rss_mb",
               *(f"{m}@{k}" for k in ks for m in ("recall", "all_gold", "precision", "f1"))]
    rows = [[run["name"], run["index_seconds"], run["latency_ms_p50"], run["latency_ms_p95"], run["peak_rss_mb"],
             *(run["metrics"][c] for c in columns[5:])] for run in result["runs"]]
    session = wandb.init(project=project, job_type="benchmark", config={
        k: result[k] for k in ("dataset", "n_questions", "n_passages", "k_values", "embed_model", "lm") if k in result
    })
    try:
        for run in result["runs"]:
            session.log({f"{run['name']}/{key}": value for key, value in run["metrics"].items()})
        session.log({"summary": wandb.Table(columns=columns, data=rows)})
    finally:
        session.finish()


def run_bench(args: argparse.Namespace) -> int:
    """Run ``mhop bench`` with parsed arguments; returns the process exit code (0 ok, 2 bad input)."""
    from ..lm.clients import lm_from_spec
    from ..lm.steps import current_lm
    from ..stores.defaults import default_chroma_client, load_embed_model
    from .benchmarker import Benchmarker, save_json
    from .loaders import DatasetFormatError, load_dataset
    with contextlib.suppress(ImportError):  # bm25s sets its own logger to DEBUG when imported: import, then quiet it
        import bm25s  # noqa: F401
    logging.getLogger("bm25s").setLevel(logging.WARNING)
    try:
        dataset = load_dataset(args.dataset, format=args.format, limit=args.limit)
    except (DatasetFormatError, ValueError) as exc:
        print(f"mhop bench: {exc}", file=sys.stderr)
        return 2
    retrievers = [name.strip() for name in args.retrievers.split(",") if name.strip()] if args.retrievers else None
    chroma_client = default_chroma_client(args.chroma_path) if args.chroma_path else None
    try:
        lm = lm_from_spec(args.lm)
        answer = args.answer and current_lm(lm) is not None
        if args.answer and not answer:
            print("mhop bench --answer: no LM (give --lm local or a DSPy model string); answers are not evaluated")
        benchmarker = Benchmarker(dataset, retrievers, k_values=args.k, chroma_client=chroma_client,
                                  embed_model=load_embed_model(args.embed_model), work_dir=args.work_dir,
                                  lm=lm, show_progress=not args.quiet, program=args.program, answer=answer)
    except (ValueError, FileNotFoundError) as exc:
        print(f"mhop bench: {exc}", file=sys.stderr)
        return 2
    result = benchmarker.run()
    result["command"] = "mhop bench " + shlex.join(_argv_of(args))
    _print_table(result)
    if args.out:
        print(f"wrote {save_json(result, args.out)}")
    if args.plot:
        print(f"wrote {plot(result, args.plot)}")
    if args.wandb:
        _log_wandb(args.wandb, result)
    return 0


def _argv_of(args: argparse.Namespace) -> list[str]:
    """The options as given, rebuilt from the namespace (for the result file's ``command``)."""
    given = [("--dataset", args.dataset), ("--format", None if args.format == "auto" else args.format),
             ("--retrievers", args.retrievers or None), ("--k", ",".join(str(k) for k in args.k)),
             ("--limit", args.limit), ("--out", args.out), ("--plot", args.plot), ("--wandb", args.wandb),
             ("--chroma-path", args.chroma_path), ("--lm", None if args.lm == "none" else args.lm)]
    out = [part for option, value in given if value is not None for part in (option, str(value))]
    if args.answer:
        out.append("--answer")
    if args.work_dir != ".mhop/bench":
        out += ["--work-dir", str(args.work_dir)]
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: ``python -m llama_index_mhop.bench.cli --dataset ...``."""
    parser = add_bench_arguments(argparse.ArgumentParser(prog="mhop bench", description=__doc__.splitlines()[0]))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return run_bench(args)


if __name__ == "__main__":
    sys.exit(main())
