"""Personalized PageRank scaling: ``PageRankGraph`` (exact and local push) against igraph (PRPACK) and networkx.

Synthetic graphs shaped like a HippoRAG 2 memory graph (passage nodes linked to the entities they mention,
entity-entity edges from facts between co-mentioned entities, a few synonym edges), of about 10k, 100k and 1M
undirected weighted edges, seeded. Every implementation answers the same queries (reset vectors on a handful of
entity and passage nodes, damping 0.5 as in HippoRAG 2). Per query time is the median over the queries after
one warm-up; the one-time builds (our transition matrix, the igraph and networkx graphs) are reported apart.
Local push of the whole reset (``push_pagerank`` of ``tests/graph/walk_reference.py``) is measured against our
exact power iteration twice: on those seeded resets, and on resets shaped like HippoRAG 2's (a little dense-score
mass on every passage), which are not local; in wall time and in CPU time (the process's own seconds, which a
loaded machine disturbs much less).

All three stop at the same accuracy: ours at an L1 change of 1e-10, networkx at ``N * tol = 1e-10`` (its
criterion is ``L1 change < N * tol``), PRPACK at its fixed 1e-10.

igraph's PRPACK runs OpenMP threads. On a shared machine their busy-waiting cost about 300 ms per call here
(even at 10k edges), which measures the machine, not the algorithm, so the script pins ``OMP_NUM_THREADS=1``
unless it is already set (the value used is recorded in the JSON): all three implementations then run on one
core, as ours and networkx do anyway.

Usage:
    python benchmarks/ppr_scaling.py [--sizes 10000 100000 1000000] [--queries 7]
        [--networkx-max-edges N] [--out benchmarks/results/ppr_scaling.json]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # before any OpenMP runtime loads; see the module docstring

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np
import scipy
from scipy import sparse

from llama_index_mhop.graph import PageRankGraph

sys.path.append(str(Path(__file__).resolve().parents[1]))  # the repository: tests/ holds the whole-reset push
from tests.graph.walk_reference import push_pagerank  # noqa: E402

DAMPING = 0.5
TOP_K = 20
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)
DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "ppr_scaling.json"


def synthetic_graph(target_edges: int, seed: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """A passage/entity graph with about ``target_edges`` distinct undirected weighted edges.

    Returns:
        ``(n_nodes, n_passages, edges (m, 2), weights (m,))``; passages are nodes ``[0, n_passages)``.
    """
    rng = np.random.default_rng(seed)
    n_passages = max(10, target_edges // 20)
    n_entities = max(20, target_edges // 4)
    per_passage = 8
    # Entity popularity follows a power law, as mentions in an encyclopedic corpus do.
    popularity = 1.0 / np.arange(1, n_entities + 1) ** 0.8
    popularity /= popularity.sum()
    mentions = rng.choice(n_entities, size=(n_passages, per_passage), p=popularity) + n_passages
    passages = np.repeat(np.arange(n_passages), per_passage)
    contains = np.column_stack([passages, mentions.ravel()])
    contains_w = np.ones(len(contains))
    # Facts: consecutive co-mentioned entities; repeated facts add weight (as repeated triples do).
    facts = np.column_stack([mentions[:, :-1].ravel(), mentions[:, 1:].ravel()])
    facts_w = np.ones(len(facts))
    n_synonyms = target_edges // 4
    synonyms = rng.integers(n_passages, n_passages + n_entities, size=(n_synonyms, 2))
    synonyms_w = rng.uniform(0.8, 1.0, size=n_synonyms)
    edges = np.concatenate([contains, facts, synonyms])
    weights = np.concatenate([contains_w, facts_w, synonyms_w])
    keep = edges[:, 0] != edges[:, 1]
    edges, weights = np.sort(edges[keep], axis=1), weights[keep]
    n_nodes = n_passages + n_entities
    merged = sparse.coo_matrix((weights, (edges[:, 0], edges[:, 1])), shape=(n_nodes, n_nodes)).tocsr()
    merged.sum_duplicates()
    merged = merged.tocoo()
    return n_nodes, n_passages, np.column_stack([merged.row, merged.col]), merged.data


def query_resets(n_nodes: int, n_passages: int, n_queries: int, seed: int) -> list[np.ndarray]:
    """Reset vectors: 5 entity seeds (fact scores) and 5 passage seeds (dense scores, down-weighted)."""
    rng = np.random.default_rng(seed)
    resets = []
    for _ in range(n_queries):
        reset = np.zeros(n_nodes)
        entities = rng.choice(np.arange(n_passages, n_nodes), size=5, replace=False)
        passages = rng.choice(n_passages, size=5, replace=False)
        reset[entities] = rng.uniform(0.5, 1.0, size=5)
        reset[passages] = 0.05 * rng.uniform(0.2, 0.8, size=5)
        resets.append(reset)
    return resets


def dense_resets(n_nodes: int, n_passages: int, n_queries: int, seed: int) -> list[np.ndarray]:
    """HippoRAG 2's reset shape: 0.05 x a min-max normalised dense score on every passage, 5 entity seeds."""
    rng = np.random.default_rng(seed)
    resets = []
    for _ in range(n_queries):
        reset = np.zeros(n_nodes)
        reset[:n_passages] = 0.05 * rng.random(n_passages)
        reset[rng.choice(np.arange(n_passages, n_nodes), size=5, replace=False)] = rng.uniform(0.5, 1.0, size=5)
        resets.append(reset)
    return resets


