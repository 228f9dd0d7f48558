"""Query latency of ``hippo_graph`` against ``vector`` on one index, in one process, questions interleaved.

``benchmarks/scale.py`` measures each retriever in its own process, after its own build. This script reopens a
size that ``scale.py`` has built (its shared vector collection and the graph index's three collections, which
stay in the size's Chroma folder after the run) and measures the two retrievers side by side: every question is
asked of ``vector`` and then of ``hippo_graph``, for ``--rounds`` rounds, so both see the same machine load.
The graph is rebuilt from its stored collections (every entity, fact and passage vector is already there, so
nothing is embedded again; the time this takes is reported but is not a build time).

It also splits ``hippo_graph``'s query into its steps (query embedding, dense and fact scoring, the fact filter,
the walk) by timing the retriever's own methods, and reports recall at each k for both retrievers.

Usage:
    python benchmarks/query_latency.py --work-dir .mhop/scale/n100000 [--rounds 3] [--threads 1]
        [--out benchmarks/results/query-latency-100000.json] [--walk-vs-exact]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from result_file import measured_on, write_result

K_VALUES = (2, 5, 10, 21)


def _timed_method(owner: Any, name: str, into: list[float]) -> None:
    """Replace ``owner.name`` by an instance attribute that records each call's milliseconds in ``into``."""
    method = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            into.append((time.perf_counter() - start) * 1000.0)

    object.__setattr__(owner, name, timed)


def _timed_flow(owner: Any, name: str, into: list[float]) -> None:
    """:func:`_timed_method` for a step written as a flow (a generator method): each run is timed from its start
    to its return, the requests it yields (its LM step) included."""
    method = getattr(owner, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return (yield from method(*args, **kwargs))
        finally:
            into.append((time.perf_counter() - start) * 1000.0)

    object.__setattr__(owner, name, timed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a size's folder under scale.py's work dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--walk-vs-exact", action="store_true",
                        help="after the rounds, compare the walk with the exact power iteration (scale.py's check)")
    args = parser.parse_args(argv)

    import torch

    from llama_index_mhop.bench.benchmarker import passage_ids
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.graph import HippoGraphIndex
    from llama_index_mhop.stores.defaults import default_chroma_client, default_embed_model
    from llama_index_mhop.stores.vector_index import load_vector_index

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    collection = json.loads((args.work_dir / "index.json").read_text())["collection_name"]
    dataset = load_dataset(args.work_dir / "data")
    embed = default_embed_model()
    client = default_chroma_client(args.work_dir / "chroma")
    vector_index = load_vector_index(collection, chroma_client=client, embed_model=embed)
    start = time.perf_counter()
    graph_index = HippoGraphIndex.from_vector_index(
        vector_index, embed_model=embed, chroma_client=client, name=collection.replace("mhop_bench_", "mhop_hippo_"),
        show_progress=False,
    )
    reopen_seconds = time.perf_counter() - start
    retrievers = {"vector": vector_index.as_retriever(similarity_top_k=max(K_VALUES)),
                  "hippo_graph": graph_index.as_retriever(similarity_top_k=max(K_VALUES))}
    hippo = retrievers["hippo_graph"]
    start = time.perf_counter()
    state = graph_index.retrieval_state(damping=hippo.config.damping)
    state_seconds = time.perf_counter() - start
    affine = state.walk.affine
    int8_copies = [state.passage_vectors.products, state.fact_vectors.products]
    if affine is not None:
        int8_copies.append(affine.basis_products)
    for retriever in retrievers.values():  # warm-up: first calls load models and caches
        for question in dataset.questions[:2]:
            retriever.retrieve(question.text)

    steps: dict[str, list[float]] = defaultdict(list)
    _timed_method(embed, "get_query_embedding", steps["query embedding"])
    _timed_method(state.passage_vectors, "search", steps["passage similarities"])
    _timed_method(state.fact_vectors, "search", steps["fact similarities"])
    _timed_flow(hippo.program, "_recognition", steps["fact filter"])
    _timed_method(state.walk, "rank", steps["walk"])
    latency: dict[str, list[float]] = {name: [] for name in retrievers}
    recall: dict[str, dict[int, list[float]]] = {name: {k: [] for k in K_VALUES} for name in retrievers}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for question in dataset.questions:
            for name, retriever in retrievers.items():
                start = time.perf_counter()
                nodes = retriever.retrieve(question.text)
                latency[name].append((time.perf_counter() - start) * 1000.0)
                ids, gold = passage_ids(nodes), set(question.gold_ids)
                for k in K_VALUES:
                    recall[name][k].append(100.0 * len(gold & set(ids[:k])) / max(1, len(gold)))
    load.append(os.getloadavg())
    p50 = {name: statistics.median(values) for name, values in latency.items()}
    result = {
        "work_dir": str(args.work_dir), "questions": len(dataset.questions), "rounds": args.rounds,
        "threads": args.threads, "n_passages": len(state.passage_ids), "n_facts": len(state.fact_ids),
        "n_nodes": state.num_nodes, "walk": "exact" if affine is None else "affine",
        "graph_reopen_seconds": round(reopen_seconds, 1), "state_load_seconds": round(state_seconds, 1),
        "affine_basis_seconds": None if affine is None else round(affine.build_seconds, 1),
        "row_products": {"passages": getattr(state.passage_vectors.products, "method", "hnsw"),
                         "facts": getattr(state.fact_vectors.products, "method", "hnsw"),
                         "walk_basis": None if affine is None else affine.basis_products.method},
        "int8_copies_mb": round(sum(getattr(p, "nbytes", 0) for p in int8_copies) / 2**20, 1),
        "latency_ms": {name: {"p50": round(p50[name], 2), "p95": round(float(np.percentile(values, 95)), 2)}
                       for name, values in latency.items()},
        "p50_ratio_hippo_graph_to_vector": round(p50["hippo_graph"] / p50["vector"], 3),
        "hippo_graph_steps_ms_p50": {name: round(statistics.median(v), 2) for name, v in steps.items() if v},
        "recall": {name: {f"recall@{k}": round(statistics.mean(v), 2) for k, v in per_k.items()}
                   for name, per_k in recall.items()},
        **measured_on(load),
    }
    if args.walk_vs_exact:
        from scale import _walk_vs_exact  # the sibling script's check, on this reopened index

        result["walk_vs_exact"] = _walk_vs_exact(hippo, dataset.questions, list(K_VALUES))
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
