"""How fast a graph index embeds its entity names and facts at each short-text batch size.

``GraphStores.embed`` sorts the texts of one insert batch longest first and cuts them into batches of
``short_text_batch_size``; every text of a batch is padded to the batch's longest. A larger batch spreads the
per-call cost over more texts but pads more: the first batch of a sorted list pads everything to the longest
text. This script embeds the distinct entity names and facts of a synthetic corpus (``bench.synthetic``, the
LLM-free OpenIE, the index's own content ids) in the groups an index build of ``--insert-batch`` passages gives
``GraphStores.embed``, at each batch size in turn for ``--rounds`` rounds, one torch thread, in the default
short-text dtype. Reported per batch size: texts per second (median over rounds), the speed against the largest
size, the share of padding tokens, and the lowest cosine between a vector and the same text's vector at the
largest size.

Usage:
    python benchmarks/short_text_batch.py [--passages 3000] [--sizes 32,64,128,256,512] [--rounds 2]
        [--out benchmarks/results/short_text_batch.json]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from result_file import measured_on, write_result
from short_text_dtype import corpus_works

DEFAULT_OUT = Path(__file__).resolve().parent / "results" / "short_text_batch.json"
KINDS = ("entities", "facts")


def _groups(corpus: dict[str, list[str]], insert_batch: int) -> dict[str, list[list[str]]]:
    """The new entity names and fact texts of each insert batch, as an index build hands them to ``embed``."""
    from llama_index_mhop.graph.graph_stores import fact_text

    works = list(corpus_works(corpus))
    seen: dict[str, set[str]] = {kind: set() for kind in KINDS}
    groups: dict[str, list[list[str]]] = {kind: [] for kind in KINDS}
    for start in range(0, len(works), insert_batch):
        texts: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        for work in works[start : start + insert_batch]:
            texts["entities"].update(work.entry.entities)
            texts["facts"].update({f: fact_text(*keys) for f, keys in work.fact_texts.items()})
        for kind in KINDS:
            new = {i: t for i, t in texts[kind].items() if i not in seen[kind]}
            seen[kind].update(new)
            groups[kind].append(list(new.values()))
    return groups


def _padding_share(tokenizer: Any, groups: list[list[str]], size: int) -> float:
    """Padding tokens over all tokens fed to the encoder, for ``embed``'s longest-first order and batches."""
    padded = real = 0
    for texts in groups:
        ordered = sorted(texts, key=len, reverse=True)
        for start in range(0, len(ordered), size):
            lengths = [len(tokenizer(t)["input_ids"]) for t in ordered[start : start + size]]
            real += sum(lengths)
            padded += max(lengths) * len(lengths)
    return 1 - real / padded


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passages", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--insert-batch", type=int, default=256, help="passages per insert batch")
    parser.add_argument("--sizes", default="32,64,128,256,512")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)

    import chromadb
    import torch

    from llama_index_mhop.bench.synthetic import generate_dataset
    from llama_index_mhop.graph.graph_stores import (
        DEFAULT_SHORT_TEXT_BATCH_SIZE,
        DEFAULT_SHORT_TEXT_DTYPE,
        GraphStores,
    )
    from llama_index_mhop.stores.defaults import default_embed_model

    torch.set_num_threads(1)
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    groups = _groups(generate_dataset(args.passages, n_questions=1, seed=args.seed).corpus, args.insert_batch)
    embed = default_embed_model()
    embed.get_text_embedding("warm-up")
    client = chromadb.EphemeralClient()
    stores = {size: GraphStores(client, f"batch_{size}", embed, size, "external") for size in sizes}
    seconds: dict[int, dict[str, list[float]]] = {size: {kind: [] for kind in KINDS} for size in sizes}
    vectors: dict[int, dict[str, np.ndarray]] = {}
    load = [os.getloadavg()]
    for _ in range(args.rounds):
        for size, store in stores.items():
            vectors[size] = {}
            for kind in KINDS:
                start = time.perf_counter()
                vectors[size][kind] = np.vstack([store.embed(texts, short=True) for texts in groups[kind] if texts])
                seconds[size][kind].append(time.perf_counter() - start)
    load.append(os.getloadavg())

    largest = sizes[-1]
    counts = {kind: sum(len(texts) for texts in groups[kind]) for kind in KINDS}

    def lowest_cosine(size: int, kind: str) -> float:
        a, b = vectors[size][kind], vectors[largest][kind]
        return round(float(((a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min()), 6)

    result: dict[str, Any] = {
        "passages": args.passages, "seed": args.seed, "insert_batch": args.insert_batch, "rounds": args.rounds,
        "dtype": DEFAULT_SHORT_TEXT_DTYPE, "default_size": DEFAULT_SHORT_TEXT_BATCH_SIZE, "texts": counts,
        "sizes": {
            str(size): {
                kind: {
                    "texts_per_second": round(counts[kind] / statistics.median(seconds[size][kind]), 1),
                    f"speed_against_{largest}": round(statistics.median(seconds[largest][kind])
                                                      / statistics.median(seconds[size][kind]), 3),
                    "padding_share": round(_padding_share(embed._model.tokenizer, groups[kind], size), 4),
                    f"lowest_cosine_to_{largest}": lowest_cosine(size, kind),
                } for kind in KINDS
            } for size in sizes
        },
        "seconds": {str(size): s for size, s in seconds.items()},
        **measured_on(load, "torch"),
    }
    write_result(result, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
