"""``mhop optimize``: compile a retriever's DSPy program (``retriever.program``) on a seeded train split against a
retrieval metric with DSPy's own optimizers (``dspy.BootstrapFewShot``, ``dspy.MIPROv2``, ``dspy.GEPA``), measure
the dev split before and after, and save the program as DSPy's JSON (``program=`` or ``--program`` loads it)."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dspy

from ..rules.metrics import all_gold_at_k, recall_at_k
from .benchmarker import passage_ids
from .cli import OPTIMIZERS
from .loaders import BenchDataset, BenchQuestion

__all__ = ["METRICS", "OptimizeResult", "optimize_program", "retrieval_metric", "run_optimize", "split_questions"]

#: ``--metric``: a retrieval metric and its cut-off.
METRICS: dict[str, tuple[Callable[..., float], int]] = {
    "all_gold@21": (all_gold_at_k, 21), "recall@5": (recall_at_k, 5)}


def split_questions(questions: Sequence[BenchQuestion], train: int,
                    seed: int = 0) -> tuple[list[BenchQuestion], list[BenchQuestion]]:
    """A seeded split: ``train`` questions to compile on, the rest to measure on (ValueError when ``train`` is below
    1 or leaves no dev question)."""
    if train < 1 or train >= len(questions):
        raise ValueError(f"--train must be between 1 and {len(questions) - 1} for {len(questions)} questions")
    order = list(questions)
    random.Random(seed).shuffle(order)
    return order[:train], order[train:]


def retrieval_metric(name: str) -> Callable[..., float]:
    """``metric(example, prediction, trace=None, *_)``: the named retrieval metric (ValueError if unknown)."""
    if name not in METRICS:
        raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
    function, k = METRICS[name]
    def metric(example: dspy.Example, prediction: dspy.Prediction, trace: Any = None, *_: Any) -> float:
        return function(passage_ids(prediction.nodes), example.gold, k)
    return metric


def _examples(questions: Sequence[BenchQuestion]) -> list[dspy.Example]:
    return [dspy.Example(query=q.text, gold=list(q.gold_ids)).with_inputs("query") for q in questions]


def _evaluate(program: dspy.Module, examples: Sequence[dspy.Example], metric: Callable[..., float]) -> float:
    scores = [metric(example, program(query=example.query)) for example in examples]
    return 100.0 * sum(scores) / len(scores)


def _optimizer(name: str, metric: Callable[..., float], lm: Any) -> Any:
    if name == "bootstrap":
        return dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=4, max_labeled_demos=0)
    if name == "mipro":
        return dspy.MIPROv2(metric=metric, auto="light")
    if name == "gepa":
        return dspy.GEPA(metric=metric, auto="light", reflection_lm=lm)
    raise ValueError(f"unknown optimizer {name!r}; choose from {', '.join(OPTIMIZERS)}")


@dataclass(frozen=True)
class OptimizeResult:
    """What a compile run measured and wrote."""

    retriever: str
    metric: str
    optimizer: str
    train: int
    dev: int
    dev_before: float
    dev_after: float
    program_path: Path


def optimize_program(retriever: Any, name: str, dataset: BenchDataset, optimizer: str, metric_name: str, train: int,
                     out: str | Path, lm: Any = None, seed: int = 0) -> OptimizeResult:
    """Compile ``retriever.program`` (a retriever of ``bench.cli.OPTIMIZABLE``) on ``train`` questions of a seeded split
    and save it to ``out``; measure the dev split before and after. ``lm`` is GEPA's reflection LM."""
    metric = retrieval_metric(metric_name)
    trainset, devset = map(_examples, split_questions(dataset.questions, train, seed))
    before = _evaluate(retriever.program, devset, metric)
    compiled = _optimizer(optimizer, metric, lm).compile(retriever.program, trainset=trainset)
    retriever.program.load_state(compiled.dump_state())
    after = _evaluate(retriever.program, devset, metric)
    path = retriever.save_program(out)
    return OptimizeResult(name, metric_name, optimizer, len(trainset), len(devset), before, after, path)


def run_optimize(args: argparse.Namespace) -> int:
    """``mhop optimize``: build the retriever over the dataset's corpus, compile, report, save."""
    from ..lm.clients import lm_from_spec
    from ..stores.defaults import default_chroma_client, default_embed_model
    from .context import BenchContext, passage_documents
    from .loaders import load_dataset
    from .registry import get_retriever_spec
    lm = lm_from_spec(args.lm)
    if lm is None:
        raise ValueError("mhop optimize needs an LM: --lm local or a DSPy model string")
    dataset = load_dataset(args.dataset)
    work_dir = Path(args.work_dir)
    work_dir.mkdir(parents=True, exist_ok=True)
    context = BenchContext(passage_documents(dataset.passages), embed_model=default_embed_model(),
                           chroma_client=default_chroma_client(work_dir / "chroma"), work_dir=work_dir, top_k=21,
                           lm=lm, show_progress=not args.quiet)
    retriever = get_retriever_spec(args.retriever).factory(context)
    result = optimize_program(retriever, args.retriever, dataset, args.optimizer, args.metric, args.train,
                              args.out, lm=lm, seed=args.seed)
    print(f"{result.retriever} {result.metric} on {result.dev} dev questions: {result.dev_before:.1f} before, "
          f"{result.dev_after:.1f} after {result.optimizer} on {result.train} train questions")
    print(f"wrote {result.program_path}")
    return 0
