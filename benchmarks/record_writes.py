"""What a graph index's entity and fact records cost to write to Chroma, with and without document and metadata.

A synthetic corpus (``bench.synthetic``) runs through the LLM-free OpenIE and the index's own content ids
(``corpus_works`` of ``short_text_dtype.py``); its distinct entity names and facts are then written to a fresh
persistent Chroma store in batches of ``CHROMA_BATCH``, two ways, alternating for ``--rounds`` rounds so both meet
the same machine:

- ``with_text``: each record as the index wrote it before: the text as the document, and metadata (an entity's
  name; a fact's subject, predicate, object and the two entity ids);
- ``vectors_only``: id and vector alone, as ``GraphStores`` writes them now (the graph holds the texts).

Both write the same ids and the same vectors (random unit vectors of the embedder's 384 dimensions: embedding is
not what is measured). Reported: seconds and records per second of each, the ratio, and each store's size on disk.

Usage:
    python benchmarks/record_writes.py [--passages 10000] [--rounds 3]
        [--out benchmarks/results/record_writes.json]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from result_file import measured_on, write_result
from short_text_dtype import corpus_works

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "record_writes.json"
DIMENSIONS = 384  # all-MiniLM-L6-v2, the embedded default
WAYS = ("with_text", "vectors_only")


def _records(corpus: dict[str, list[str]]) -> dict[str, dict[str, list[Any]]]:
    """The corpus's entity and fact records, both ways: ids, documents and metadatas as each way writes them."""
    from llama_index_mhop.graph.graph_stores import fact_text

    entities: dict[str, str] = {}
    facts: dict[str, tuple[str, str, str]] = {}
    fact_nodes: dict[str, tuple[str, str, str]] = {}
    for work in corpus_works(corpus):
        entities.update(work.entry.entities)
        facts.update(work.fact_texts)
        fact_nodes.update(work.entry.facts)
    return {
        "entities": {"ids": list(entities), "documents": list(entities.values()),
                     "metadatas": [{"name": name} for name in entities.values()]},
        "facts": {"ids": list(facts), "documents": [fact_text(*keys) for keys in facts.values()],
                  "metadatas": [{"subject": s, "predicate": p, "object": o, "subject_id": fact_nodes[f][0],
                                 "object_id": fact_nodes[f][2]} for f, (s, p, o) in facts.items()]},
    }


def _write(path: Path, records: dict[str, dict[str, list[Any]]], vectors: dict[str, np.ndarray], way: str) -> float:
    """Seconds to write every record into a new persistent store at ``path``, one collection a kind."""
    import chromadb
    from chromadb.config import Settings

    from llama_index_mhop.stores.chroma_batches import CHROMA_BATCH

    client = chromadb.PersistentClient(path=str(path), settings=Settings(anonymized_telemetry=False))
    start = time.perf_counter()
    for kind, fields in records.items():
        collection = client.get_or_create_collection(f"records_{kind}", metadata={"hnsw:space": "cosine"})
        for first in range(0, len(fields["ids"]), CHROMA_BATCH):
            window = slice(first, first + CHROMA_BATCH)
            text = {"documents": fields["documents"][window], "metadatas": fields["metadatas"][window]}
            collection.upsert(ids=fields["ids"][window], embeddings=vectors[kind][window],
                              **(text if way == "with_text" else {}))
    return time.perf_counter() - start


def _disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)


    from llama_index_mhop.bench.synthetic import generate_dataset

    records = _records(generate_dataset(args.passages, n_questions=1, seed=args.seed).corpus)
    rng = np.random.default_rng(args.seed)
    vectors = {}
    for kind, fields in records.items():
        rows = rng.standard_normal((len(fields["ids"]), DIMENSIONS)).astype(np.float32)
        vectors[kind] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    total = sum(len(fields["ids"]) for fields in records.values())

    seconds: dict[str, list[float]] = {way: [] for way in WAYS}
    disk: dict[str, int] = {}
    load = [os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="record-writes-"))
    try:
        for round_ in range(args.rounds):
            for way in WAYS:
                # a new path each time: Chroma keeps one system per path in a process, open on deleted files
                path = work / f"{way}-{round_}"
                seconds[way].append(_write(path, records, vectors, way))
                disk[way] = _disk_bytes(path)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load.append(os.getloadavg())

    median = {way: statistics.median(seconds[way]) for way in WAYS}
    result: dict[str, Any] = {
        "passages": args.passages, "seed": args.seed, "rounds": args.rounds,
        "records": {kind: len(fields["ids"]) for kind, fields in records.items()},
        "records_per_second": {way: round(total / median[way], 1) for way in WAYS},
        "speed_ratio_vectors_only": round(median["with_text"] / median["vectors_only"], 3),
        "disk_mb": {way: round(disk[way] / 1e6, 1) for way in WAYS},
        "seconds": seconds,
        **measured_on(load, "chromadb"),
    }
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
