"""The Benchmarker: every retriever of a run on the same corpus, embedder and questions (seed 002), and optionally
an LM's answers from each ranking's top passages (seed 004); metrics are read off one ranking at the largest k.

Latency is timed so that the order of the retrievers cannot bias it (:data:`TIMING`).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import platform
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any

import dspy
import numpy as np
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import MetadataMode, NodeWithScore

from ..lm.answer import ANSWER_STEP, answer_question
from ..lm.steps import FallbackCounter, current_lm
from ..rules import metrics
from .context import BenchContext, passage_documents
from .loaders import BenchDataset, BenchQuestion
from .registry import RetrieverFactory, RetrieverSpec, Searcher, get_retriever_spec, registered_retrievers
from .significance import compare_runs

__all__ = ["DEFAULT_ANSWER_PASSAGES", "DEFAULT_K_VALUES", "DEFAULT_WORK_DIR", "METRIC_NAMES", "TIMING", "WARM_UP_QUERY",
           "SIGNIFICANCE_BASELINE", "AnswerEvaluator", "Benchmarker", "gold_answers", "passage_ids", "peak_rss_mb",
           "per_question_scores", "save_json", "top_passages", "validate_result"]

logger = logging.getLogger(__name__)

DEFAULT_K_VALUES = (2, 5, 10, 21)
DEFAULT_WORK_DIR = ".mhop/bench"
#: The run every other run is tested against (paired over questions), when it is part of the run.
SIGNIFICANCE_BASELINE = "vector"
#: The metrics of a run, each reported as ``NAME@K`` for every k.
METRIC_NAMES = ("recall", "all_gold", "precision", "f1")
_METRIC_FUNCTIONS: dict[str, Callable[[Sequence[str], Sequence[str], int], float]] = {
    "recall": metrics.recall_at_k, "all_gold": metrics.all_gold_at_k, "precision": metrics.precision_at_k,
    "f1": metrics.f1_at_k}
#: Passages of a retriever's ranking (distinct passages, best first) the LM answers from.
DEFAULT_ANSWER_PASSAGES = 5
#: Each retriever's warm-up query, not a question of any data set: no question's work is cached before it is timed.
WARM_UP_QUERY = "Which river runs through the town where the composer of the warm-up overture was born?"
#: How a run's figures are taken (the result's ``timing``).
TIMING = {"method": "interleaved", "latency": "ms of each question's retrieval; every retriever built and warmed by one "
          "query outside the data set (in no metric, latency or fallback count), then the questions asked one by one "
          "of every retriever, the retrievers' order rotated by one each question", "peak_rss_mb": "process peak RSS "
          "once this retriever and those before it were built and warmed; peak_rss_mb_end: once all were asked"}


def peak_rss_mb() -> float:
    """The process's peak resident set size so far, in MB (``ru_maxrss``: KB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def _passage_id(item: NodeWithScore) -> str:
    meta = item.node.metadata or {}
    return str(meta.get("passage_id") or meta.get("title") or item.node.node_id)


def passage_ids(nodes: Sequence[NodeWithScore]) -> list[str]:
    """The passage ids (``passage_id`` metadata, else ``title``, else node id) of retrieved nodes, best first, once
    each."""
    return metrics.dedupe(_passage_id(item) for item in nodes)


def top_passages(nodes: Sequence[NodeWithScore], n: int) -> list[NodeWithScore]:
    """The first node of each of the first ``n`` passages of a ranking (passages as in :func:`passage_ids`)."""
    first: dict[str, NodeWithScore] = {}
    for item in nodes:
        if len(first) == n:
            break
        first.setdefault(_passage_id(item), item)
    return list(first.values())


def per_question_scores(rankings: Sequence[Sequence[str]], questions: Sequence[BenchQuestion],
                        k_values: Sequence[int]) -> dict[str, list[float]]:
    """Each question's ``recall@K``, ``all_gold@K``, ``precision@K`` and ``f1@K`` in percent, in question order;
    ValueError when rankings and questions differ in number or there are no questions."""
    if len(rankings) != len(questions):
        raise ValueError(f"{len(rankings)} rankings for {len(questions)} questions")
    if not questions:
        raise ValueError("no questions to score")
    return {f"{name}@{k}": [100.0 * _METRIC_FUNCTIONS[name](ranking, question.gold_ids, k)
                            for ranking, question in zip(rankings, questions, strict=True)]
            for k in k_values for name in METRIC_NAMES}


def _means(per_question: Mapping[str, Sequence[float]]) -> dict[str, float]:
    return {key: round(float(np.mean(values)), 4) for key, values in per_question.items()}


