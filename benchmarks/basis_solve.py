"""The time and memory of solving the walk's basis (``graph/walk/affine_ppr.py``) for a persisted graph, on one
thread and on every core.

The basis is what the first process to load a graph version solves (then saved for the others,
``graph/walk/basis_files.py``), so on a large graph it is what each change costs its first query. This script
opens the query snapshot of a ``benchmarks/graph_probe.py`` build (``<work-dir>/graph/state_files/snapshot-*``,
filed by the first reader of its save) and solves the basis once per ``--threads`` value, each in a fresh process
(its peak resident set is then its own), checking that every thread count gives the same floats.

Usage:
    python benchmarks/basis_solve.py --work-dir /work/runs/probe-300k --threads 1 2 \\
        --out benchmarks/results/basis-solve-300000.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

from result_file import CHECKOUT, measured_on, write_result


def solve(work: Path, threads: int) -> dict[str, object]:
    """Solve the basis of the build's snapshot on ``threads`` threads: seconds, iterations, peak RSS, a digest."""
    from llama_index_mhop.graph.state_load import open_snapshot
    from llama_index_mhop.graph.walk import affine as affine_ppr
    from llama_index_mhop.graph.walk.exact import PageRankGraph

    state_folder = work / "graph" / "state_files"
    snapshots = sorted(state_folder.glob("snapshot-*"))
    if len(snapshots) != 1:
        raise SystemExit(f"{state_folder}: expected one query snapshot, found {len(snapshots)}")
    snapshot = open_snapshot(state_folder, snapshots[0].name.removeprefix("snapshot-"))
    if snapshot is None:
        raise SystemExit(f"{snapshots[0]}: not a usable snapshot")
    pagerank = PageRankGraph(snapshot.walk, version=snapshot.version)
    passages = len(snapshot.columns.passage_ids)
    affine_ppr._solver_threads = lambda: threads
    solved = affine_ppr.solve_basis(pagerank, passages, snapshot.passage_matrix)
    digest = hashlib.sha256()
    for array in (solved.basis, solved.uniform_response, solved.node_totals):
        digest.update(array.tobytes())
    return {"threads": threads, "seconds": round(solved.seconds, 1), "iterations": solved.iterations,
            "passages": passages, "nodes": pagerank.n_nodes, "stored_edges": int(pagerank.transition.nnz),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "digest": digest.hexdigest()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a graph_probe.py build folder")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, len(os.sched_getaffinity(0))])
    parser.add_argument("--solve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.solve is not None:
        print(json.dumps(solve(args.work_dir, args.solve)))
        return 0
    load = [os.getloadavg()]
    runs = []
    for threads in args.threads:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--work-dir", str(args.work_dir),
                               "--solve", str(threads)], cwd=CHECKOUT, check=True, stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(runs[-1], flush=True)
    load.append(os.getloadavg())
    first = runs[0]
    write_result({"work_dir": str(args.work_dir), **measured_on(load, "numpy", "scipy"),
                  "same_floats": all(run["digest"] == first["digest"] for run in runs),
                  "speedup": {run["threads"]: round(first["seconds"] / run["seconds"], 2) for run in runs},
                  "runs": runs}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
