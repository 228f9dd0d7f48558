"""Answer quality beside retrieval quality (seed 004, ``mhop bench --answer``): an LM answers each question from a
retriever's top passages, scored by exact match and token F1 against the gold answer and its aliases. An answer the
LM failed to give counts as wrong, and the run reports how many fell back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy
import numpy as np
from llama_index.core.schema import MetadataMode, NodeWithScore

from ..lm.answer import ANSWER_STEP, answer_question
from ..lm.steps import FallbackCounter
from ..rules.metrics import answer_exact_match, answer_f1
from .loaders import BenchQuestion

__all__ = ["DEFAULT_ANSWER_PASSAGES", "AnswerEvaluator", "gold_answers"]

#: Passages of a retriever's ranking (distinct passages, best first) the LM answers from.
DEFAULT_ANSWER_PASSAGES = 5


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
        self._exact.append(100.0 * answer_exact_match(answer, golds) if answered else 0.0)
        self._f1.append(100.0 * answer_f1(answer, golds) if answered else 0.0)

    def result(self) -> dict[str, Any] | None:
        """The run's ``answer`` block (means in percent, per-question scores), or None without gold answers."""
        if not self._qids:
            return None
        return {
            "exact_match": round(float(np.mean(self._exact)), 4),
            "f1": round(float(np.mean(self._f1)), 4),
            "n_questions": len(self._qids),
            "n_fallbacks": self.fallbacks[ANSWER_STEP],
            "passages": self.passages,
            "per_question": {
                "qid": list(self._qids),
                "answer": list(self._answers),
                "exact_match": [round(v, 4) for v in self._exact],
                "f1": [round(v, 4) for v in self._f1],
            },
        }