def push_against_exact(graph: PageRankGraph, resets: list[np.ndarray], exact: list[np.ndarray]) -> dict:
    """Local push (the graph's default epsilon) on the same resets: time, top-k agreement, L1 error and bound."""
    times, same, l1, bounds, cpu, exact_cpu = [], [], [], [], [], []
    for reset, reference in zip(resets, exact, strict=True):
        pushed, seconds = timed(push_pagerank, graph, reset)
        times.append(seconds)
        cpu.append(cpu_timed(push_pagerank, graph, reset)[1])
        exact_cpu.append(cpu_timed(graph.run, reset)[1])
        same.append(top_k(pushed.scores) == top_k(reference))
        l1.append(float(np.abs(pushed.scores - reference).sum()))
        bounds.append(pushed.l1_bound)
    return {"push_epsilon": graph.push_epsilon, "query_ms_median": 1e3 * statistics.median(times),
            "cpu_ms_median": 1e3 * statistics.median(cpu), "exact_cpu_ms_median": 1e3 * statistics.median(exact_cpu),
            f"top{TOP_K}_same_share": sum(same) / len(same), "l1_max": max(l1), "l1_bound_max": max(bounds)}


def timed(fn, *args, **kwargs):
    started = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - started


def cpu_timed(fn, *args, **kwargs):
    """Like :func:`timed`, in this process's CPU seconds (steadier than wall time on a loaded machine)."""
    started = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - started


def top_k(scores: np.ndarray, k: int = TOP_K) -> set[int]:
    return set(np.argsort(-np.asarray(scores), kind="stable")[:k].tolist())


