"""The graph's own cost once the embedder is cheap: memory of its build and its query state, and its query time
against ``vector`` measured in the same run.

A hashed bag-of-words embedder (:mod:`hashed_embedding`, 384 dimensions, no model weights) takes the model out of
the picture, so what is left is the vector index (LlamaIndex's ``VectorStoreIndex`` over an embedded Chroma
store, as ``mhop bench`` builds it) and the graph beside it (``HippoGraphIndex.from_vector_index``, LLM-free).
The synthetic multi-hop corpus of :mod:`llama_index_mhop.bench.synthetic` is generated once into the work folder.

Each step runs in its own subprocess, so a process's memory is that step's alone:

1. ``build``: the vector index into a fresh Chroma store, then the graph beside it, persisted. The resident set
   (``VmRSS``) and its high-water mark (``ru_maxrss``) after each; the graph's growth per passage is
   (RSS after the graph's build - RSS after the vector index's) / passages. With ``--chroma-server`` the store
   is a ``chroma run`` server's, as in a deployment, and its memory is recorded after each step too: the
   collections' HNSW indexes then grow that process, not the build's.
2. ``query``: the store and the persisted graph opened; the memory after the graph's query state is loaded;
   then every question asked of ``vector`` and ``hippo_graph`` (k = 21, no LM), interleaved per question, for
   ``--rounds`` rounds: p50/p95 latency, and the graph's steps timed where its retriever calls them (fact scoring
   ``_candidates``, fact filter, walk ``_rank``; ``benchmarks/flow_steps.py``'s clock). Each question's top 21
   of both retrievers is written to ``--rankings`` (default: the work folder), so that two versions of the code
   can be compared passage for passage.
3. ``chroma``: Chroma alone, for scale: as many random unit vectors as the graph has entities and facts inserted
   into two collections of a scratch store, and the process's growth (what holding them costs any process that
   writes or reads those collections, whatever the graph does).

``--reuse-build`` queries the store and graph an earlier run built (its build figures read back from the work
folder): Chroma's HNSW indexes, and the synonymy edges found through the entities' one, differ from build to build,
so two versions of the query code are compared on one build. ``--compare FILE`` counts the questions whose top 21
is the same as in another run's rankings file, in order and as a set. ``--walk-from-nodes N`` sets the node count
from which the walk runs on its solved dense share (the index setting ``push_min_nodes``) in the query
process, to measure that walk at this size; ``--hnsw-min-records N`` the number of records from which facts and
passages are searched through Chroma's HNSW indexes (``hnsw_min_facts``, ``hnsw_min_passages``), to run the paths
of a million passages on a smaller build and compare them with exact search (``--compare``), and
``--hnsw-top-n`` how many of the nearest records those searches score exactly (``HNSW_TOP_N``).
``--step graph --work-dir W`` builds the graph alone beside the vector index an earlier ``--chroma-server`` build
left in ``W`` (its figures as the build step's, the vector index opened instead of built).
``--chroma-port PORT`` has the query step read the store through a ``chroma run`` server already listening there
(on the work folder's store) instead of opening it embedded: two query steps then share one copy of Chroma's
indexes, as a deployment's workers do.

With ``--tracemalloc`` both processes also record Python's traced heap per step and its largest allocation
sites (tracing slows the build and adds its own memory, so the default run leaves it off).

Usage:
    python benchmarks/graph_probe.py [--passages 20000] [--questions 50] [--seed 0] [--rounds 3] \\
        [--work-dir /work/runs/graph-probe] [--tracemalloc] [--rankings FILE] [--reuse-build] \\
        [--compare FILE] [--walk-from-nodes N] [--hnsw-min-records N] [--hnsw-top-n N] [--chroma-server] \\
        [--chroma-port PORT] \\
        --out benchmarks/results/graph-probe-20000.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

from chroma_server import chroma_server, free_port, smaps_rollup
from result_file import measured_on, write_result

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
COLLECTION = "probe_vector"
GRAPH_NAME = "graph_probe"
TOP_K = 21
RETRIEVERS = ("vector", "hippo_graph")
GRAPH_STEPS = ("graph fact scoring", "graph fact filter", "graph walk")


def memory(trace: bool) -> dict[str, float]:
    """The process's resident set now and its high-water mark (MB), and Python's traced heap when traced."""
    gc.collect()
    with open("/proc/self/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    out = {"rss_mb": round(rss_kb / 1024, 1),
           "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if trace and tracemalloc.is_tracing():
        current, peak = tracemalloc.get_traced_memory()
        out.update(traced_mb=round(current / 2**20, 1), traced_peak_mb=round(peak / 2**20, 1))
    return out


def top_allocations(count: int = 15) -> list[str]:
    """The largest traced allocation sites now, as ``file:line size``."""
    stats = tracemalloc.take_snapshot().statistics("lineno")[:count]
    return [f"{s.traceback[0].filename.split('site-packages/')[-1]}:{s.traceback[0].lineno} "
            f"{s.size / 2**20:.1f} MB ({s.count} blocks)" for s in stats]


def load_corpus(work: Path) -> Any:
    """The synthetic corpus and questions written into the work folder."""
    from llama_index_mhop.bench.loaders import load_dataset

    return load_dataset(str(work / "corpus"))


def probe_embedder() -> Any:
    """The embedder of every step: hashed words, no model."""
    from hashed_embedding import HashedEmbedding

    return HashedEmbedding()


def build_step(work: Path, trace: bool, server: bool) -> dict[str, Any]:
    """Build the vector index and the graph beside it, with the memory after each; with ``server`` the store is
    a ``chroma run`` server's (its memory recorded beside the build process's), else embedded in the process."""
    import chromadb

    from llama_index_mhop.stores.defaults import default_chroma_client

    for folder in ("chroma", "graph"):
        shutil.rmtree(work / folder, ignore_errors=True)
    if not server:
        return _build(work, trace, chromadb.PersistentClient(path=str(work / "chroma")), None)
    port = free_port()
    with chroma_server(work / "chroma", port) as process:
        return _build(work, trace, default_chroma_client(host="localhost", port=port), process.pid)


def graph_step(work: Path, trace: bool) -> dict[str, Any]:
    """The graph alone, beside the vector index an earlier build left in the work folder's store (served by a
    ``chroma run`` server): the memory after the vector index is opened, then after the graph's build."""
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from llama_index_mhop.stores.defaults import default_chroma_client

    shutil.rmtree(work / "graph", ignore_errors=True)
    port = free_port()
    with chroma_server(work / "chroma", port) as process:
        client = default_chroma_client(host="localhost", port=port)

        def open_vector_index(embedder: Any) -> Any:
            store = ChromaVectorStore(chroma_collection=client.get_collection(COLLECTION))
            return VectorStoreIndex.from_vector_store(store, embed_model=embedder)

        return _build(work, trace, client, process.pid, open_vector_index)


