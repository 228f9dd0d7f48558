"""The PNG of a benchmark result: recall@k and all_gold@k curves, and each run's paired difference to the baseline.

Uses matplotlib's Agg canvas directly, so it needs no display and leaves pyplot's backend alone.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .benchmarker import validate_result

__all__ = ["SIGNIFICANCE_ALPHA", "plot"]

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
    """A PNG of recall@k and all_gold@k against k, one line per retriever; returns the path.

    When the result holds a paired comparison with a baseline (``significance``), a second row shows each
    run's mean difference to the baseline at every k with its confidence interval, filled where p < 0.05.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        from .registry import BENCH_EXTRA

        raise ImportError(BENCH_EXTRA.format(what="--plot")) from exc

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
