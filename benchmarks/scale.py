"""Growth curves: indexing time, peak memory, query latency and recall against corpus size.

For each size (default 1k, 10k and 100k passages) a synthetic multi-hop corpus is generated
(:mod:`llama_index_mhop.bench.synthetic`: the same questions at every size, only the distractors grow) and the
registered retrievers are run on it by :class:`~llama_index_mhop.bench.benchmarker.Benchmarker`.

Every measurement runs in its own subprocess, so ``ru_maxrss`` (the resident-set high-water mark) is the memory
of that step alone and not of everything run before it:

1. ``index``: embed the corpus once into a persistent Chroma collection (the shared vector index), timed as the
   Benchmarker times it; then two probes: embedding-only throughput on a sample of passages, and Chroma-only
   insertion time of the already computed vectors into a scratch collection (so the build splits into
   embedding and Chroma/HNSW time);
2. ``graph``: the LLM-free HippoRAG-style graph of the corpus (``extract_llm_free`` + ``KnowledgeGraph``, no
   synonymy edges, which need entity embeddings): nodes, edges per passage, the CSR transition matrix's bytes and
   one Personalized PageRank query, with the peak memory of a process that holds the graph;
3. one process per retriever: open the shared index from disk and run the Benchmarker on that retriever only.
   Its ``index_seconds`` is the shared build time (from step 1) plus its own factory call, as in ``mhop bench``;
   its ``peak_rss_mb`` includes the embedder and the opened Chroma index (``baseline_rss_mb`` is the process's
   peak before the index was opened).

Results are merged into ``benchmarks/results/scale.json`` by (size, retriever), so a long size can be run on its
own; each size also gets a result file in the ``mhop bench`` schema (``scale-N.json``), and a PNG plots cost
against corpus size.

Usage:
    python benchmarks/scale.py --sizes 1000,10000,100000 --questions 50 \\
        --retrievers vector,bm25,rrf_fusion,confidence_loop,hippo_graph [--seed 0] [--threads 1]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
DEFAULT_OUT = RESULTS / "scale.json"
DEFAULT_PLOT = RESULTS / "scale.png"
DEFAULT_WORK_DIR = ROOT / ".mhop" / "scale"
DEFAULT_REFERENCE = ROOT.parent / "shared" / "datasets" / "hotpotqa-100"
DEFAULT_SIZES = (1_000, 10_000, 100_000)
DEFAULT_RETRIEVERS = ("vector", "bm25", "rrf_fusion", "confidence_loop", "hippo_graph")
DEFAULT_K_VALUES = (2, 5, 10, 21)
EMBED_PROBE_PASSAGES = 512
CHROMA_PROBE_BATCH = 5000
PPR_PROBE_QUERIES = 7


# -- helpers shared by the parent and the workers ---------------------------------------------------------------


def _peak_rss_mb() -> float:
    from llama_index_mhop.bench.benchmarker import peak_rss_mb

    return round(peak_rss_mb(), 2)


def _reference_push() -> Any:
    """The push of a whole reset the tests compare the walk against (``tests/graph/walk_reference.py``)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    from tests.graph.walk_reference import push_pagerank

    return push_pagerank


def _set_threads(threads: int) -> None:
    """Pin torch's intra-op threads: on a shared 2-core machine one thread embeds faster than two (measured)."""
    if threads > 0:
        import torch

        torch.set_num_threads(threads)


def _disk_mb(path: Path) -> float:
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return round(total / 2**20, 2)


def _load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _top(scores: Any, k: int) -> list[int]:
    """Indices of the ``k`` highest scores (ties: lower index first), as the retriever ranks them."""
    import numpy as np

    return np.argsort(-scores, kind="stable")[:k].tolist()


def _write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _collection_name(dataset_dir: Path) -> str:
    from llama_index_mhop.bench.context import passage_documents
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.stores.corpus import stable_id

    docs = passage_documents(load_dataset(dataset_dir).passages)
    return "mhop_bench_" + stable_id(*(d.id_ for d in docs))[:16]


# -- worker 1: the shared vector index --------------------------------------------------------------------------


