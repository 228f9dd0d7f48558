"""A short answer from retrieved passages, when an LM is configured (``mhop query``, ``mhop bench --answer``)."""

from __future__ import annotations

from collections.abc import Sequence

import dspy

from ..rules.parsing import LMOutputError
from .steps import AnswerFromPassages, FallbackCounter, LMStep

__all__ = ["ANSWER_STEP", "NO_ANSWER", "answer_question"]

NO_ANSWER = "(no answer: the LM gave none)"
#: The step's name in logs, traces, events and fallback counts.
ANSWER_STEP = "answer"


def answer_question(question: str, passages: Sequence[str], lm: dspy.BaseLM, max_chars: int = 1200,
                    counter: FallbackCounter | None = None) -> str:
    """Ask ``lm`` to answer ``question`` from ``passages``; :data:`NO_ANSWER` when it fails or answers nothing
    (counted in ``counter`` under :data:`ANSWER_STEP`)."""
    shown = "\n".join(f"[{i}] {' '.join(p.split())[:max_chars]}" for i, p in enumerate(passages, start=1))

    def parse(prediction: dspy.Prediction) -> str:
        answer = str(prediction.answer or "").strip()
        if not answer:
            raise LMOutputError("empty answer")
        return answer
    step = LMStep(ANSWER_STEP, dspy.Predict(AnswerFromPassages), parse, lambda: NO_ANSWER, counter=counter)
    return step.run({"question": question, "passages": shown}, lm)