def _build(work: Path, trace: bool, client: Any, server_pid: int | None,
           open_vector_index: Any = None) -> dict[str, Any]:
    import llama_index_mhop
    from llama_index_mhop.bench.context import passage_documents
    from llama_index_mhop.graph import HippoGraphIndex
    from llama_index_mhop.stores.vector_index import build_vector_index

    def measured() -> dict[str, Any]:
        here = memory(trace)
        return here if server_pid is None else {**here, "chroma_server": smaps_rollup(server_pid)}

    if trace:
        tracemalloc.start()
    steps: dict[str, Any] = {"start": measured()}
    embedder = probe_embedder()
    if open_vector_index is not None:  # the graph alone, beside an earlier build's vector index
        vector_index = open_vector_index(embedder)
        seconds: dict[str, float] = {}
        steps["vector index built"] = steps["vector index opened"] = measured()
    else:
        documents = passage_documents(load_corpus(work).passages)
        steps["corpus loaded"] = measured()
        start = time.perf_counter()
        vector_index = build_vector_index(documents, collection_name=COLLECTION, chroma_client=client,
                                          embed_model=embedder)
        seconds = {"vector index": round(time.perf_counter() - start, 1)}
        del documents
        steps["vector index built"] = measured()
    start = time.perf_counter()
    graph = HippoGraphIndex.from_vector_index(vector_index, embed_model=embedder, chroma_client=client,
                                              name=GRAPH_NAME, persist_dir=work / "graph")
    seconds["graph"] = round(time.perf_counter() - start, 1)
    steps["graph built"] = measured()
    result = {"seconds": seconds, "memory": steps, "counts": graph.counts(), "package": llama_index_mhop.__file__,
              "chroma_server": server_pid is not None}
    if trace:
        result["top_allocations"] = top_allocations()
    return result


