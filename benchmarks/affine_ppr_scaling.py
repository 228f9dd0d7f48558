"""HippoRAG 2's walk by graph size: the whole reset walked per query against its dense share solved once.

``graph/walk/affine.py`` solves the PageRank of the reset's dense share (a min-max normalised similarity on every
passage) once per graph version, so that a query walks from its few seeds only. This script measures, on the
HippoRAG-shaped synthetic graphs of ``benchmarks/ppr_scaling.py`` (seeded) with random unit passage vectors of
``--dims`` dimensions:

* the one-time cost: seconds, iterations and memory of the solve, and the process's peak RSS;
* per query (median over ``--queries``): the exact power iteration of the whole reset, a local push of the whole
  reset (the graph's default epsilon), and the solved share plus a push from the seeds, asked for its top 21
  (without passage vectors that push stops once its bounds make the top 21 certain);
* agreement with the exact iteration: the same top 21 passages, and the L1 error against its bound;
* with ``--coarser-push``: the solved walk again with the seeds' push stopped at multiples of its epsilon (time
  and top 21 only), to see how far a stopping rule tied to the ranking could cut the push;
* with ``--basis-folder``: the basis saved there (``graph/walk/basis_files.py``) and opened a second time, as the next
  query worker would, its seconds against the solve's, and whether its walks give the same floats.

The queries' resets are HippoRAG 2's: five entity seeds, and ``0.05`` times the min-max normalised similarity of
a random unit query on every passage. From ``--hnsw-min-passages`` passages the package searches passages
through Chroma's HNSW index and holds no passage vectors: there the 256 nearest passages keep their similarity,
the others share the mean, and only the uniform column is solved.

Usage:
    python benchmarks/affine_ppr_scaling.py [--passages 100000 300000 1000000] [--queries 5] [--basis-folder DIR]
        [--out benchmarks/results/affine_ppr_scaling.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ppr_scaling import push_pagerank, synthetic_graph, timed  # noqa: E402  (a sibling script, not a package)

from llama_index_mhop.graph.walk import PageRankGraph, SparseVector, WalkSettings  # noqa: E402
from llama_index_mhop.graph.walk.basis_files import solved_walk  # noqa: E402

WEIGHT = 0.05  # HippoRAG 2's passage_node_weight
TOP = 21
TOP_N = WalkSettings.hnsw_top_n
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "affine_ppr_scaling.json"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _top(scores: np.ndarray) -> set[int]:
    best = np.argpartition(-scores, TOP - 1)[:TOP]
    return set(best.tolist())


def query_parts(rng, graph, n_passages, vectors, hnsw: bool):
    """One query: (seeds, uniform, scale, query or None, the whole reset)."""
    n = graph.n_nodes
    seeds = np.zeros(n)
    seeds[rng.choice(np.arange(n_passages, n), size=5, replace=False)] = rng.uniform(0.1, 1.0, size=5)
    q = rng.normal(size=vectors.shape[1]).astype(np.float32)
    q /= np.linalg.norm(q)
    similarity = np.vecdot(vectors, q).astype(np.float64)
    if hnsw:  # the nearest keep their similarity, the rest share their mean (DenseVectors, graph/state.py)
        near = np.argpartition(-similarity, TOP_N - 1)[:TOP_N]
        rest = (similarity.sum() - similarity[near].sum()) / (n_passages - TOP_N)
        folded = np.full(n_passages, rest)
        folded[near] = similarity[near]
        similarity = folded
    low, high = similarity.min(), similarity.max()
    scale = WEIGHT / (high - low)
    reset = seeds.copy()
    reset[:n_passages] += scale * (similarity - low)
    if hnsw:
        seeds = seeds.copy()
        seeds[near] += scale * (similarity[near] - rest)
        return seeds, scale * (rest - low), 0.0, None, reset
    return seeds, -scale * low, scale, q, reset


def run_size(n_passages: int, dims: int, queries: int, seed: int, hnsw_min_passages: int,
             basis_folder: Path | None = None, coarser: tuple[float, ...] = ()) -> dict:
    n_nodes, n_p, edges, weights = synthetic_graph(20 * n_passages, seed)
    started = time.perf_counter()
    graph = PageRankGraph.from_edges(n_nodes, edges, weights, method="push")
    push_pagerank(graph, np.ones(n_nodes))  # builds the walk matrix push reads, once per graph version
    graph_seconds = time.perf_counter() - started
    rng = np.random.default_rng(seed + 1)
    vectors = rng.normal(size=(n_p, dims)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    hnsw = n_p >= hnsw_min_passages
    started = time.perf_counter()
    undirected = graph.symmetric  # found once per graph version, before a push may stop at a certain top 21
    symmetric_seconds = time.perf_counter() - started
    started = time.perf_counter()
    affine = solved_walk(graph, n_p, None if hnsw else vectors, basis_folder)
    first_open = time.perf_counter() - started
    saved = {}
    if basis_folder is not None:  # a second worker: the basis the first one saved, read instead of solved
        started = time.perf_counter()
        reread = solved_walk(graph, n_p, None if hnsw else vectors, basis_folder)
        saved = {"basis_solve_and_save_seconds": round(first_open, 2),
                 "basis_saved_open_seconds": round(time.perf_counter() - started, 2)}
    exact_ms, push_ms, affine_ms, same, push_same, l1, bounds = [], [], [], [], [], [], []
    graph_epsilon = graph.push_epsilon
    by_epsilon: dict[float, dict[str, list]] = {factor: {"ms": [], "same": []} for factor in coarser}
    for i in range(queries + 1):
        seeds, uniform, scale, q, reset = query_parts(rng, graph, n_p, vectors, hnsw)
        exact, seconds_exact = timed(graph.run, reset)
        pushed, seconds_push = timed(push_pagerank, graph, reset)
        solved, seconds_affine = timed(affine.run, SparseVector.from_dense(seeds), uniform, scale, q, TOP)
        if saved:
            saved.setdefault("saved_basis_same_floats", True)
            saved["saved_basis_same_floats"] &= bool(np.array_equal(
                reread.run(SparseVector.from_dense(seeds), uniform, scale, q).passages, solved.passages))
        for factor, found in by_epsilon.items():  # the seeds' push stopped earlier: time and top 21 only
            graph.push_epsilon = graph_epsilon * factor
            coarse, seconds_coarse = timed(affine.run, SparseVector.from_dense(seeds), uniform, scale, q, TOP)
            graph.push_epsilon = graph_epsilon
            if i:
                found["ms"].append(1e3 * seconds_coarse)
                found["same"].append(_top(exact[:n_p]) == _top(coarse.passages))
        if i == 0:
            continue  # warm-up
        exact_ms.append(1e3 * seconds_exact)
        push_ms.append(1e3 * seconds_push)
        affine_ms.append(1e3 * seconds_affine)
        same.append(_top(exact[:n_p]) == _top(solved.passages))
        push_same.append(_top(exact[:n_p]) == _top(pushed.scores[:n_p]))
        l1.append(float(np.abs(exact[:n_p] - solved.passages).sum()))
        bounds.append(solved.l1_bound)
    return {
        "passages": n_p, "nodes": n_nodes, "stored_edges": graph.n_edges, "dims": 0 if hnsw else dims,
        "passages_by": "hnsw (uniform column only)" if hnsw else "exact (basis of every dimension)",
        "graph_seconds": round(graph_seconds, 2), "undirected": undirected,
        "undirected_check_seconds": round(symmetric_seconds, 2),
        "basis_seconds": round(affine.build_seconds, 2), "basis_iterations": affine.iterations,
        "basis_mb": round(affine.nbytes / 2**20, 1), "peak_rss_mb": round(_peak_rss_mb(), 1),
        "exact_ms_median": round(statistics.median(exact_ms), 2),
        "push_whole_reset_ms_median": round(statistics.median(push_ms), 2),
        "affine_ms_median": round(statistics.median(affine_ms), 2),
        f"affine_top{TOP}_same_as_exact": sum(same) / len(same),
        f"push_whole_reset_top{TOP}_same_as_exact": sum(push_same) / len(push_same),
        "affine_l1_max": max(l1), "affine_l1_bound_max": max(bounds), **saved,
        **({"coarser_push": [{"epsilon_factor": factor, "affine_ms_median": round(statistics.median(found["ms"]), 2),
                              f"affine_top{TOP}_same_as_exact": sum(found["same"]) / len(found["same"])}
                             for factor, found in by_epsilon.items()]} if coarser else {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--dims", type=int, default=384, help="passage vector dimensions (MiniLM: 384)")
    parser.add_argument("--queries", type=int, default=5, help="timed queries per size (after one warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hnsw-min-passages", type=int, default=WalkSettings.hnsw_min_passages)
    parser.add_argument("--basis-folder", type=Path,
                        help="save each size's basis here and open it a second time, as a second worker would")
    parser.add_argument("--coarser-push", type=float, nargs="*", default=[],
                        help="also walk with the seeds' push stopped at these multiples of its epsilon")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    rows = []
    for n_passages in args.passages:
        row = run_size(n_passages, args.dims, args.queries, args.seed, args.hnsw_min_passages,
                       None if args.basis_folder is None else args.basis_folder / str(n_passages),
                       tuple(args.coarser_push))
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": {"python": platform.python_version(), "numpy": np.__version__},
        "sizes": rows,
    }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