def _machine() -> dict[str, Any]:
    versions = {}
    for package in ("llama-index-core", "chromadb", "dspy", "llama-index-retrievers-bm25"):
        try:
            versions[package] = _metadata.version(package)
        except _metadata.PackageNotFoundError:
            continue
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "packages": versions}


def _fallbacks(searcher: Searcher) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for component in [*searcher.retrievers, searcher.query_transform, searcher.reranker]:
        counter = getattr(component, "fallback_counts", None)
        if counter is not None and hasattr(counter, "as_dict"):
            counts.update(counter.as_dict())
    return dict(counts)


class Benchmarker:
    """Run retrievers on one dataset with one embedder and one index, and report the DESIGN.md result schema.

    ``answer``: an LM also answers from each ranking's top ``answer_passages`` passages.
    """

    def __init__(self, dataset: BenchDataset,
                 retrievers: Sequence[str] | Mapping[str, RetrieverFactory | RetrieverSpec] | None = None,
                 k_values: Sequence[int] = DEFAULT_K_VALUES, embed_model: BaseEmbedding | None = None,
                 chroma_client: Any = None, work_dir: str | os.PathLike[str] = DEFAULT_WORK_DIR, lm: Any = None,
                 show_progress: bool = True, program: str | None = None, answer: bool = False,
                 answer_passages: int = DEFAULT_ANSWER_PASSAGES) -> None:
        if not dataset.questions:
            raise ValueError(f"dataset {dataset.name!r} has no questions")
        if not dataset.passages:
            raise ValueError(f"dataset {dataset.name!r} has no passages")
        ks = list(k_values)
        if not ks or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in ks):
            raise ValueError(f"k_values must be integers >= 1, got {k_values!r}")
        self.dataset = dataset
        self.k_values = sorted(set(ks))
        self.specs = self._resolve_specs(retrievers)
        self.embed_model = embed_model
        self.chroma_client = chroma_client
        self.work_dir = Path(work_dir)
        self.lm = lm
        self.show_progress = show_progress
        self.program = program
        self.answer = answer
        self.answer_passages = answer_passages
        if program is not None and len(self.specs) != 1:
            raise ValueError("--program is one retriever's compiled program: give exactly one retriever")

    @staticmethod
    def _resolve_specs(retrievers: Sequence[str] | Mapping[str, RetrieverFactory | RetrieverSpec] | None,
                       ) -> list[RetrieverSpec]:
        if retrievers is None:
            specs = list(registered_retrievers().values())
        elif isinstance(retrievers, Mapping):
            specs = []
            for name, entry in retrievers.items():
                if isinstance(entry, RetrieverSpec):
                    specs.append(entry if entry.name == name else replace(entry, name=name))
                elif callable(entry):
                    specs.append(RetrieverSpec(name, getattr(entry, "__doc__", None) or name, entry, "vector"))
                else:
                    raise ValueError(f"retriever {name!r}: expected a factory or a RetrieverSpec, "
                                     f"got {type(entry).__name__}")
        elif isinstance(retrievers, str):
            raise ValueError("retrievers must be a list of names, not a string (use ['vector'], not 'vector')")
        else:
            specs = [get_retriever_spec(name) for name in retrievers]
        if not specs:
            raise ValueError("no retrievers to run")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"retriever names repeat: {names}")
        return specs

    def _context(self) -> BenchContext:
        from ..stores.defaults import default_chroma_client, resolve_embed_model
        embed_model = resolve_embed_model(self.embed_model)
        client = self.chroma_client if self.chroma_client is not None else default_chroma_client(
            self.work_dir / "chroma")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return BenchContext(passage_documents(self.dataset.passages), embed_model=embed_model, chroma_client=client,
                            work_dir=self.work_dir, top_k=max(self.k_values), lm=self.lm,
                            show_progress=self.show_progress, program=self.program)

    def run(self) -> dict[str, Any]:
        """Index once, run every retriever on every question, and return the result (DESIGN.md schema)."""
        ctx = self._context()
        # Load the embedder's weights before anything is timed, so no run pays for it.
        ctx.embed_model.get_text_embedding("warm-up")
        if any(spec.needs_index == "vector" for spec in self.specs):
            ctx.build_vector_index()
        answer_lm = self._answer_lm()
        prepared = [self._prepare(spec, ctx, answer_lm) for spec in self.specs]
        self._ask_interleaved(prepared)
        runs = [self._result(run) for run in prepared]
        return {
            "timing": {**TIMING, "peak_rss_mb_end": round(peak_rss_mb(), 2)}, "dataset": self.dataset.name, "n_questions": len(self.dataset.questions),
            "n_passages": len(self.dataset.passages), "k_values": list(self.k_values), "runs": runs,
            "format": self.dataset.format, "source": self.dataset.source, "n_index_nodes": len(ctx.nodes),
            "n_gold_missing": len(self.dataset.missing_gold()),
            "embed_model": str(getattr(ctx.embed_model, "model_name", type(ctx.embed_model).__name__)),
            "lm": None if self.lm is None else str(getattr(self.lm, "model", type(self.lm).__name__)),
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "machine": _machine(),
            "significance": compare_runs(runs, baseline=SIGNIFICANCE_BASELINE, k_values=self.k_values),
        }

    def _answer_lm(self) -> Any:
        if not self.answer:
            return None
        lm = current_lm(self.lm)
        if lm is None:
            logger.warning("answer evaluation needs an LM (lm= or dspy.settings.lm); answers are not evaluated")
        elif not any(gold_answers(q) for q in self.dataset.questions):
            logger.warning("dataset %r has no gold answers; answers are not evaluated", self.dataset.name)
            return None
        return lm

    def _prepare(self, spec: RetrieverSpec, ctx: BenchContext, answer_lm: Any) -> _Run:
        """Build ``spec``'s retriever and warm it (the warm-up's fallbacks are left out of the run's)."""
        start = time.perf_counter()
        built = spec.factory(ctx)
        own_seconds = time.perf_counter() - start
        if not isinstance(built, (Searcher, BaseRetriever)):
            raise TypeError(f"retriever factory {spec.name!r} returned {type(built).__name__}, "
                            "expected a LlamaIndex BaseRetriever or a Searcher")
        searcher = built if isinstance(built, Searcher) else Searcher(built)
        before = Counter(_fallbacks(searcher))
        searcher.search(WARM_UP_QUERY, max(self.k_values))
        return _Run(spec, searcher, own_seconds, (ctx.vector_index_seconds or 0.0) if spec.needs_index == "vector"
                    else 0.0, Counter(_fallbacks(searcher)) - before, peak_rss_mb(),
                    AnswerEvaluator(answer_lm, self.answer_passages) if answer_lm is not None else None)

    def _ask_interleaved(self, runs: Sequence[_Run]) -> None:
        """Every question of every retriever, question by question, the retrievers' order rotated by one each
        question: each retriever is as often first after any other's queries."""
        from ..rules.terminal import progress
        top_k = max(self.k_values)
        for position, question in enumerate(progress(self.dataset.questions, show=self.show_progress,
                                                     desc="questions", unit="q")):
            turn = position % len(runs)
            for run in [*runs[turn:], *runs[:turn]]:
                start = time.perf_counter()
                nodes = run.searcher.search(question.text, top_k)
                run.latencies.append((time.perf_counter() - start) * 1000.0)
                run.rankings.append(passage_ids(nodes))
                if run.answers is not None:  # after the timing: latency is the retriever's alone
                    run.answers.add(question, top_passages(nodes, self.answer_passages))

    def _result(self, run: _Run) -> dict[str, Any]:
        p50, p95 = np.percentile(run.latencies, [50, 95])
        per_question = per_question_scores(run.rankings, self.dataset.questions, self.k_values)
        fallbacks = Counter(_fallbacks(run.searcher))
        fallbacks.subtract(run.warm_fallbacks)
        result = {
            "name": run.spec.name, "index_seconds": round(run.own_seconds + run.shared_seconds, 4),
            "latency_ms_p50": round(float(p50), 4), "latency_ms_p95": round(float(p95), 4),
            "peak_rss_mb": round(run.peak_rss_mb, 2), "metrics": _means(per_question),
            "description": run.spec.description, "index_seconds_shared": round(run.shared_seconds, 4),
            "index_seconds_own": round(run.own_seconds, 4), "fallbacks": {k: n for k, n in fallbacks.items() if n},
            "per_question": {key: [round(v, 4) for v in values] for key, values in per_question.items()},
        }
        answer_block = run.answers.result() if run.answers is not None else None
        if answer_block is not None:
            result["answer"] = answer_block
        return result


