"""The memory and time of opening a persisted graph and saving it again: what every process that opens the index
(a writer, a sync, the first reader of a save) and the end of every build and every change cost.

Opens the graph of a ``benchmarks/graph_probe.py`` build (``<work-dir>/graph/hippo_graph``, its edge arrays
memory-mapped, as a query worker opens it), then saves it twice into a scratch folder (the second save reads the
first one's array names, as every later save of an index does). Reports the resident set and its high-water mark
(``ru_maxrss``) before the load, after it and after the saves, and the seconds of each. Run it from two checkouts
(``PYTHONPATH``) to compare how two versions of the code hold the same save.

Usage:
    python benchmarks/graph_save.py --work-dir /work/runs/probe-100k --out benchmarks/results/graph-save-100000.json
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

from result_file import write_result


def _memory() -> dict[str, float]:
    with open("/proc/self/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return {"rss_mb": round(rss_kb / 1024, 1),
            "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="a graph_probe.py build folder")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import llama_index_mhop
    from llama_index_mhop.graph.knowledge_graph import KnowledgeGraph

    started = _memory()
    start = time.perf_counter()
    graph = KnowledgeGraph.load(args.work_dir / "graph" / "hippo_graph", mmap=True)
    load_seconds = time.perf_counter() - start
    opened = _memory()
    with tempfile.TemporaryDirectory() as scratch:
        start = time.perf_counter()
        graph.save(scratch)
        graph.save(scratch)
        seconds = time.perf_counter() - start
    saved = _memory()
    write_result({"work_dir": str(args.work_dir), "passages": graph.num_passages, "edges": graph.num_edges,
                  "package": llama_index_mhop.__file__, "started": started, "opened": opened, "saved twice": saved,
                  "load_seconds": round(load_seconds, 2),
                  "load_growth_mb": round(opened["rss_mb"] - started["rss_mb"], 1),
                  "load_peak_above_started_mb": round(opened["max_rss_mb"] - started["rss_mb"], 1),
                  "peak_above_opened_mb": round(saved["max_rss_mb"] - opened["rss_mb"], 1),
                  "two_saves_seconds": round(seconds, 2)}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
