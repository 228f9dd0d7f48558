"""What one query-embedder call costs on this CPU, and the floor it puts under a flow of dependent rounds.

A flow whose round needs the passages of the round before cannot embed the later round's queries before that
round ends: each dependent round is one more embedder call, however its queries are batched. This script times
the packaged all-MiniLM-L6-v2 (the Hugging Face path the flows' batches take) on every question of a dataset:

- ``query alone``: the question, one text (what ``vector`` embeds);
- ``first round``: the question with its LLM-free first perspectives (``heuristic_perspectives``, no passage yet:
  the batch ``rrf_fusion`` embeds first);
- ``two short texts``: two of those perspectives, the size of a later round's new queries;
- ``one token``: a one-word text, what a call costs before any text is in it.

and, from a grid of token ids, the call's cost at 1-5 texts of 2-64 tokens, to split a call into its fixed part
and its part per token. Medians over ``--repeats`` calls each; torch threads as given.

Usage:
    python benchmarks/embedder_call_floor.py --dataset ../shared/datasets/hotpotqa-100 [--threads 2] \\
        [--repeats 3] --out benchmarks/results/embedder-call-floor.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path
from typing import Any

from result_file import measured_on, write_result


def _median_ms(repeats: int, call: Any, *args: Any, **kwargs: Any) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call(*args, **kwargs)
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    from llama_index_mhop.bench.loaders import load_dataset
    from llama_index_mhop.rules.perspectives import heuristic_perspectives
    from llama_index_mhop.stores.defaults import default_embed_model
    from llama_index_mhop.stores.search import embed_queries

    embed_model = default_embed_model()
    questions = [q.text for q in load_dataset(args.dataset).questions]
    load = [os.getloadavg()]
    embed_model.get_query_embedding(questions[0])  # warm-up
    per_call: dict[str, list[float]] = {"query alone": [], "first round": [], "two short texts": [], "one token": []}
    for question in questions:
        perspectives = [p for p in heuristic_perspectives(question) if p != question]
        per_call["query alone"].append(_median_ms(args.repeats, embed_model.get_query_embedding, question))
        per_call["first round"].append(
            _median_ms(args.repeats, embed_queries, embed_model, [question, *perspectives]))
        per_call["two short texts"].append(_median_ms(args.repeats, embed_queries, embed_model, perspectives[:2]))
        per_call["one token"].append(_median_ms(args.repeats, embed_model.get_query_embedding, "river"))

    model = embed_model._model[0].auto_model
    grid = []
    with torch.inference_mode():
        for texts in (1, 5):
            for tokens in (2, 8, 16, 32, 64):
                ids = torch.full((texts, tokens), 2000)
                ms = _median_ms(max(args.repeats, 20), model, input_ids=ids, attention_mask=torch.ones_like(ids))
                grid.append({"texts": texts, "tokens": tokens, "forward_ms": round(ms, 2)})
    load.append(os.getloadavg())

    medians = {step: round(statistics.median(v), 2) for step, v in per_call.items()}
    alone = medians["query alone"]
    result: dict[str, Any] = {
        "dataset": args.dataset, "questions": len(questions), "threads": args.threads, "repeats": args.repeats,
        **measured_on(load, "torch", "transformers", "sentence-transformers"),
        "median_ms": medians,
        "x_query_alone": {step: round(ms / alone, 2) for step, ms in medians.items()},
        "forward_grid": grid,
    }
    write_result(result, args.out)
    print(result["median_ms"], result["x_query_alone"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