def query_step(work: Path, trace: bool, rounds: int, rankings: Path, walk_from_nodes: int | None,
               hnsw_min_records: int | None, hnsw_top_n: int | None, chroma_port: int | None = None,
               hnsw_min_passages: int | None = None
               ) -> dict[str, Any]:
    """Open the store and the graph, load the graph's query state, then time both retrievers."""
    import chromadb
    import torch
    from flow_steps import StepClock
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from llama_index_mhop.bench.benchmarker import passage_ids
    from llama_index_mhop.graph import HippoGraphIndex, HippoGraphIndexConfig
    from llama_index_mhop.rules.metrics import recall_at_k

    torch.set_num_threads(1)
    walk: dict[str, int] = {}  # the index's walk settings this query process overrides
    if walk_from_nodes is not None:
        walk["push_min_nodes"] = walk_from_nodes
    if hnsw_min_records is not None:
        walk["hnsw_min_facts"] = walk["hnsw_min_passages"] = hnsw_min_records
    if hnsw_min_passages is not None:
        walk["hnsw_min_passages"] = hnsw_min_passages
    if hnsw_top_n is not None:
        walk["hnsw_top_n"] = hnsw_top_n
    dataset = load_corpus(work)
    embedder = probe_embedder()
    steps: dict[str, Any] = {"start": memory(False)}
    if chroma_port is None:
        client = chromadb.PersistentClient(path=str(work / "chroma"))
    else:
        from llama_index_mhop.stores.defaults import default_chroma_client

        client = default_chroma_client(host="localhost", port=chroma_port)
    store = ChromaVectorStore(chroma_collection=client.get_collection(COLLECTION))
    vector_index = VectorStoreIndex.from_vector_store(store, embed_model=embedder)
    graph = HippoGraphIndex.from_persist_dir(work / "graph", chroma_client=client, embed_model=embedder,
                                             config=HippoGraphIndexConfig(**walk))
    steps["indexes opened"] = memory(False)
    if trace:
        tracemalloc.start()
    start = time.perf_counter()
    graph.retrieval_state()
    load_seconds = round(time.perf_counter() - start, 2)
    steps["state loaded"] = memory(trace)
    allocations = top_allocations() if trace else None
    tracemalloc.stop()

    clock = StepClock()
    untimed = clock.install()  # before the retriever is built: its program keeps the steps it is handed
    retrievers = {"vector": vector_index.as_retriever(similarity_top_k=TOP_K),
                  "hippo_graph": graph.as_retriever(similarity_top_k=TOP_K)}
    for retriever in retrievers.values():
        retriever.retrieve(dataset.questions[0].text)
    clock.take()
    totals: dict[str, list[float]] = {name: [] for name in retrievers}
    graph_steps: dict[str, list[float]] = {step: [] for step in (*GRAPH_STEPS, "other")}
    top: dict[str, dict[str, list[str]]] = {name: {} for name in retrievers}
    recall: dict[str, list[float]] = {name: [] for name in retrievers}
    load = [os.getloadavg()]
    for round_number in range(rounds):
        for question in dataset.questions:
            for name, retriever in retrievers.items():
                start = time.perf_counter()
                nodes = retriever.retrieve(question.text)
                totals[name].append((time.perf_counter() - start) * 1000.0)
                taken = clock.take()
                if name == "hippo_graph":
                    for step in GRAPH_STEPS:
                        graph_steps[step].append(taken.get(step, 0.0))
                    graph_steps["other"].append(totals[name][-1] - sum(taken.get(s, 0.0) for s in GRAPH_STEPS))
                if round_number == 0:
                    top[name][question.qid] = [n.node.node_id for n in nodes]
                    recall[name].append(recall_at_k(passage_ids(nodes), question.gold_ids, TOP_K))
    load.append(os.getloadavg())
    steps["queries done"] = memory(False)
    rankings.parent.mkdir(parents=True, exist_ok=True)
    rankings.write_text(json.dumps(top, indent=0) + "\n")
    vector_p50 = statistics.median(totals["vector"])
    result: dict[str, Any] = {
        "load_avg_before_after": load, "untimed_places": untimed, "state_load_seconds": load_seconds,
        "memory": steps, "retrievers": {}, "rankings": str(rankings),
    }
    for name, values in totals.items():
        p50 = statistics.median(values)
        result["retrievers"][name] = {
            "p50_ms": round(p50, 2), "p95_ms": round(statistics.quantiles(values, n=20)[-1], 2),
            "x_vector_p50": round(p50 / vector_p50, 2), f"recall@{TOP_K}": round(100 * statistics.fmean(recall[name]), 2),
        }
    result["hippo_graph_steps_ms"] = {step: {"p50": round(statistics.median(v), 3), "mean": round(statistics.fmean(v), 3)}
                                      for step, v in graph_steps.items()}
    if allocations is not None:
        result["state_top_allocations"] = allocations
    return result


