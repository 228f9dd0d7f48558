"""The graph index's short texts (entity names and facts) embedded in float32 and in bfloat16, side by side.

A synthetic corpus (``bench.synthetic``) runs through the LLM-free OpenIE and the indexing pipeline's own content
ids (``graph.indexing.passage_work``); its distinct entity names and facts are then embedded by
``GraphStores.embed(short=True)``, the call the index makes, once per ``short_text_dtype``, alternating for
``--rounds`` rounds so both meet the same machine. Reported: texts per second, the speed ratio, the cosine of
each bfloat16 vector to its float32 one, and how often a question's top facts (exact dot products with its
float32 query embedding, as the retriever's fact scores) are the same set and order under both.

Usage:
    python benchmarks/short_text_dtype.py [--passages 3000] [--questions 50] [--rounds 2] [--threads 1]
        [--out benchmarks/results/short_text_dtype.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from result_file import measured_on, write_result

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "short_text_dtype.json"
TOP_FACTS = 5  # the retriever's default linking_top_k


def corpus_works(corpus: dict[str, list[str]]) -> Iterator[Any]:
    """Each passage of a synthetic corpus through the LLM-free OpenIE and the index's own content ids
    (``graph.indexing.PassageWork``)."""
    from llama_index.core.schema import TextNode

    from llama_index_mhop.graph.extraction import extract_llm_free
    from llama_index_mhop.graph.indexing import passage_work

    for title, sentences in corpus.items():
        text = " ".join(sentences)
        yield passage_work(TextNode(text=text, metadata={"title": title}), extract_llm_free(text, title))


def _short_texts(corpus: dict[str, list[str]]) -> tuple[list[str], list[str]]:
    """The corpus's distinct entity names and fact texts, as the index would embed them."""
    from llama_index_mhop.graph.graph_stores import fact_text

    entities: dict[str, str] = {}
    facts: dict[str, str] = {}
    for work in corpus_works(corpus):
        entities.update(work.entry.entities)
        facts.update({fact_id: fact_text(*keys) for fact_id, keys in work.fact_texts.items()})
    return list(entities.values()), list(facts.values())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--questions", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import chromadb
    import torch

    from llama_index_mhop.bench.synthetic import generate_dataset
    from llama_index_mhop.graph.graph_stores import DEFAULT_SHORT_TEXT_BATCH_SIZE, GraphStores
    from llama_index_mhop.stores.defaults import default_embed_model
    from llama_index_mhop.stores.embed_dtype import native_bfloat16

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dataset = generate_dataset(args.passages, n_questions=args.questions, seed=args.seed)
    entities, facts = _short_texts(dataset.corpus)
    embed = default_embed_model()
    embed.get_text_embedding("warm-up")
    client = chromadb.EphemeralClient()
    stores = {dtype: GraphStores(client, f"short_{dtype}", embed, DEFAULT_SHORT_TEXT_BATCH_SIZE, "external",
                                 short_text_dtype=dtype) for dtype in ("float32", "bfloat16")}
    seconds: dict[str, dict[str, list[float]]] = {d: {"entities": [], "facts": []} for d in stores}
    vectors: dict[str, dict[str, np.ndarray]] = {d: {} for d in stores}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for dtype, store in stores.items():
            for kind, texts in (("entities", entities), ("facts", facts)):
                start = time.perf_counter()
                vectors[dtype][kind] = store.embed(texts, short=True)
                seconds[dtype][kind].append(time.perf_counter() - start)
    load.append(os.getloadavg())

    queries = np.asarray(embed.get_text_embedding_batch([q["question"] for q in dataset.questions]),
                         dtype=np.float32)
    tops = {d: np.argsort(-(vectors[d]["facts"] @ queries.T), axis=0, kind="stable")[:TOP_FACTS].T for d in stores}
    same_set = [set(a) == set(b) for a, b in zip(tops["float32"], tops["bfloat16"], strict=True)]
    same_order = [list(a) == list(b) for a, b in zip(tops["float32"], tops["bfloat16"], strict=True)]

    def cosines(kind: str) -> dict[str, float]:
        a, b = vectors["float32"][kind], vectors["bfloat16"][kind]
        values = (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        return {"min": round(float(values.min()), 6), "mean": round(float(values.mean()), 7)}

    def per_second(dtype: str, kind: str, texts: list[str]) -> float:
        return round(len(texts) / statistics.median(seconds[dtype][kind]), 1)

    result: dict[str, Any] = {
        "passages": args.passages, "seed": args.seed, "questions": len(dataset.questions), "rounds": args.rounds,
        "threads": args.threads, "native_bfloat16": native_bfloat16(),
        "entities": len(entities), "facts": len(facts),
        "texts_per_second": {d: {kind: per_second(d, kind, texts) for kind, texts in
                                 (("entities", entities), ("facts", facts))} for d in stores},
        "speed_ratio_bfloat16": {kind: round(statistics.median(seconds["float32"][kind])
                                             / statistics.median(seconds["bfloat16"][kind]), 3)
                                 for kind in ("entities", "facts")},
        "cosine_to_float32": {kind: cosines(kind) for kind in ("entities", "facts")},
        f"top{TOP_FACTS}_facts_same_set": round(sum(same_set) / len(same_set), 3),
        f"top{TOP_FACTS}_facts_same_order": round(sum(same_order) / len(same_order), 3),
        "seconds": seconds,
        **measured_on(load, "torch"),
    }
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
