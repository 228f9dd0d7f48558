"""Whole-process wall time of the ``mhop`` commands a user runs in a loop, on the shipped demo corpus.

The demo corpus is indexed once (``mhop index --graph``) into a temporary folder; then each command runs ``--runs``
times after one warm-up run, each a fresh process, and the minimum, median and maximum wall seconds are written,
beside a bare ``python -c pass`` measured in the same run (the interpreter's own start, the floor of any command).

Usage:
    python benchmarks/cli_start.py [--runs 5] [--out benchmarks/results/cli-start.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO_CORPUS = ROOT / "llama_index_mhop" / "data" / "demo_corpus.json"
QUESTION = "In which river valley was the composer of the Gull Island Overture born?"
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "cli-start.json"


def _timed(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(command, cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)})
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    args = parser.parse_args()
    mhop = [sys.executable, "-m", "llama_index_mhop.cli.commands"]
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mhop --help": [*mhop, "--help"],
        "mhop status": [*mhop, "status"],
        "mhop query --retriever hippo_graph": [*mhop, "query", QUESTION, "--retriever", "hippo_graph"],
        "mhop query --retriever vector": [*mhop, "query", QUESTION, "--retriever", "vector"],
        "mhop index --graph (nothing changed)": [*mhop, "index", str(DEMO_CORPUS), "--graph", "-q"],
    }
    with tempfile.TemporaryDirectory() as work:
        cwd = Path(work)
        _timed([*mhop, "index", str(DEMO_CORPUS), "--graph", "-q"], cwd)
        results = {}
        for name, command in commands.items():
            _timed(command, cwd)  # warm-up: the page cache holds the libraries, as on a user's second run
            seconds = [_timed(command, cwd) for _ in range(args.runs)]
            results[name] = {"min": round(min(seconds), 3), "median": round(statistics.median(seconds), 3),
                             "max": round(max(seconds), 3)}
            print(f"{name:40s} median {results[name]['median']:.2f} s  (min {results[name]['min']:.2f}, "
                  f"max {results[name]['max']:.2f})")
    floor = results["python -c pass"]["median"]
    for timing in results.values():
        timing["median_over_python"] = round(timing["median"] / floor, 1)
    report = {"benchmark": "cli_start", "runs": args.runs, "corpus": DEMO_CORPUS.name, "question": QUESTION,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "wall_seconds": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
