"""Every parser and matcher of untrusted text on hostile inputs of about 1M characters: seconds per call.

An LM answer (or a corpus passage) is untrusted: a parser that backtracks on long digit runs or a matcher that
is quadratic in the length of two facts turns one long answer into minutes of CPU, after the LM timeout has
stopped counting. Each case below is a shape that was super-linear once (or that a regular expression could make
so); every one must stay well under a second at 1M characters. The script also runs each case at 1/4 of the size:
for a linear parser the time ratio stays near 4, a quadratic one shows near 16.

Usage:
    python benchmarks/parser_linearity.py [--chars 1000000] [--out benchmarks/results/parser_linearity.json]
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dspy

from llama_index_mhop.components.fact_filter import DSPyFactFilter, fact_node
from llama_index_mhop.graph.extraction import extract_llm_free, parse_extraction
from llama_index_mhop.lm.clients import function_lm
from llama_index_mhop.rules.parsing import (
    LMOutputError,
    parse_confidence,
    parse_queries,
    parse_ranking,
    parse_string_list,
)
from llama_index_mhop.rules.text import entity_spans, sentences


def _confidence(text: str) -> Callable[[], Any]:
    return lambda: parse_confidence(text)


def _fact_filter(candidate_chars: int, answer_chars: int) -> Callable[[], Any]:
    """The fact filter's full LM path (DSPy adapter, parse, matcher) on a long candidate and a long answer."""
    long_object = "x" * candidate_chars
    nodes = [fact_node("alice", "knows", long_object, 0.9), fact_node("bob", "knows", "carol", 0.8)]
    written = json.dumps({"fact": [["alice", "knows", "y" + "x" * answer_chars]]})
    lm = function_lm(lambda messages: f"[[ ## fact_after_filter ## ]]\n{written}\n\n[[ ## completed ## ]]")
    fact_filter = DSPyFactFilter(lm=lm, top_n=1)
    return lambda: fact_filter.postprocess_nodes(nodes, query_str="Whom does Alice know?")


def _extraction(chars: int) -> Callable[[], Any]:
    prediction = dspy.Prediction(
        named_entities=["Alice", "A" * chars], triples=[["Alice", "p" * chars, "Bob"], ["Alice", "knows", "Bob"]]
    )
    return lambda: parse_extraction(prediction, "Alice knows Bob.")


def cases(chars: int) -> dict[str, Callable[[], Any]]:
    """The hostile inputs, each of about ``chars`` characters."""
    return {
        "confidence: digit run": _confidence("1" * chars),
        "confidence: digits then percent": _confidence("0" * (chars - 3) + "85%"),
        "confidence: digits then ratio": _confidence("7" * (chars - 5) + " / 10"),
        "confidence: number then spaces": _confidence("8" + " " * (chars - 2) + "x"),
        "confidence: dotted digits": _confidence("1." * (chars // 2)),
        "confidence: number words": _confidence("one " * (chars // 4)),
        "ranking: digit run": lambda: parse_ranking("3" * chars, 5),
        "ranking: many indices": lambda: parse_ranking("1, " * (chars // 3), 5),
        "string list: unbalanced quotes": lambda: parse_string_list("[" + "'a" * (chars // 2)),
        "string list: lines": lambda: parse_string_list("- q\n" * (chars // 4)),
        "queries: one long line": lambda: parse_queries("w " * (chars // 2)),
        "extraction: long entity and predicate": _extraction(chars),
        "fact filter: long answer fact": _fact_filter(100, chars),
        "fact filter: long candidate and answer": _fact_filter(chars // 2, chars // 2),
        "sentences: spaces": lambda: sentences("a." + " " * chars + "b"),
    }


def corpus_cases(chars: int) -> dict[str, Callable[[], Any]]:
    """Analysers of corpus text. They read chunked passages (256 tokens), never 1M characters at once, and walk
    tokens in Python: linear (the ratio shows it) but not meant to be under a second at 1M characters."""
    return {
        "LLM-free extraction: long passage": lambda: extract_llm_free("Alice met Bob in Paris. " * (chars // 24)),
        "entity spans: capitalised run": lambda: entity_spans.__wrapped__("Aa " * (chars // 3)),
    }


def timed(call: Callable[[], Any], repeats: int = 3) -> tuple[float, str]:
    """The best of ``repeats`` runs (the machine is shared) and the call's outcome."""
    best, outcome = float("inf"), ""
    for _ in range(repeats):
        start = time.perf_counter()
        try:
            outcome = repr(call())[:80]
        except LMOutputError as exc:  # a clear refusal is an answer too
            outcome = f"LMOutputError: {str(exc)[:60]}"
        best = min(best, time.perf_counter() - start)
    return best, outcome


def measure(
    full: dict[str, Callable[[], Any]], quarter: dict[str, Callable[[], Any]], repeats: int = 3
) -> list[dict[str, Any]]:
    rows = []
    for name, call in full.items():
        seconds, outcome = timed(call, repeats)
        quarter_seconds, _ = timed(quarter[name], repeats)
        rows.append({
            "case": name,
            "seconds": round(seconds, 4),
            "seconds_at_quarter_size": round(quarter_seconds, 4),
            "ratio_full_to_quarter": round(seconds / max(quarter_seconds, 1e-6), 2),
            "outcome": outcome,
        })
        print(f"{name:42s} {seconds:8.3f}s  (1/4 size {quarter_seconds:.3f}s)  {outcome}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=1_000_000)
    parser.add_argument("--out", default="benchmarks/results/parser_linearity.json")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)  # the fact filter's fallback warnings are expected here
    rows = measure(cases(args.chars), cases(args.chars // 4))
    corpus_rows = measure(corpus_cases(args.chars), corpus_cases(args.chars // 4), repeats=1)
    slowest = max(row["seconds"] for row in rows)  # the parsers of LM output; corpus analysers reported apart
    report = {
        "chars": args.chars,
        "python": sys.version.split()[0],
        "machine": platform.machine(),
        "slowest_seconds": slowest,
        "all_under_one_second": slowest < 1.0,
        "cases": rows,
        "corpus_analysers": corpus_rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"slowest {slowest:.3f}s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
