"""Recall@21 of ``hippo_graph`` in rankings files of ``benchmarks/graph_probe.py`` runs on one build, each compared
with a baseline run question by question (paired permutation test and bootstrap interval,
``llama_index_mhop.bench.significance``).

``graph_probe.py --rankings FILE`` writes each question's top 21 node ids; this script reads the passages' titles
from the build's Chroma store (a copy of it, so the build stays as built) and scores them against the questions'
gold titles.

Usage:
    python benchmarks/rankings_recall.py --work-dir /work/runs/probe-100k --baseline exact.json \\
        hnsw.json hnsw-facts.json --out benchmarks/results/graph-probe-100000-hnsw-recall.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
from pathlib import Path

import graph_probe
from result_file import write_result

from llama_index_mhop.bench.significance import paired_comparison

RETRIEVER = "hippo_graph"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="the graph_probe.py build the runs queried")
    parser.add_argument("--baseline", type=Path, required=True, help="the rankings file the others are compared to")
    parser.add_argument("runs", type=Path, nargs="+", help="rankings files of the runs to compare")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import chromadb

    questions = graph_probe.load_corpus(args.work_dir).questions
    rankings = {path.name: json.loads(path.read_text())[RETRIEVER] for path in [args.baseline, *args.runs]}
    ids = sorted({i for ranking in rankings.values() for top in ranking.values() for i in top})
    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "chroma"
        shutil.copytree(args.work_dir / "chroma", store)
        collection = chromadb.PersistentClient(path=str(store)).get_collection(graph_probe.COLLECTION)
        found = collection.get(ids=ids, include=["metadatas"])
    title = {i: (m or {}).get("title") for i, m in zip(found["ids"], found["metadatas"], strict=True)}

    def recall(top: list[str], gold: list[str]) -> float:
        titles = {title.get(i) for i in top[: graph_probe.TOP_K]}
        return 100.0 * sum(g in titles for g in gold) / len(gold)

    per_question = {name: [recall(ranking[q.qid], q.gold_ids) for q in questions] for name, ranking in rankings.items()}
    baseline = per_question[args.baseline.name]
    result = {
        "work_dir": str(args.work_dir), "retriever": RETRIEVER, "k": graph_probe.TOP_K, "questions": len(questions),
        "baseline": args.baseline.name,
        f"recall@{graph_probe.TOP_K}": {name: round(statistics.fmean(v), 2) for name, v in per_question.items()},
        "against_baseline": {path.name: paired_comparison(per_question[path.name], baseline).as_dict()
                             for path in args.runs},
        "per_question": {name: dict(zip((q.qid for q in questions), v, strict=True))
                         for name, v in per_question.items()},
    }
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