def chroma_step(work: Path, counts: dict[str, int], dimension: int = 384) -> dict[str, Any]:
    """Insert as many random vectors as the graph's entities and facts into a scratch store; the memory after."""
    import chromadb
    import numpy as np

    shutil.rmtree(work / "chroma-alone", ignore_errors=True)
    client = chromadb.PersistentClient(path=str(work / "chroma-alone"))
    steps: dict[str, Any] = {"client": memory(False)}
    rng = np.random.default_rng(0)
    for kind in ("entities", "facts"):
        collection = client.get_or_create_collection(f"alone_{kind}", metadata={"hnsw:space": "cosine"})
        for start in range(0, counts[kind], 2000):
            rows = rng.standard_normal((min(2000, counts[kind] - start), dimension)).astype(np.float32)
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            collection.upsert(ids=[f"{kind}{start + i}" for i in range(len(rows))], embeddings=rows)
        steps[kind] = memory(False)
    shutil.rmtree(work / "chroma-alone", ignore_errors=True)
    return {"vectors": counts["entities"] + counts["facts"], "memory": steps,
            "growth_mb": round(steps["facts"]["rss_mb"] - steps["client"]["rss_mb"], 1)}


def same_top(before: Path, after: Path) -> dict[str, dict[str, int]]:
    """Per retriever, the questions whose top 21 is the same in two rankings files: in order, and as a set."""
    old, new = json.loads(before.read_text()), json.loads(after.read_text())
    return {name: {"questions": len(new[name]),
                   "same_order": sum(old[name].get(q) == top for q, top in new[name].items()),
                   "same_set": sum(set(old[name].get(q, ())) == set(top) for q, top in new[name].items())}
            for name in new if name in old}


