"""The time of taking passages out of a large graph in one change, as a sync that deletes documents does.

Opens the graph of a ``benchmarks/graph_probe.py`` build (``<work-dir>/graph/hippo_graph``) and removes
``--passages`` of its passages (a seeded sample) the way a sync's removal does, then reports the seconds, the
entities and facts removed with them, and the synonym lists left. Run it from two checkouts (``PYTHONPATH``) to
compare two versions of the code on the same save; a checkout without ``KnowledgeGraph.remove_passages`` removes
them one call at a time.

Usage:
    python benchmarks/graph_remove.py --work-dir /work/runs/probe-300k --passages 1000 \\
        --out benchmarks/results/graph-remove-300000.json
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path

from result_file import measured_on, write_result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a graph_probe.py build folder")
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import llama_index_mhop
    from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph

    load = [os.getloadavg()]
    start = time.perf_counter()
    graph = KnowledgeGraph.load(args.work_dir / "graph" / "hippo_graph", mmap=True)
    load_seconds = time.perf_counter() - start
    chosen = random.Random(args.seed).sample(sorted(graph.passages), args.passages)
    start = time.perf_counter()
    if hasattr(graph, "remove_passages"):
        entities, facts = graph.remove_passages(chosen)
    else:
        entities, facts = [], []
        for passage_id in chosen:
            removed = graph.remove_passage(passage_id)
            entities += removed[0]
            facts += removed[1]
    seconds = time.perf_counter() - start
    load.append(os.getloadavg())
    write_result({"package": llama_index_mhop.__file__, "work_dir": str(args.work_dir),
                  **measured_on(load, "numpy"), "load_seconds": round(load_seconds, 1),
                  "passages_removed": len(chosen), "entities_removed": len(entities), "facts_removed": len(facts),
                  "remove_seconds": round(seconds, 2), "stale_synonym_lists": len(graph.stale_synonyms),
                  "synonym_lists": len(graph.synonyms)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
