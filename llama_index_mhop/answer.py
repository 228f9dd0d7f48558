"""A short answer from retrieved passages, when an LM is configured (``mhop query``)."""

from __future__ import annotations

from collections.abc import Sequence

import dspy

from .lm import run_lm_step
from .parsing import LMOutputError
from .signatures import AnswerFromPassages

__all__ = ["NO_ANSWER", "answer_question"]

NO_ANSWER = "(no answer: the LM gave none)"


def answer_question(question: str, passages: Sequence[str], lm: dspy.BaseLM, max_chars: int = 1200) -> str:
    """Ask ``lm`` to answer ``question`` from ``passages``; :data:`NO_ANSWER` when it fails or answers nothing."""
    shown = "\n".join(f"[{i}] {' '.join(p.split())[:max_chars]}" for i, p in enumerate(passages, start=1))

    def parse(prediction: dspy.Prediction) -> str:
        answer = str(prediction.answer or "").strip()
        if not answer:
            raise LMOutputError("empty answer")
        return answer

    return run_lm_step("answer", dspy.Predict(AnswerFromPassages), {"question": question, "passages": shown},
                       parse, lambda: NO_ANSWER, lm)
