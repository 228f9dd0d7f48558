"""The memory of several query workers over one persisted graph and one Chroma server.

The deployment a user outgrowing one process runs: a Chroma server (``chroma run``) holds the collections, and each
worker process opens the persisted graph folder (``HippoGraphIndex.from_persist_dir``) against that server and
answers queries. Whatever the graph keeps in memory-mapped files is one copy in the page cache for every worker;
whatever it keeps on the heap is each worker's own.

This script serves the folder of a ``benchmarks/graph_probe.py`` build (its ``chroma`` store, ``graph`` folder and
synthetic ``corpus``, embedded with the same hashed embedder). It starts ``chroma run`` on a copy of the store,
then ``--workers`` worker processes one after another; each opens the graph over the server, loads its query state,
answers every question with ``hippo_graph`` (k = 21, no LM) and stays up, reporting its own memory after each
step and the size of its passage and fact matrices (and whether they are memory-mapped files,
``graph/state_files.py``). With all of them up, each worker's memory is read from ``/proc/<pid>/smaps_rollup``:

- ``rss_mb``: every page it maps, shared ones included;
- ``pss_mb``: its proportional share (a page shared by three processes counts a third in each);
- ``private_mb``: the pages only it holds (what one more worker adds to the machine);
- ``anonymous_mb``: its heap and other memory backed by no file (never shared between workers).

Each worker reports its query latency (p50/p95); with ``--against-vector`` it also times ``vector`` over the same
server, question by question interleaved, and reports the ratio of the two medians (that index adds to the
worker's memory, so memory runs leave it off).

``added_by_second_worker_pct`` is the second worker's private memory over the first worker's resident set. Each
worker's top 21 of every question is compared with the first worker's (``same_rankings``).

With ``--preload`` the reader workers are forked from one process that imported the libraries first (and opened
nothing), as a pre-fork server (gunicorn's ``--preload``) starts its workers: the libraries' heap is then one copy
for every worker. ``preloader`` is that process's memory.

With ``--reader`` the workers are ``HippoGraphReader``s: each opens the current save's query snapshot
(``graph/state_load.py``) instead of the graph's tables and Chroma's records. One process opens a reader and
exits before the workers start (it files the snapshot when the save has none: ``snapshot_seconds``), so every
measured worker is a plain reader. ``rankings_digest`` (of the first worker's rankings) compares the two modes.

Usage:
    python benchmarks/graph_probe.py --passages 20000 --work-dir /work/runs/graph-probe   # the build
    python benchmarks/query_workers.py --work-dir /work/runs/graph-probe [--workers 3] [--port 8765] [--reader] \\
        [--preload] \\
        --out benchmarks/results/query-workers-20000.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from chroma_server import chroma_server, free_port, smaps_rollup
from result_file import CHECKOUT, measured_on, write_result

TOP_K = 21


def worker(work: Path, port: int, reader: bool, against_vector: bool) -> None:
    """One worker: answer the questions its standard input's first line holds (:func:`answer`), report, then wait
    for its standard input to close (so that every worker is up when the memory is read). The questions come from
    the parent, so that no worker holds the corpus they were read from."""
    questions = json.loads(sys.stdin.readline())
    print(json.dumps(answer(work, port, reader, questions, against_vector)), flush=True)
    sys.stdin.read()


def preloaded_workers(work: Path, port: int, count: int, against_vector: bool) -> None:
    """The pre-fork deployment: this process imports what a worker runs and freezes its heap
    (``HippoGraphReader.preload``), opens nothing, then forks ``count`` reader workers one after another, each
    answering and reporting as :func:`worker` does; each opens its own Chroma client and reader after the fork."""
    import graph_probe  # noqa: F401

    from llama_index_mhop.graph import HippoGraphReader

    questions = json.loads(sys.stdin.readline())
    HippoGraphReader.preload()
    children = []
    for _ in range(count):
        ready, done = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            os.close(ready)
            try:
                print(json.dumps(answer(work, port, True, questions, against_vector)), flush=True)
                os.write(done, b"1")
                sys.stdin.read()
            finally:
                os._exit(0)
        os.close(done)
        os.read(ready, 1)  # this worker has reported: the next one starts with it up
        os.close(ready)
        children.append(pid)
    sys.stdin.read()
    for pid in children:
        os.waitpid(pid, 0)


def answer(work: Path, port: int, reader: bool, questions: list[str],
           timed_against_vector: bool) -> dict[str, Any]:
    """Open the graph over the server (an index, or with ``reader`` a reader), load its state, answer
    ``questions``: the worker's report, with its memory after each step and its query latency (beside
    ``vector``'s when ``timed_against_vector``)."""
    import graph_probe
    from llama_index.core import VectorStoreIndex
    from llama_index.vector_stores.chroma import ChromaVectorStore

    from llama_index_mhop.graph import HippoGraphIndex, HippoGraphReader
    from llama_index_mhop.stores.defaults import default_chroma_client

    client = default_chroma_client(host="localhost", port=port)
    steps = {"started": smaps_rollup(os.getpid())}
    start = time.perf_counter()
    graph: Any = (HippoGraphReader.open(work / "graph", chroma_client=client, embed_model=graph_probe.probe_embedder())
                  if reader else HippoGraphIndex.from_persist_dir(work / "graph", chroma_client=client,
                                                                  embed_model=graph_probe.probe_embedder()))
    steps["graph opened"] = smaps_rollup(os.getpid())
    state = graph.retrieval_state()
    load_seconds = round(time.perf_counter() - start, 2)
    steps["state loaded"] = smaps_rollup(os.getpid())
    retriever = graph.as_retriever(similarity_top_k=TOP_K)
    asked_by = [("hippo_graph", retriever)]
    if timed_against_vector:  # its own index and client add to the worker's memory: only when asked for
        asked_by.append(("vector", VectorStoreIndex.from_vector_store(
            ChromaVectorStore(chroma_collection=client.get_collection(graph_probe.COLLECTION)),
            embed_model=graph_probe.probe_embedder()).as_retriever(similarity_top_k=TOP_K)))
    rankings, milliseconds = [], {name: [] for name, _ in asked_by}
    for question in questions:  # interleaved, so both meet the same machine
        for name, asked in asked_by:
            start = time.perf_counter()
            nodes = asked.retrieve(question)
            milliseconds[name].append((time.perf_counter() - start) * 1000.0)
            if name == "hippo_graph":
                rankings.append([n.node.node_id for n in nodes])
    steps["questions answered"] = smaps_rollup(os.getpid())
    latency = {name: {"p50_ms": round(statistics.median(v), 2), "p95_ms": round(statistics.quantiles(v, n=20)[-1], 2)}
               for name, v in milliseconds.items()}
    if timed_against_vector:
        latency["hippo_graph_x_vector_p50"] = round(latency["hippo_graph"]["p50_ms"] / latency["vector"]["p50_ms"],
                                                    2)
    matrices = {name: {"mb": round(vectors.matrix.nbytes / 2**20, 1),
                       "memory_mapped": isinstance(vectors.matrix, np.memmap)}
                for name, vectors in (("passages", state.passage_vectors), ("facts", state.fact_vectors))
                if vectors.matrix is not None}
    return {"pid": os.getpid(), "state_load_seconds": load_seconds, "steps": steps, "matrices": matrices,
            "latency": latency, "rankings": rankings}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a graph_probe.py build folder")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--port", type=int)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--reader", action="store_true", help="workers are HippoGraphReaders (query snapshots)")
    parser.add_argument("--preload", action="store_true",
                        help="reader workers forked from one process that imported the libraries (implies --reader)")
    parser.add_argument("--preloader", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--against-vector", action="store_true",
                        help="each worker also times `vector` over the same server, interleaved (its index adds memory)")
    parser.add_argument("--rankings", type=Path,
                        help="where the first worker's top 21 of every question go (graph_probe.py's format)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    work = args.work_dir.resolve()
    port = args.port or free_port()
    args.reader = args.reader or args.preload
    if args.worker:
        worker(work, port, args.reader, args.against_vector)
        return 0
    if args.preloader:
        preloaded_workers(work, port, args.workers, args.against_vector)
        return 0

    served = work / "served-chroma"  # the server writes into the store it opens: a copy keeps the build as built
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(work / "chroma", served)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    workers: list[subprocess.Popen[str]] = []
    load = [os.getloadavg()]
    try:
        with chroma_server(served, port) as server:
            import graph_probe

            asked = graph_probe.load_corpus(work).questions
            questions = json.dumps([q.text for q in asked]) + "\n"
            qids = [q.qid for q in asked]
            command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--work-dir", str(work), "--port",
                       str(port), *(["--reader"] if args.reader else []),
                       *(["--against-vector"] if args.against_vector else [])]
            snapshot_seconds = None
            if args.reader:  # a reader that files the save's snapshot if it has none, then exits
                start = time.perf_counter()
                subprocess.run(command, cwd=CHECKOUT, env=env, input=questions, stdout=subprocess.DEVNULL,
                               check=True, text=True)
                snapshot_seconds = round(time.perf_counter() - start, 2)
            reports = []
            # one after another: each is measured with the ones before it up; preloaded, all forked from one process
            preloader = [sys.executable, str(Path(__file__).resolve()), "--preloader", "--work-dir", str(work),
                         "--port", str(port), "--workers", str(args.workers),
                         *(["--against-vector"] if args.against_vector else [])]
            launches = [preloader] if args.preload else [command] * args.workers
            for launch in launches:
                process = subprocess.Popen(launch, cwd=CHECKOUT, env=env, text=True, stdin=subprocess.PIPE,
                                           stdout=subprocess.PIPE)
                workers.append(process)
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(questions)
                process.stdin.flush()
                for _ in range(args.workers if args.preload else 1):
                    line = process.stdout.readline()
                    if not line:
                        raise RuntimeError(f"worker {len(reports) + 1} exited with {process.wait()}")
                    reports.append(json.loads(line))
            memory = [smaps_rollup(report["pid"]) for report in reports]
            preloader_memory = smaps_rollup(workers[0].pid) if args.preload else None
            server_memory = smaps_rollup(server.pid)
            for process in workers:
                assert process.stdin is not None
                process.stdin.close()
                process.wait(timeout=60)
    finally:
        for process in workers:
            process.kill()
        shutil.rmtree(served, ignore_errors=True)
    load.append(os.getloadavg())

    first = reports[0]["rankings"]
    if args.rankings is not None:
        args.rankings.write_text(json.dumps({"hippo_graph": dict(zip(qids, first, strict=True))}, indent=0) + "\n")
    rows = [{"worker": i + 1, "state_load_seconds": r["state_load_seconds"], **m,
             "same_rankings": r["rankings"] == first, "latency": r["latency"], "steps": r["steps"],
             "matrices": r["matrices"]}
            for i, (r, m) in enumerate(zip(reports, memory, strict=True))]
    result: dict[str, Any] = {
        "work_dir": str(work), "workers": args.workers, "reader": args.reader, "preload": args.preload,
        "preloader": preloader_memory, "questions": len(first),
        "snapshot_seconds": snapshot_seconds,
        "rankings_digest": hashlib.sha256(json.dumps(first).encode()).hexdigest(),
        **measured_on(load, "chromadb", "llama-index-core", "numpy", "scipy"),
        "added_by_second_worker_pct": (round(100 * memory[1]["private_mb"] / memory[0]["rss_mb"], 1)
                                       if len(memory) > 1 else None),
        "chroma_server": server_memory,
        "per_worker": rows,
    }
    write_result(result, args.out)
    for row in rows:
        print({key: row[key] for key in ("worker", "state_load_seconds", "rss_mb", "pss_mb", "private_mb",
                                         "same_rankings")})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