def _run_step(step: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run one step in a fresh interpreter (one torch thread) and read the JSON it prints last."""
    command = [sys.executable, str(Path(__file__).resolve()), "--step", step, "--work-dir", str(args.work_dir),
               "--rounds", str(args.rounds), "--rankings", str(args.rankings)]
    if args.tracemalloc:
        command.append("--tracemalloc")
    if args.chroma_server:
        command.append("--chroma-server")
    if args.walk_from_nodes is not None:
        command += ["--walk-from-nodes", str(args.walk_from_nodes)]
    if args.hnsw_min_records is not None:
        command += ["--hnsw-min-records", str(args.hnsw_min_records)]
    if args.hnsw_min_passages is not None:
        command += ["--hnsw-min-passages", str(args.hnsw_min_passages)]
    if args.hnsw_top_n is not None:
        command += ["--hnsw-top-n", str(args.hnsw_top_n)]
    if args.chroma_port is not None:
        command += ["--chroma-port", str(args.chroma_port)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=20_000)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="times each question is asked of each retriever")
    parser.add_argument("--work-dir", type=Path, default=Path("/work/runs/graph-probe"))
    parser.add_argument("--tracemalloc", action="store_true", help="trace Python's heap per step (slower)")
    parser.add_argument("--rankings", type=Path, help="where the top 21 of every question go")
    parser.add_argument("--reuse-build", action="store_true", help="query the store and graph of an earlier run")
    parser.add_argument("--compare", type=Path, help="another run's rankings file: count the same top 21")
    parser.add_argument("--walk-from-nodes", type=int, help="push_min_nodes in the query process")
    parser.add_argument("--hnsw-min-records", type=int,
                        help="hnsw_min_facts and hnsw_min_passages in the query process (the HNSW paths below their sizes)")
    parser.add_argument("--hnsw-min-passages", type=int,
                        help="hnsw_min_passages alone in the query process (after --hnsw-min-records)")
    parser.add_argument("--hnsw-top-n", type=int, help="HNSW_TOP_N in the query process (records scored exactly)")
    parser.add_argument("--chroma-server", action="store_true",
                        help="build into a `chroma run` server (its memory recorded) instead of an embedded store")
    parser.add_argument("--chroma-port", type=int,
                        help="query through the `chroma run` server on this port (serving the work folder's store)")
    parser.add_argument("--step", choices=("build", "graph", "query", "chroma"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    args.work_dir = args.work_dir.resolve()
    args.rankings = (args.rankings or args.work_dir / "rankings.json").resolve()
    if args.step == "build":
        print(json.dumps(build_step(args.work_dir, args.tracemalloc, args.chroma_server)))
        return 0
    if args.step == "graph":
        print(json.dumps(graph_step(args.work_dir, args.tracemalloc)))
        return 0
    if args.step == "chroma":
        counts = json.loads((args.work_dir / "build.json").read_text())["counts"]
        print(json.dumps(chroma_step(args.work_dir, counts)))
        return 0
    if args.step == "query":
        print(json.dumps(query_step(args.work_dir, args.tracemalloc, args.rounds, args.rankings,
                                    args.walk_from_nodes, args.hnsw_min_records, args.hnsw_top_n,
                                    args.chroma_port, args.hnsw_min_passages)))
        return 0

    from llama_index_mhop.bench.synthetic import generate_dataset

    corpus = args.work_dir / "corpus"
    if not (corpus / "corpus.json").exists():
        generate_dataset(args.passages, args.questions, seed=args.seed).write(corpus)
    load = [os.getloadavg()]
    saved_build = args.work_dir / "build.json"
    if args.reuse_build:
        build = json.loads(saved_build.read_text())
    else:
        build = _run_step("build", args)
        saved_build.write_text(json.dumps(build) + "\n")
    query = _run_step("query", args)
    chroma = _run_step("chroma", args)
    load.append(os.getloadavg())
    passages = build["counts"].get("passages") or args.passages
    memory_steps = build["memory"]
    growth_mb = memory_steps["graph built"]["rss_mb"] - memory_steps["vector index built"]["rss_mb"]
    query_memory = query["memory"]
    result: dict[str, Any] = {
        "passages": args.passages, "questions": args.questions, "seed": args.seed, "rounds": args.rounds,
        "embedder": "HashedEmbedding (384 dimensions)", "top_k": TOP_K, "tracemalloc": args.tracemalloc,
        **measured_on(load, "chromadb", "llama-index-core", "numpy", "scipy"),
        "graph_build_growth_mb": round(growth_mb, 1),
        "graph_build_growth_kb_per_passage": round(growth_mb * 1024 / passages, 2),
        **({"chroma_server_graph_growth_kb_per_passage": round(
            (memory_steps["graph built"]["chroma_server"]["rss_mb"]
             - memory_steps["vector index built"]["chroma_server"]["rss_mb"]) * 1024 / passages, 2)}
           if build.get("chroma_server") else {}),
        "query_state_growth_kb_per_passage": round(
            (query_memory["state loaded"]["rss_mb"] - query_memory["indexes opened"]["rss_mb"]) * 1024 / passages, 2),
        "hippo_graph_x_vector_p50": query["retrievers"]["hippo_graph"]["x_vector_p50"],
        "walk_from_nodes": args.walk_from_nodes, "hnsw_min_records": args.hnsw_min_records,
        "hnsw_min_passages": args.hnsw_min_passages,
        "hnsw_top_n": args.hnsw_top_n,
        "reused_build": args.reuse_build,
        "chroma_alone_kb_per_passage": round(chroma["growth_mb"] * 1024 / passages, 2),
        "build": build,
        "query": query,
        "chroma_alone": chroma,
    }
    if args.compare is not None:
        result["same_top_as"] = {"rankings": str(args.compare), **same_top(args.compare, args.rankings)}
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