@dataclass
class _Run:
    """One retriever of a run: built and warmed, then its questions' latencies, rankings and answers."""

    spec: RetrieverSpec
    searcher: Searcher
    own_seconds: float
    shared_seconds: float
    warm_fallbacks: Counter[str]
    peak_rss_mb: float
    answers: AnswerEvaluator | None
    latencies: list[float] = field(default_factory=list)
    rankings: list[list[str]] = field(default_factory=list)


def gold_answers(question: BenchQuestion) -> list[str]:
    """The gold answer and its aliases from the question's record, each once, in record order ([] when none)."""
    found: list[str] = []
    for key in ("answer", "answer_aliases"):
        value = question.metadata.get(key)
        for answer in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
            if isinstance(answer, str) and answer.strip() and answer not in found:
                found.append(answer)
    return found


class AnswerEvaluator:
    """Answers the questions of one retriever's run with ``lm`` from ``passages`` distinct passages, and scores them."""

    def __init__(self, lm: dspy.BaseLM, passages: int = DEFAULT_ANSWER_PASSAGES) -> None:
        if passages < 1:
            raise ValueError(f"passages must be at least 1, got {passages}")
        self.lm = lm
        self.passages = passages
        self.fallbacks = FallbackCounter()
        self._qids: list[str] = []
        self._answers: list[str] = []
        self._exact: list[float] = []
        self._f1: list[float] = []

    def add(self, question: BenchQuestion, top_passages: Sequence[NodeWithScore]) -> None:
        """Answer ``question`` from the first :attr:`passages` of ``top_passages`` (one node per passage, best first)
        and score it; a question without a gold answer is left out."""
        golds = gold_answers(question)
        if not golds:
            return
        texts = [item.node.get_content(metadata_mode=MetadataMode.LLM) for item in top_passages[: self.passages]]
        before = self.fallbacks[ANSWER_STEP]
        answer = answer_question(question.text, texts, self.lm, counter=self.fallbacks)
        answered = self.fallbacks[ANSWER_STEP] == before  # a fallback is no answer: wrong, whatever it says
        self._qids.append(question.qid)
        self._answers.append(answer)
        self._exact.append(100.0 * metrics.answer_exact_match(answer, golds) if answered else 0.0)
        self._f1.append(100.0 * metrics.answer_f1(answer, golds) if answered else 0.0)

    def result(self) -> dict[str, Any] | None:
        """The run's ``answer`` block (means in percent, per-question scores), or None without gold answers."""
        if not self._qids:
            return None
        return {"exact_match": round(float(np.mean(self._exact)), 4), "f1": round(float(np.mean(self._f1)), 4),
                "n_questions": len(self._qids), "n_fallbacks": self.fallbacks[ANSWER_STEP], "passages": self.passages,
                "per_question": {"qid": list(self._qids), "answer": list(self._answers),
                                 "exact_match": [round(v, 4) for v in self._exact],
                                 "f1": [round(v, 4) for v in self._f1]}}


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(f"invalid benchmark result: {message}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and bool(np.isfinite(value))


def validate_result(result: Mapping[str, Any]) -> None:
    """Check a result against the DESIGN.md schema (extra keys allowed); ValueError names the first bad key."""
    _require(isinstance(result, Mapping), f"expected an object, got {type(result).__name__}")
    for key, kind in (("dataset", str), ("n_questions", int), ("n_passages", int), ("k_values", list),
                      ("runs", list)):
        _require(key in result, f"missing {key!r}")
        _require(isinstance(result[key], kind) and not isinstance(result[key], bool),
                 f"{key!r} must be {kind.__name__}, got {type(result[key]).__name__}")
    ks = result["k_values"]
    _require(bool(ks) and all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in ks),
             f"'k_values' must be integers >= 1, got {ks!r}")
    for position, run in enumerate(result["runs"]):
        where = f"runs[{position}]"
        _require(isinstance(run, Mapping), f"{where} must be an object")
        _require(isinstance(run.get("name"), str) and bool(run["name"]), f"{where}.name must be a non-empty string")
        for key in ("index_seconds", "latency_ms_p50", "latency_ms_p95", "peak_rss_mb"):
            _require(key in run, f"{where} missing {key!r}")
            _require(_is_number(run[key]) and run[key] >= 0, f"{where}.{key} must be a number >= 0")
        scores = run.get("metrics")
        _require(isinstance(scores, Mapping), f"{where}.metrics must be an object")
        for k in ks:
            for name in METRIC_NAMES:
                key = f"{name}@{k}"
                _require(key in scores, f"{where}.metrics missing {key!r}")
                _require(_is_number(scores[key]) and 0 <= scores[key] <= 100,
                         f"{where}.metrics[{key!r}] must be a number in [0, 100], got {scores[key]!r}")
        if "answer" in run:
            answer = run["answer"]
            _require(isinstance(answer, Mapping), f"{where}.answer must be an object")
            for key in ("exact_match", "f1"):
                _require(_is_number(answer.get(key)) and 0 <= answer[key] <= 100,
                         f"{where}.answer[{key!r}] must be a number in [0, 100], got {answer.get(key)!r}")
            for key in ("n_questions", "n_fallbacks"):
                _require(isinstance(answer.get(key), int) and answer[key] >= 0,
                         f"{where}.answer[{key!r}] must be an integer >= 0")


def save_json(result: Mapping[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``result`` and write it as indented JSON (parent folders created); returns the path."""
    validate_result(result)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out