def _index_worker(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index.core.schema import MetadataMode

    from llama_index_mhop.bench.context import BenchContext, passage_documents
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.stores.defaults import default_chroma_client, default_embed_model

    _set_threads(args.threads)
    load_before = _load_avg()
    dataset = load_dataset(args.dataset)
    embed = default_embed_model()
    embed.get_text_embedding("warm-up")
    baseline = _peak_rss_mb()
    chroma_dir = Path(args.chroma)
    shutil.rmtree(chroma_dir, ignore_errors=True)
    client = default_chroma_client(chroma_dir)
    documents = passage_documents(dataset.passages)
    ctx = BenchContext(documents, embed_model=embed, chroma_client=client, work_dir=chroma_dir.parent,
                       top_k=max(DEFAULT_K_VALUES), show_progress=True)
    seconds = ctx.build_vector_index()
    peak = _peak_rss_mb()
    collection = client.get_collection(ctx.collection_name)
    n_vectors = collection.count()
    disk = _disk_mb(chroma_dir)

    # Probe 1: embedding alone, on an evenly spread sample of the same texts.
    step = max(1, len(documents) // EMBED_PROBE_PASSAGES)
    sample = [d.get_content(metadata_mode=MetadataMode.EMBED) for d in documents[::step][:EMBED_PROBE_PASSAGES]]
    start = time.perf_counter()
    embed.get_text_embedding_batch(sample)
    embed_rate = len(sample) / (time.perf_counter() - start)

    # Probe 2: Chroma alone: re-insert the stored vectors into a scratch collection (HNSW insert + SQLite).
    scratch = client.create_collection("scale_probe", metadata={"hnsw:space": "cosine"})
    insert_seconds = 0.0
    for offset in range(0, n_vectors, CHROMA_PROBE_BATCH):
        batch = collection.get(include=["embeddings", "documents", "metadatas"], limit=CHROMA_PROBE_BATCH,
                               offset=offset)
        start = time.perf_counter()
        scratch.add(ids=batch["ids"], embeddings=batch["embeddings"], documents=batch["documents"],
                    metadatas=batch["metadatas"])
        insert_seconds += time.perf_counter() - start
    client.delete_collection("scale_probe")
    return {
        "n_passages": len(dataset.passages),
        "n_vectors": n_vectors,
        "collection_name": ctx.collection_name,
        "build_seconds": round(seconds, 3),
        "baseline_rss_mb": baseline,
        "peak_rss_mb": peak,
        "chroma_disk_mb": disk,
        "embed_probe_passages": len(sample),
        "embed_passages_per_s": round(embed_rate, 2),
        "embed_seconds_estimated": round(len(documents) / embed_rate, 1),
        "chroma_insert_seconds": round(insert_seconds, 3),
        "load_avg_before": load_before,
        "load_avg_after": _load_avg(),
    }


# -- worker 2: the LLM-free passage/entity graph ----------------------------------------------------------------


def _graph_worker(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.graph.extraction import extract_llm_free, with_title_entities

    dataset = load_dataset(args.dataset)
    baseline = _peak_rss_mb()
    load_before = _load_avg()
    start, cpu = time.perf_counter(), time.process_time()
    extractions = [with_title_entities(extract_llm_free(p.text, p.title), p.title) for p in dataset.passages]
    extract_seconds, extract_cpu = time.perf_counter() - start, time.process_time() - cpu
    start, cpu = time.perf_counter(), time.process_time()
    graph = _build_graph(dataset.passages, extractions)
    graph_seconds, graph_cpu = time.perf_counter() - start, time.process_time() - cpu
    out = _graph_measures(args, graph, baseline, extract_seconds, graph_seconds,
                          lambda: _build_graph(dataset.passages, extractions))
    # CPU seconds of this process: on a shared machine they move far less with the load than wall time does.
    out.update({"extract_cpu_seconds": round(extract_cpu, 3), "graph_build_cpu_seconds": round(graph_cpu, 3),
                "load_avg_before": load_before, "load_avg_after": _load_avg()})
    return out


def _build_graph(passages: list[Any], extractions: list[Any]) -> Any:
    """The LLM-free graph of a corpus: passage, entity and fact nodes and edges, no synonymy."""
    from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph
    from llama_index_mhop.rules.text import entity_key

    graph = KnowledgeGraph()
    for passage, extraction in zip(passages, extractions, strict=True):
        entities = {entity_key(name): entity_key(name) for name in extraction.entities}
        facts = {}
        for subject, predicate, obj in extraction.triples:
            s, o = entity_key(subject), entity_key(obj)
            entities.setdefault(s, s)
            entities.setdefault(o, o)
            facts[f"{s}|{predicate}|{o}"] = (s, predicate, o)
        entities.pop("", None)
        facts = {k: v for k, v in facts.items() if v[0] and v[2]}
        graph.add_passage(passage.passage_id, entities, facts, title=passage.title)
    return graph


def _heap_bytes(rebuild: Any) -> dict[str, Any]:
    """Python-heap bytes (tracemalloc) of the array graph, and of its networkx export, built once more each."""
    import tracemalloc

    import networkx  # noqa: F401  (imported before tracing: its module objects are not the graph's)

    tracemalloc.start()
    graph = rebuild()
    graph.pagerank_graph()  # compacts the edge table, as a query process holds it
    graph._pagerank = None
    arrays_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    tracemalloc.start()
    exported = graph.to_networkx()
    networkx_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del exported
    return {"graph_heap_bytes": arrays_bytes, "networkx_export_heap_bytes": networkx_bytes,
            "graph_heap_bytes_per_passage": round(arrays_bytes / max(1, graph.num_passages), 1)}


def _graph_measures(args: argparse.Namespace, graph: Any, baseline: float, extract_seconds: float,
                    graph_seconds: float, rebuild: Any) -> dict[str, Any]:
    import numpy as np

    from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph

    push_pagerank = _reference_push()
    after_graph = _peak_rss_mb()
    pairs, values = graph._edges.table()
    edge_table_bytes = int(pairs.nbytes + values.nbytes)
    start = time.perf_counter()
    pagerank = graph.pagerank_graph()
    csr_seconds = time.perf_counter() - start
    m = pagerank.transition
    csr_bytes = int(m.data.nbytes + m.indices.nbytes + m.indptr.nbytes)
    # A HippoRAG-shaped reset: a little on every passage (its dense score), most on a few entities.
    rng = np.random.default_rng(0)
    n_passages = graph.num_passages
    exact_ms, push_ms, agree = [], [], []
    exact_cpu_ms, push_cpu_ms = [], []
    push_pagerank(pagerank, np.ones(pagerank.n_nodes))  # builds the walk matrix push reads, once per graph version
    for _ in range(PPR_PROBE_QUERIES):
        reset = np.zeros(pagerank.n_nodes)
        reset[:n_passages] = 0.05 * rng.random(n_passages)
        reset[n_passages + rng.choice(pagerank.n_nodes - n_passages, 5, replace=False)] = 1.0
        start, cpu = time.perf_counter(), time.process_time()
        exact = pagerank.run(reset)
        exact_ms.append((time.perf_counter() - start) * 1000.0)
        exact_cpu_ms.append((time.process_time() - cpu) * 1000.0)
        start, cpu = time.perf_counter(), time.process_time()
        pushed = push_pagerank(pagerank, reset).scores
        push_ms.append((time.perf_counter() - start) * 1000.0)
        push_cpu_ms.append((time.process_time() - cpu) * 1000.0)
        agree.append(set(_top(exact[:n_passages], 21)) == set(_top(pushed[:n_passages], 21)))
    folder = Path(args.dataset).parent / "graph-arrays"
    start = time.perf_counter()
    graph.save(folder)
    save_seconds = time.perf_counter() - start
    start = time.perf_counter()
    KnowledgeGraph.load(folder, mmap=True)
    load_seconds = time.perf_counter() - start
    n_edges = graph.num_edges
    heap = _heap_bytes(rebuild)
    return {
        "graph_store": "arrays",
        **heap,
        "n_passages": n_passages,
        "n_entities": graph.num_entities,
        "n_facts": graph.num_facts,
        "n_nodes": graph.num_nodes,
        "n_edges": n_edges,
        "edge_table_bytes": edge_table_bytes,
        "saved_mb": _disk_mb(folder),
        "save_seconds": round(save_seconds, 3),
        "mmap_load_seconds": round(load_seconds, 3),
        "edges_per_passage": round(n_edges / n_passages, 3),
        "extract_seconds": round(extract_seconds, 3),
        "graph_build_seconds": round(graph_seconds, 3),
        "csr_build_seconds": round(csr_seconds, 3),
        "csr_nnz": int(m.nnz),
        "csr_bytes": csr_bytes,
        "csr_bytes_per_stored_edge": round(csr_bytes / max(1, m.nnz), 2),
        "ppr_query_ms": round(statistics.median(exact_ms), 3),
        "push_query_ms": round(statistics.median(push_ms), 3),
        "ppr_query_cpu_ms": round(statistics.median(exact_cpu_ms), 3),
        "push_query_cpu_ms": round(statistics.median(push_cpu_ms), 3),
        "push_epsilon": pagerank.push_epsilon,
        "push_top21_agreement": sum(agree) / len(agree),
        "baseline_rss_mb": baseline,
        "rss_after_graph_mb": after_graph,
        "peak_rss_mb": _peak_rss_mb(),
    }


# -- worker 3: one retriever ------------------------------------------------------------------------------------


def _run_worker(args: argparse.Namespace) -> dict[str, Any]:
    from llama_index_mhop.bench.benchmarker import Benchmarker
    from llama_index_mhop.bench.context import BenchContext
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.bench.registry import RetrieverSpec, get_retriever_spec
    from llama_index_mhop.stores.defaults import default_chroma_client, default_embed_model
    from llama_index_mhop.stores.vector_index import load_vector_index

    class SharedIndexBenchmarker(Benchmarker):
        """The Benchmarker, handed the shared index built (and timed) by the index worker."""

        def __init__(self, *a: Any, vector_index: Any, shared_seconds: float, collection_name: str,
                     **kw: Any) -> None:
            super().__init__(*a, **kw)
            self._shared_index = vector_index
            self._shared_seconds = shared_seconds
            self._collection_name = collection_name

        def _context(self) -> BenchContext:
            ctx = super()._context()
            if self._shared_index is None:
                return ctx
            shared = BenchContext(ctx.documents, embed_model=ctx.embed_model, chroma_client=ctx.chroma_client,
                                  work_dir=ctx.work_dir, top_k=ctx.top_k, lm=ctx.lm,
                                  collection_name=self._collection_name, show_progress=ctx.show_progress,
                                  vector_index=self._shared_index)
            shared.vector_index_seconds = self._shared_seconds
            return shared

    _set_threads(args.threads)
    load_before = _load_avg()
    spec = get_retriever_spec(args.retriever)
    dataset = load_dataset(args.dataset)
    embed = default_embed_model()
    embed.get_text_embedding("warm-up")
    baseline = _peak_rss_mb()
    client = default_chroma_client(Path(args.chroma))
    # Collections a retriever built in an earlier run would make its index time 0: keep only the shared one.
    for collection in client.list_collections():
        name = getattr(collection, "name", collection)
        if name != args.collection:
            client.delete_collection(name)
    work_dir = Path(args.run_dir)
    shutil.rmtree(work_dir, ignore_errors=True)
    work_dir.mkdir(parents=True)
    vector_index = None
    open_seconds = 0.0
    if spec.needs_index == "vector":
        start = time.perf_counter()
        vector_index = load_vector_index(args.collection, chroma_client=client, embed_model=embed)
        open_seconds = time.perf_counter() - start
    built: list[Any] = []

    def factory(ctx: BenchContext) -> Any:
        built.append(spec.factory(ctx))  # kept to read the retriever's own index statistics afterwards
        return built[-1]

    bench = SharedIndexBenchmarker(
        dataset, {spec.name: RetrieverSpec(spec.name, spec.description, factory, spec.needs_index)},
        k_values=[int(k) for k in args.k.split(",")], embed_model=embed,
        chroma_client=client, work_dir=work_dir, show_progress=False, vector_index=vector_index,
        shared_seconds=args.shared_seconds, collection_name=args.collection,
    )
    result = bench.run()
    run = result["runs"][0]
    if built and hasattr(getattr(built[0], "index", None), "retrieval_state"):
        run["walk_vs_exact"] = _walk_vs_exact(built[0], dataset.questions, [int(k) for k in args.k.split(",")])
        run["exact_vs_hnsw"] = _exact_vs_hnsw(built[0], dataset.questions, [int(k) for k in args.k.split(",")])
    run.update({
        "own_index": _own_index_stats(built[0] if built else None),
        "baseline_rss_mb": baseline,
        "index_open_seconds": round(open_seconds, 3),
        "load_avg_before": load_before,
        "load_avg_after": _load_avg(),
    })
    return {"run": run, "result": result}


def _walk_vs_exact(retriever: Any, questions: list[Any], k_values: list[int]) -> dict[str, Any]:
    """The retriever's PageRank walk against the exact power iteration of the same reset, per benchmark question.

    Each question is retrieved once more with the walk's reset recorded (questions answered by dense retrieval
    alone run no walk); the exact power iteration and a local push of the whole reset then rank the passages from
    that reset. On a large graph the walk goes through the solved dense share (``graph.walk.affine``), on a
    small one by the exact iteration itself.
    """
    import numpy as np
    from llama_index.core.schema import NodeWithScore

    from llama_index_mhop.bench.benchmarker import passage_ids

    push_pagerank = _reference_push()
    state = retriever.index.retrieval_state(damping=retriever.config.damping)
    walk = state.walk
    pagerank, affine = walk.pagerank, walk.affine
    rank, current = walk.rank, []
    walk_ms: list[float] = []

    def recording_rank(seeds: Any, dense: Any, query_vector: Any, passage_weight: float, *args: Any) -> Any:
        start = time.perf_counter()
        ranking = rank(seeds, dense, query_vector, passage_weight, *args)
        walk_ms.append((time.perf_counter() - start) * 1000.0)
        # The solved walk never builds the whole reset; build it here, from every passage's similarity, for the
        # exact iteration to walk from.
        every = dense if dense.scores is not None else state.passage_vectors.search(query_vector)
        current.append(walk.reset(seeds, every, passage_weight))
        return ranking

    walk.rank = recording_rank  # an instance attribute: the class's method is untouched
    recorded: list[tuple[Any, np.ndarray, list[NodeWithScore]]] = []
    try:
        for question in questions:
            current.clear()
            nodes = retriever.retrieve(question.text)
            if current:
                recorded.append((question, current[-1], nodes))
    finally:
        del walk.rank
    if not recorded:
        return {"questions": len(questions), "questions_with_ppr": 0}
    n_passages = len(state.passage_ids)
    position = {pid: i for i, pid in enumerate(state.passage_ids)}
    top = max(k_values)
    same_set, same_order, push_same_set, exact_ms, push_ms = [], [], [], [], []
    recall: dict[str, dict[int, list[float]]] = {"exact": {k: [] for k in k_values}, "walk": {k: [] for k in k_values}}
    for question, reset, nodes in recorded:
        start = time.perf_counter()
        exact = pagerank.run(reset)
        exact_ms.append((time.perf_counter() - start) * 1000.0)
        start = time.perf_counter()
        pushed = push_pagerank(pagerank, reset)
        push_ms.append((time.perf_counter() - start) * 1000.0)
        exact_top = _top(exact[:n_passages], top)
        walked = [position[n.node.node_id] for n in nodes[:top]]  # graph node ids, as state.passage_ids
        same_set.append(set(exact_top) == set(walked))
        same_order.append(exact_top == walked)
        push_same_set.append(set(exact_top) == set(_top(pushed.scores[:n_passages], top)))
        gold = set(question.gold_ids)
        exact_nodes = state.passage_nodes(exact_top)
        exact_ids = passage_ids([NodeWithScore(node=exact_nodes[i]) for i in exact_top])  # dataset ids
        ids = passage_ids(nodes)
        for k in k_values:
            recall["exact"][k].append(100.0 * len(gold & set(exact_ids[:k])) / max(1, len(gold)))
            recall["walk"][k].append(100.0 * len(gold & set(ids[:k])) / max(1, len(gold)))
    return {
        "questions": len(questions),
        "questions_with_ppr": len(recorded),
        "walk": "affine (seeds by push, dense share solved)" if affine is not None else pagerank.method,
        "push_epsilon": pagerank.push_epsilon,
        f"top{top}_same_set": round(sum(same_set) / len(recorded), 4),
        f"top{top}_same_order": round(sum(same_order) / len(recorded), 4),
        f"push_of_whole_reset_top{top}_same_set": round(sum(push_same_set) / len(recorded), 4),
        "walk_ms_p50": round(statistics.median(walk_ms), 3) if walk_ms else None,
        "exact_ms_p50": round(statistics.median(exact_ms), 3),
        "push_of_whole_reset_ms_p50": round(statistics.median(push_ms), 3),
        "affine_basis_seconds": None if affine is None else round(affine.build_seconds, 3),
        "affine_basis_iterations": None if affine is None else affine.iterations,
        "affine_basis_mb": None if affine is None else round(affine.nbytes / 2**20, 1),
        "recall_on_ppr_questions": {method: {f"recall@{k}": round(statistics.mean(v), 2) for k, v in per_k.items()}
                                    for method, per_k in recall.items()},
    }


def _exact_vs_hnsw(retriever: Any, questions: list[Any], k_values: list[int]) -> dict[str, Any]:
    """Exact dense scoring of every fact and passage against Chroma's HNSW search, on the benchmark questions.

    The retriever answers every question twice, from a retrieval state that scores all vectors exactly and from
    one that searches both collections' HNSW indexes (``graph.state.DenseVectors``), whatever the index's size; the
    top-``max(k)`` sets, recall and latency are compared.
    """
    from llama_index_mhop.bench.benchmarker import passage_ids
    from llama_index_mhop.graph.state_load import load_retrieval_state
    from llama_index_mhop.graph.walk import WalkSettings

    index = retriever.index
    top = max(k_values)
    ranked: dict[str, list[list[str]]] = {}
    latency: dict[str, list[float]] = {}
    recall: dict[str, dict[int, list[float]]] = {}
    for method, threshold in (("exact", 2**62), ("hnsw", 1)):
        walk = WalkSettings(hnsw_min_facts=threshold, hnsw_min_passages=threshold)
        state = load_retrieval_state(index.graph, index.stores, retriever.config.damping, walk)
        index.retrieval_state = lambda damping, s=state: s  # an instance attribute: the class's method is untouched
        ranked[method], latency[method], recall[method] = [], [], {k: [] for k in k_values}
        try:
            for question in questions:
                start = time.perf_counter()
                nodes = retriever.retrieve(question.text)
                latency[method].append((time.perf_counter() - start) * 1000.0)
                ids = passage_ids(nodes)
                ranked[method].append(ids[:top])
                for k in k_values:
                    recall[method][k].append(100.0 * len(set(question.gold_ids) & set(ids[:k]))
                                             / max(1, len(question.gold_ids)))
        finally:
            del index.retrieval_state
    same = [set(a) == set(b) for a, b in zip(ranked["exact"], ranked["hnsw"], strict=True)]
    overlap = [len(set(a) & set(b)) / max(1, len(a)) for a, b in zip(ranked["exact"], ranked["hnsw"], strict=True)]
    return {
        "questions": len(questions),
        f"top{top}_same_set": round(sum(same) / len(same), 4),
        f"top{top}_overlap_mean": round(statistics.mean(overlap), 4),
        "latency_ms_p50": {m: round(statistics.median(v), 3) for m, v in latency.items()},
        "recall": {m: {f"recall@{k}": round(statistics.mean(v), 2) for k, v in per_k.items()}
                   for m, per_k in recall.items()},
    }


def _probe_worker(args: argparse.Namespace) -> dict[str, Any]:
    """Embedding throughput and token counts of the synthetic passages and of a real corpus, side by side."""
    from llama_index.core.schema import MetadataMode

    from llama_index_mhop.bench.context import passage_documents
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.stores.defaults import default_embed_model

    _set_threads(args.threads)
    embed = default_embed_model()
    embed.get_text_embedding("warm-up")
    tokenizer = getattr(getattr(embed, "_model", None), "tokenizer", None)
    out: dict[str, Any] = {"load_avg_before": _load_avg()}
    for label, folder in (("synthetic", args.dataset), ("reference", args.reference)):
        documents = passage_documents(load_dataset(folder).passages)
        step = max(1, len(documents) // EMBED_PROBE_PASSAGES)
        texts = [d.get_content(metadata_mode=MetadataMode.EMBED) for d in documents[::step][:EMBED_PROBE_PASSAGES]]
        start = time.perf_counter()
        embed.get_text_embedding_batch(texts)
        seconds = time.perf_counter() - start
        tokens = [len(tokenizer(t)["input_ids"]) for t in texts] if tokenizer is not None else []
        out[label] = {
            "dataset": str(folder),
            "passages": len(texts),
            "passages_per_s": round(len(texts) / seconds, 2),
            "mean_words": round(sum(len(t.split()) for t in texts) / len(texts), 1),
            "mean_tokens": round(sum(tokens) / len(tokens), 1) if tokens else None,
            "share_truncated_at_256_tokens": round(sum(n > 256 for n in tokens) / len(tokens), 3) if tokens else None,
        }
    out["load_avg_after"] = _load_avg()
    return out


def _own_index_stats(retriever: Any) -> dict[str, Any]:
    """What a retriever with an index of its own reports about it: phase times and graph size (when it has them)."""
    index = getattr(retriever, "index", None) or getattr(retriever, "_index", None)
    stats: dict[str, Any] = {}
    phases = getattr(index, "build_seconds", None)
    if isinstance(phases, dict):
        stats["build_seconds_by_phase"] = {k: round(float(v), 3) for k, v in phases.items()}
    stores = getattr(index, "stores", None)
    if stores is not None and hasattr(stores, "short_text_dtype"):
        from llama_index_mhop.stores.embed_dtype import native_bfloat16

        stats["short_text_dtype"] = stores.short_text_dtype
        stats["native_bfloat16"] = native_bfloat16()
    graph = getattr(index, "graph", None)
    if graph is not None and hasattr(graph, "num_edges"):
        stats.update({"n_passages": graph.num_passages, "n_entities": graph.num_entities,
                      "n_facts": graph.num_facts, "n_nodes": graph.num_nodes, "n_edges": graph.num_edges})
    counts = getattr(index, "counts", None)
    if callable(counts):
        try:
            stats["store_counts"] = counts()
        except Exception as exc:  # statistics only: never fail a finished run over them
            stats["store_counts_error"] = str(exc)
    return stats


WORKERS = {"index": _index_worker, "graph": _graph_worker, "run": _run_worker, "probe": _probe_worker}


def _worker_main(args: argparse.Namespace) -> int:
    try:
        payload = WORKERS[args.worker](args)
    except Exception as exc:  # the parent records the failure and goes on with the next step
        payload = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        _write(Path(args.result_file), payload)
        return 1
    _write(Path(args.result_file), payload)
    return 0


# -- the parent: generate, spawn, merge, plot -------------------------------------------------------------------


def _spawn(worker: str, log: Path, result_file: Path, timeout: float, extra: list[str]) -> dict[str, Any]:
    """Run one worker subprocess (its own memory), wait at most ``timeout`` seconds, return its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", worker, "--result-file", str(result_file),
           *extra]
    result_file.unlink(missing_ok=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        process = subprocess.Popen(cmd, stdout=handle, stderr=subprocess.STDOUT, cwd=ROOT)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return {"error": f"timed out after {timeout:.0f} s", "wall_seconds": round(time.perf_counter() - started)}
    if not result_file.is_file():
        return {"error": f"worker exited with code {process.returncode} and no result (see {log})"}
    data = json.loads(result_file.read_text(encoding="utf-8"))
    data["wall_seconds"] = round(time.perf_counter() - started, 1)
    return data


def _command_line(argv: list[str]) -> str:
    return "python benchmarks/scale.py " + " ".join(argv)


def _machine() -> dict[str, Any]:
    from importlib import metadata

    versions = {}
    for package in ("llama-index-core", "chromadb", "torch", "numpy", "scipy", "networkx", "bm25s"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {"platform": platform.platform(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "packages": versions}


def _load_summary(path: Path) -> dict[str, Any]:
    if path.is_file():
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            pass
    return {"benchmark": "scale", "sizes": []}


def _size_entry(summary: dict[str, Any], size: int) -> dict[str, Any]:
    for entry in summary["sizes"]:
        if entry["n_passages"] == size:
            return entry
    entry = {"n_passages": size, "runs": []}
    summary["sizes"].append(entry)
    summary["sizes"].sort(key=lambda e: e["n_passages"])
    return entry


def run_size(size: int, args: argparse.Namespace, argv: list[str], summary: dict[str, Any]) -> None:
    from llama_index_mhop.bench.synthetic import generate_dataset

    work = Path(args.work_dir) / f"n{size}"
    data_dir = work / "data"
    chroma_dir = work / "chroma"
    logs = work / "logs"
    generated = generate_dataset(size, n_questions=args.questions, seed=args.seed)
    generated.write(data_dir)
    entry = _size_entry(summary, size)
    entry.update({"n_questions": args.questions, "seed": args.seed, "n_chain_passages": generated.n_chain_passages,
                  "dataset_dir": str(data_dir)})
    entry.setdefault("commands", [])
    if _command_line(argv) not in entry["commands"]:
        entry["commands"].append(_command_line(argv))
    common = ["--dataset", str(data_dir), "--threads", str(args.threads)]
    print(f"[{size}] dataset written ({generated.n_chain_passages} chain passages)", flush=True)

    if not args.skip_graph:
        stats = _spawn("graph", logs / "graph.log", work / "graph.json", args.timeout, common)
        entry["graph"] = stats
        print(f"[{size}] graph: {json.dumps({k: stats.get(k) for k in ('n_edges', 'edges_per_passage', 'error')})}",
              flush=True)

    from llama_index_mhop.bench.registry import get_retriever_spec, registered_retrievers

    known = registered_retrievers()
    wanted = [name for name in args.retrievers.split(",") if name]
    missing = [name for name in wanted if name not in known]
    if missing:
        print(f"[{size}] not registered, skipped: {missing}", flush=True)
        entry["not_registered"] = missing
    wanted = [name for name in wanted if name in known]
    needs_vector = any(get_retriever_spec(name).needs_index == "vector" for name in wanted)
    index = entry.get("index")
    stale = not index or "error" in index or index.get("collection_name") != _collection_name(data_dir)
    if needs_vector and (args.rebuild_index or stale or not chroma_dir.is_dir()):
        index = _spawn("index", logs / "index.log", work / "index.json", args.timeout,
                       [*common, "--chroma", str(chroma_dir)])
        entry["index"] = index
        print(f"[{size}] shared index: {index.get('build_seconds')} s, peak {index.get('peak_rss_mb')} MB "
              f"{index.get('error', '')}", flush=True)
        _save(summary, args)
    collection = (index or {}).get("collection_name") or _collection_name(data_dir)
    for name in wanted:
        if get_retriever_spec(name).needs_index == "vector" and (not index or "error" in index):
            continue
        data = _spawn("run", logs / f"run-{name}.log", work / f"run-{name}.json", args.timeout,
                      [*common, "--chroma", str(chroma_dir), "--retriever", name, "--collection", collection,
                       "--shared-seconds", str((index or {}).get("build_seconds", 0.0)), "--k", args.k,
                       "--run-dir", str(work / "runs" / name)])
        run = data.get("run") or {"name": name, "error": data.get("error"), "wall_seconds": data.get("wall_seconds")}
        run["wall_seconds"] = data.get("wall_seconds")
        entry["runs"] = [r for r in entry["runs"] if r.get("name") != name] + [run]
        if "result" in data:
            _save_size_result(Path(args.out).with_name(f"{Path(args.out).stem}-{size}.json"), entry, data["result"])
        metrics = run.get("metrics", {})
        print(f"[{size}] {name}: index {run.get('index_seconds')} s, p50 {run.get('latency_ms_p50')} ms, "
              f"peak {run.get('peak_rss_mb')} MB, recall@5 {metrics.get('recall@5')}, "
              f"all_gold@21 {metrics.get('all_gold@21')} {run.get('error') or ''}", flush=True)
        _save(summary, args)


def _save_size_result(path: Path, entry: dict[str, Any], result: dict[str, Any]) -> None:
    """The size's runs as one result file in the ``mhop bench`` schema (validated)."""
    from llama_index_mhop.bench.benchmarker import save_json

    runs = [r for r in entry["runs"] if "metrics" in r]
    out = {**result, "dataset": f"synthetic-{entry['n_passages']}", "runs": runs}
    out.pop("source", None)
    save_json(out, path)


def _save(summary: dict[str, Any], args: argparse.Namespace) -> None:
    summary.update({
        "benchmark": "scale",
        "description": "cost and recall against corpus size on the synthetic multi-hop corpus; every step in its "
                       "own subprocess (peak_rss_mb is that step's ru_maxrss)",
        "k_values": [int(k) for k in args.k.split(",")],
        "torch_threads": args.threads,
        "embed_model": "all-MiniLM-L6-v2",
        "updated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
    })
    _write(Path(args.out), summary)


def plot(summary: dict[str, Any], path: Path) -> Path:
    """Index seconds, p50 latency, peak RSS and recall@21 against corpus size (log x), one line per retriever.

    The shared index build (dashed) and the LLM-free graph process (dotted) are drawn in the index and memory panels.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(14, 4), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.subplots(1, 4)
    panels = (("index_seconds", "index time (s)", "log"), ("latency_ms_p50", "p50 query latency (ms)", "log"),
              ("peak_rss_mb", "peak RSS of the process (MB)", "linear"), ("recall@21", "recall@21 (%)", "pct"))
    sizes = summary["sizes"]
    names: list[str] = []
    for entry in sizes:
        for run in entry["runs"]:
            if "metrics" in run and run["name"] not in names:
                names.append(run["name"])
    markers = "osD^vP*X"
    for ax, (key, label, scale) in zip(axes, panels, strict=True):
        for position, name in enumerate(names):
            xs, ys = [], []
            for entry in sizes:
                run = next((r for r in entry["runs"] if r.get("name") == name and "metrics" in r), None)
                if run is not None:
                    xs.append(entry["n_passages"])
                    ys.append(run["metrics"][key] if key.startswith("recall") else run[key])
            ax.plot(xs, ys, marker=markers[position % len(markers)], label=name)
        extra = {"index_seconds": [("index", "build_seconds", "shared vector index build", "--")],
                 "peak_rss_mb": [("index", "peak_rss_mb", "shared vector index build", "--"),
                                 ("graph", "peak_rss_mb", "LLM-free graph (no embedder)", ":")]}.get(key, [])
        for part, field, text, style in extra:
            points = [(e["n_passages"], e[part][field]) for e in sizes if field in e.get(part, {})]
            if points:
                ax.plot(*zip(*points, strict=True), linestyle=style, color="black", marker=".", label=text)
        ax.set_xscale("log")
        if scale == "log":
            ax.set_yscale("log")
        elif scale == "pct":
            ax.set_ylim(0, 100)
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlabel("passages")
        ax.set_title(label, fontsize="medium")
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize="x-small", loc="upper left")
    # The memory panel's legend names only its two black process lines; the retrievers are named in the first.
    handles, labels = axes[2].get_legend_handles_labels()
    own = [(h, label) for h, label in zip(handles, labels, strict=True) if label not in names]
    if own:
        axes[2].legend(*zip(*own, strict=True), fontsize="x-small", loc="upper left")
    figure.suptitle("synthetic multi-hop corpus: cost and recall against corpus size "
                    "(all-MiniLM-L6-v2, 1 torch thread, shared 2-core machine)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES),
                        help="corpus sizes in passages, comma-separated")
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--retrievers", default=",".join(DEFAULT_RETRIEVERS),
                        help="registered retriever names; unregistered ones are reported and skipped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--k", default=",".join(str(k) for k in DEFAULT_K_VALUES), help="k values")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per process (0: torch's default)")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds before a step is killed")
    parser.add_argument("--work-dir", default=str(DEFAULT_WORK_DIR), help="datasets, Chroma stores and logs")
    parser.add_argument("--out", default=str(DEFAULT_OUT))
    parser.add_argument("--plot", default=str(DEFAULT_PLOT))
    parser.add_argument("--rebuild-index", action="store_true",
                        help="embed the corpus again even when this size's shared index is recorded")
    parser.add_argument("--skip-graph", action="store_true", help="do not measure the LLM-free graph")
    parser.add_argument("--reference", default=str(DEFAULT_REFERENCE),
                        help="a real corpus to compare graph density and embedding cost with ('' to skip)")
    # Internal: the subprocess steps.
    parser.add_argument("--worker", choices=sorted(WORKERS), help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    parser.add_argument("--dataset", help=argparse.SUPPRESS)
    parser.add_argument("--chroma", help=argparse.SUPPRESS)
    parser.add_argument("--retriever", help=argparse.SUPPRESS)
    parser.add_argument("--collection", help=argparse.SUPPRESS)
    parser.add_argument("--shared-seconds", type=float, default=0.0, help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    if args.worker:
        return _worker_main(args)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    summary = _load_summary(Path(args.out))
    reference = Path(args.reference) if args.reference else None
    if reference is not None and reference.is_dir() and sizes and (args.rebuild_index or "reference" not in summary):
        from llama_index_mhop.bench.synthetic import write_dataset

        work = Path(args.work_dir) / "reference"
        sample = write_dataset(work / "synthetic-1000", 1000, n_questions=args.questions, seed=args.seed)
        summary["reference"] = {
            "graph": _spawn("graph", work / "graph.log", work / "graph.json", args.timeout,
                            ["--dataset", str(reference)]),
            "embedding": _spawn("probe", work / "probe.log", work / "probe.json", args.timeout,
                                ["--dataset", str(sample), "--reference", str(reference),
                                 "--threads", str(args.threads)]),
        }
        print(f"[reference] {json.dumps(summary['reference'])[:600]}", flush=True)
        _save(summary, args)
    for size in sizes:
        run_size(size, args, argv, summary)
    _save(summary, args)
    plot(summary, Path(args.plot))
    print(f"wrote {args.out} and {args.plot}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