def run_size(target: int, n_queries: int, seed: int, networkx_max_edges: int | None) -> dict:
    import igraph

    n_nodes, n_passages, edges, weights = synthetic_graph(target, seed)
    resets = query_resets(n_nodes, n_passages, n_queries + 1, seed + 1)  # the first is the warm-up
    n_edges = len(edges)
    result: dict = {"target_edges": target, "n_nodes": n_nodes, "n_edges": n_edges, "n_queries": n_queries}

    ours_graph, build = timed(PageRankGraph.from_edges, n_nodes, edges, weights, method="exact")
    ours_scores, ours_times = [], []
    for i, reset in enumerate(resets):
        scores, seconds = timed(ours_graph.run, reset)
        if i:
            ours_scores.append(scores)
            ours_times.append(seconds)
    result["ours"] = {"build_s": build, "query_ms_median": 1e3 * statistics.median(ours_times)}
    result["push"] = push_against_exact(ours_graph, resets[1:], ours_scores)
    dense = dense_resets(n_nodes, n_passages, n_queries, seed + 2)
    result["push_dense_reset"] = push_against_exact(ours_graph, dense, [ours_graph.run(r) for r in dense])
    result["push_dense_reset"]["exact_ms_median"] = 1e3 * statistics.median(
        timed(ours_graph.run, r)[1] for r in dense)

    def build_igraph():
        g = igraph.Graph(n=n_nodes, edges=edges, directed=False)
        g.es["weight"] = weights
        return g

    ig_graph, build = timed(build_igraph)
    ig_resets = [r.tolist() for r in resets]  # converted outside the timing, in igraph's favour
    ig_scores, ig_times = [], []
    for i, reset in enumerate(ig_resets):
        scores, seconds = timed(
            ig_graph.personalized_pagerank,
            directed=False,
            damping=DAMPING,
            reset=reset,
            weights="weight",
            implementation="prpack",
        )
        if i:
            ig_scores.append(np.asarray(scores))
            ig_times.append(seconds)
    result["igraph"] = {"build_s": build, "query_ms_median": 1e3 * statistics.median(ig_times)}
    del ig_graph

    nx_scores: list[np.ndarray] = []
    if networkx_max_edges is not None and n_edges > networkx_max_edges:
        result["networkx"] = {"skipped": f"{n_edges} edges > --networkx-max-edges {networkx_max_edges}"}
    else:

        def build_nx():
            g = nx.Graph()
            g.add_nodes_from(range(n_nodes))
            g.add_weighted_edges_from(
                zip(edges[:, 0].tolist(), edges[:, 1].tolist(), weights.tolist(), strict=True)
            )
            return g

        nx_graph, build = timed(build_nx)
        nx_times = []
        for i, reset in enumerate(resets):
            personalization = {int(j): float(reset[j]) for j in np.flatnonzero(reset)}
            scores, seconds = timed(
                nx.pagerank,
                nx_graph,
                alpha=DAMPING,
                personalization=personalization,
                weight="weight",
                tol=1e-10 / n_nodes,
                max_iter=1000,
            )
            if i:
                nx_scores.append(np.fromiter((scores[j] for j in range(n_nodes)), float, n_nodes))
                nx_times.append(seconds)
        result["networkx"] = {"build_s": build, "query_ms_median": 1e3 * statistics.median(nx_times)}
        del nx_graph

    ratios = {"ours_over_igraph": result["ours"]["query_ms_median"] / result["igraph"]["query_ms_median"],
              "push_over_exact": result["push"]["query_ms_median"] / result["ours"]["query_ms_median"],
              "push_over_exact_dense_reset": result["push_dense_reset"]["query_ms_median"]
              / result["push_dense_reset"]["exact_ms_median"]}
    overlap = {
        "ours_vs_igraph": [
            len(top_k(a) & top_k(b)) / TOP_K for a, b in zip(ours_scores, ig_scores, strict=True)
        ]
    }
    max_diff = {
        "ours_vs_igraph": max(float(np.abs(a - b).max()) for a, b in zip(ours_scores, ig_scores, strict=True))
    }
    if nx_scores:
        ratios["networkx_over_ours"] = (
            result["networkx"]["query_ms_median"] / result["ours"]["query_ms_median"]
        )
        overlap["ours_vs_networkx"] = [
            len(top_k(a) & top_k(b)) / TOP_K for a, b in zip(ours_scores, nx_scores, strict=True)
        ]
        overlap["igraph_vs_networkx"] = [
            len(top_k(a) & top_k(b)) / TOP_K for a, b in zip(ig_scores, nx_scores, strict=True)
        ]
        max_diff["ours_vs_networkx"] = max(
            float(np.abs(a - b).max()) for a, b in zip(ours_scores, nx_scores, strict=True)
        )
    result["ratios"] = ratios
    result["top20_overlap_min"] = {name: min(values) for name, values in overlap.items()}
    result["max_abs_diff"] = max_diff
    return result


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'edges':>9} {'nodes':>8} | {'ours ms':>8} {'build s':>7} | {'igraph ms':>9} | {'nx ms':>9} | "
        f"{'ours/ig':>7} {'nx/ours':>7} | top-20 overlap (min over queries)"
    )
    print(header)
    print("-" * len(header))
    for row in rows:
        nx_row = row["networkx"]
        nx_ms = "skipped" if "skipped" in nx_row else f"{nx_row['query_ms_median']:.1f}"
        nx_ratio = row["ratios"].get("networkx_over_ours")
        overlaps = ", ".join(f"{k} {v:.2f}" for k, v in row["top20_overlap_min"].items())
        print(
            f"{row['n_edges']:>9} {row['n_nodes']:>8} | {row['ours']['query_ms_median']:>8.2f} "
            f"{row['ours']['build_s']:>7.3f} | {row['igraph']['query_ms_median']:>9.2f} | {nx_ms:>9} | "
            f"{row['ratios']['ours_over_igraph']:>7.2f} {'-' if nx_ratio is None else f'{nx_ratio:.1f}':>7} | "
            f"{overlaps}"
        )
    for row in rows:
        for label, key in (("seeded", "push"), ("HippoRAG-shaped", "push_dense_reset")):
            push = row[key]
            print(f"push on {row['n_edges']} edges, {label} resets: {push['query_ms_median']:.1f} ms "
                  f"(x{row['ratios']['push_over_exact' + ('_dense_reset' if key != 'push' else '')]:.2f} of exact), "
                  f"CPU {push['cpu_ms_median']:.1f} against exact {push['exact_cpu_ms_median']:.1f} ms, "
                  f"same top-{TOP_K} {push[f'top{TOP_K}_same_share']:.2f}, L1 {push['l1_max']:.2g} "
                  f"<= bound {push['l1_bound_max']:.2g}")
    for row in rows:
        if "skipped" in row["networkx"]:
            print(f"networkx skipped at {row['n_edges']} edges: {row['networkx']['skipped']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=list(DEFAULT_SIZES), help="target edge counts"
    )
    parser.add_argument("--queries", type=int, default=7, help="timed queries per size (after one warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--networkx-max-edges",
        type=int,
        default=None,
        help="skip networkx on graphs with more edges than this (it is slow and memory-hungry at 1M edges)",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.queries < 1:
        parser.error("--queries must be >= 1")

    import igraph

    rows = []
    for target in args.sizes:
        print(f"running ~{target} edges ...", file=sys.stderr, flush=True)
        rows.append(run_size(target, args.queries, args.seed, args.networkx_max_edges))
    report = {
        "damping": DAMPING,
        "top_k": TOP_K,
        "tolerance": "L1 change 1e-10 (ours), N*tol = 1e-10 (networkx), PRPACK's fixed 1e-10 (igraph)",
        "targets": {"ours_over_igraph_max": 1.5, "networkx_over_ours_min": 10.0},
        "environment": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "scipy": scipy.__version__,
            "networkx": nx.__version__,
            "igraph": igraph.__version__,
            "cpu_count": os.cpu_count(),
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "load_average_1m": os.getloadavg()[0],
            "machine": platform.machine(),
        },
        "sizes": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print_table(rows)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
