"""Where each flow's query time goes, step by step, LLM-free, against ``vector`` measured in the same run.

Every registered retriever named is built over one dataset (``mhop bench``'s shared Chroma index and graph) and
asked every question for ``--rounds`` rounds, the retrievers interleaved per question so that all see the same
machine load. Each step is timed where the flows call it (a wrapper on the function or method, counting only
the outermost call of a step, so a step that calls itself is not counted twice; a step written as a flow, a
generator, is timed from its start to its return, the requests it yields included):

- query embedding: the embedder's query path (one query, or a round's batch);
- chroma: Chroma queries (LlamaIndex's vector store's, a round's together, or the collection's own) with the
  version check around them;
- passage table read, title lookups: the LLM-free flows' table of the passages (read once a collection version)
  and their lookups of a named entity's passages in it;
- perspective rules, bridge linking, fusion: seed 000's LLM-free perspectives, bridge hops and RRF;
- confidence rules: seed 001's entity chains, confidence check, gap queries and listwise rerank;
- graph: the graph retriever's fact scoring (``_candidates``), fact filter (``HippoGraphModule._recognition``, its
  LM step included) and walk (``_rank``).

Each query's calls are counted too (``calls_per_query``): embedder calls (the outermost calls of the query
embedding step, a round's batch one call) and Chroma collection queries (``Collection.query``, every call).

Steps nest only where one flow's step calls another's (bridge linking reads passage views, say), never a step
in itself. ``other`` is a query's time outside every step: the retriever's own Python, LlamaIndex's dispatch.

Usage:
    python benchmarks/flow_steps.py --dataset ../shared/datasets/hotpotqa-100 \\
        --retrievers vector,rrf_fusion,confidence_loop,hippo_graph [--limit 100] [--rounds 1] [--threads 2] \\
        [--work-dir .mhop/bench] --out benchmarks/results/flow-steps.json
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from result_file import measured_on, write_result

#: step: the places it is timed, as (module, attribute path).
STEPS: dict[str, list[tuple[str, str]]] = {
    "query embedding": [("llama_index.core.base.embeddings.base", "BaseEmbedding.get_query_embedding"),
                        ("llama_index_mhop.stores.search", "embed_queries")],
    "chroma": [("llama_index.vector_stores.chroma.base", "ChromaVectorStore.query"),
               ("llama_index_mhop.stores.search", "GuardedChromaVectorStore._query_together"),
               ("llama_index_mhop.stores.search", "VersionMarker.read_whole"),
               ("chromadb.api.models.Collection", "Collection.query")],
    "passage table read": [("llama_index_mhop.stores.passage_table", "PassageTable.read")],
    "title lookups": [("llama_index_mhop.stores.passage_table", "PassageTable.about"),
                      ("llama_index_mhop.stores.passage_table", "FoundQuestion.looked_up"),
                      ("llama_index_mhop.components.rrf_fusion", "closest")],
    "perspective rules": [("llama_index_mhop.components.rrf_fusion", "heuristic_perspectives"),
                          ("llama_index_mhop.components.rrf_fusion", "lookup_perspectives")],
    "bridge linking": [("llama_index_mhop.components.rrf_fusion", "link_passages")],
    "fusion": [("llama_index_mhop.components.rrf_fusion", "anchored_fusion"),
               ("llama_index_mhop.components.rrf_fusion", "reciprocal_rank_fusion")],
    "confidence rules": [("llama_index_mhop.components.confidence_loop", name) for name in
                         ("analyze_query", "assess_confidence", "targeted_queries", "listwise_rerank")],
    "graph fact scoring": [("llama_index_mhop.components.hippo_graph", "HippoGraphModule._candidates")],
    "graph fact filter": [("llama_index_mhop.components.hippo_graph", "HippoGraphModule._recognition")],
    "graph walk": [("llama_index_mhop.components.hippo_graph", "HippoGraphModule._rank")],
}


#: counted (not timed) calls: name -> the places counted, every call.
COUNTED: dict[str, list[tuple[str, str]]] = {
    "chroma collection queries": [("chromadb.api.models.Collection", "Collection.query")],
}
#: the timed step whose outermost calls are counted too, by the name they are reported under.
COUNTED_STEPS = {"embedder calls": "query embedding"}


class StepClock:
    """Milliseconds per step of the query running now, the outermost call of each step counted."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._depth: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()

    @contextmanager
    def _timing(self, step: str) -> Iterator[None]:
        with self._lock:
            self._depth[step] += 1
            outermost = self._depth[step] == 1
        start = time.perf_counter()
        try:
            yield
        finally:
            elapsed = (time.perf_counter() - start) * 1000.0
            with self._lock:
                self._depth[step] -= 1
                if outermost:
                    self.ms[step] += elapsed
                    self.calls[step] += 1

    def wrap(self, step: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._timing(step):
                return function(*args, **kwargs)

        def timed_flow(*args: Any, **kwargs: Any) -> Any:
            with self._timing(step):
                return (yield from function(*args, **kwargs))

        wrapper = timed_flow if inspect.isgeneratorfunction(function) else timed
        wrapper.__wrapped__ = function  # type: ignore[attr-defined]
        return wrapper

    def count(self, name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls[name] += 1
            return function(*args, **kwargs)

        counted.__wrapped__ = function  # type: ignore[attr-defined]
        return counted

    def install(self) -> list[str]:
        """Wrap every step's places; returns the places that do not exist in this version of the code."""
        missing = []
        for step, places in [*STEPS.items(), *COUNTED.items()]:
            for module_name, path in places:
                try:
                    owner: Any = importlib.import_module(module_name)
                except ModuleNotFoundError:  # an older version of the package, measured for comparison
                    missing.append(f"{module_name}:{path}")
                    continue
                *parents, name = path.split(".")
                for parent in parents:
                    owner = getattr(owner, parent)
                if not hasattr(owner, name):
                    missing.append(f"{module_name}:{path}")
                    continue
                wrap = self.count if step in COUNTED else self.wrap
                setattr(owner, name, wrap(step, getattr(owner, name)))
        return missing

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        """The query's milliseconds by step and its counted calls, both cleared."""
        out, self.ms = dict(self.ms), defaultdict(float)
        calls, self.calls = dict(self.calls), defaultdict(int)
        return out, {name: calls.get(COUNTED_STEPS.get(name, name), 0) for name in [*COUNTED_STEPS, *COUNTED]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--retrievers", default="vector,rrf_fusion,confidence_loop,hippo_graph")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--rounds", type=int, default=1,
                        help="times each question is asked; past the first, its query vectors are kept ones")
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    parser.add_argument("--work-dir", type=Path, default=Path(".mhop/bench"))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from llama_index_mhop.bench.context import BenchContext, passage_documents
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.bench.registry import get_retriever_spec
    from llama_index_mhop.stores.defaults import default_chroma_client, default_embed_model

    dataset = load_dataset(args.dataset, limit=args.limit)
    names = args.retrievers.split(",")
    context = BenchContext(passage_documents(dataset.passages), embed_model=default_embed_model(),
                           chroma_client=default_chroma_client(args.work_dir / "chroma"), work_dir=args.work_dir,
                           top_k=21)
    clock = StepClock()
    missing = clock.install()  # before the retrievers are built: a program keeps the steps it is handed
    retrievers = {name: get_retriever_spec(name).factory(context) for name in names}
    load = [os.getloadavg()]
    for retriever in retrievers.values():  # warm-up: model, caches, the graph's state
        retriever.retrieve(dataset.questions[0].text)
    clock.take()

    totals: dict[str, list[float]] = defaultdict(list)
    steps: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in names}
    calls: dict[str, dict[str, list[int]]] = {name: defaultdict(list) for name in names}
    for _ in range(args.rounds):
        for question in dataset.questions:
            for name, retriever in retrievers.items():
                start = time.perf_counter()
                retriever.retrieve(question.text)
                total = (time.perf_counter() - start) * 1000.0
                taken, counted = clock.take()
                totals[name].append(total)
                for counter, n in counted.items():
                    calls[name][counter].append(n)
                for step in STEPS:
                    steps[name][step].append(taken.get(step, 0.0))
                steps[name]["other"].append(max(0.0, total - sum(taken.values())))

    load.append(os.getloadavg())
    vector_p50 = statistics.median(totals["vector"]) if "vector" in totals else None
    result: dict[str, Any] = {
        "dataset": args.dataset, "questions": len(dataset.questions), "rounds": args.rounds,
        "threads": args.threads, "untimed_places": missing,
        **measured_on(load, "torch", "chromadb", "llama-index-core"),
        "retrievers": {},
    }
    for name in names:
        p50 = statistics.median(totals[name])
        result["retrievers"][name] = {
            "p50_ms": round(p50, 2),
            "mean_ms": round(statistics.fmean(totals[name]), 2),
            "x_vector_p50": round(p50 / vector_p50, 2) if vector_p50 else None,
            "mean_ms_by_step": {step: round(statistics.fmean(v), 2) for step, v in steps[name].items()
                                if any(v)},
            "calls_per_query": {counter: {"mean": round(statistics.fmean(v), 2), "min": min(v), "max": max(v)}
                                for counter, v in calls[name].items()},
        }
    for name, row in result["retrievers"].items():
        parts = ", ".join(f"{s} {ms}" for s, ms in sorted(row["mean_ms_by_step"].items(), key=lambda x: -x[1]))
        counts = ", ".join(f"{c} {v['mean']}" for c, v in row["calls_per_query"].items())
        print(f"{name:18s} p50 {row['p50_ms']:8.1f} ms  x{row['x_vector_p50']}  ({parts}; per query: {counts})")
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
