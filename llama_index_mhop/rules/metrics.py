"""Retrieval metrics on rankings of passage ids (precision, recall, F1 and all-gold at k; seed 002) and answer
metrics on a short answer (exact match and token F1 against the gold answer and its aliases; seed 004).
A ranking is a sequence of ids, best first; a passage it names twice counts once, at its first position,
before the ranking is cut at ``k``. ``all_gold_at_k`` at ``k=21`` over normalised titles
(:func:`~llama_index_mhop.rules.text.normalize_title`) is HoVer's ``discrete_retrieval_eval`` (Jiang et al.,
2020). Every metric raises ValueError when ``gold`` is empty or ``k`` < 1, or there is no gold answer."""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

__all__ = ["all_gold_at_k", "answer_exact_match", "answer_f1", "dedupe", "f1_at_k", "normalize_answer",
           "precision_at_k", "recall_at_k"]

H = TypeVar("H", bound=Hashable)


def dedupe(items: Iterable[H]) -> list[H]:
    """The items in their first-seen order, each once."""
    return list(dict.fromkeys(items))


def _check(gold: Iterable[H], k: int) -> set[H]:
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    gold_set = set(gold)
    if not gold_set:
        raise ValueError("gold is empty: a question without gold passages cannot be scored")
    return gold_set


def _hits(retrieved: Sequence[H], gold: set[H], k: int) -> int:
    return sum(1 for item in dedupe(retrieved)[:k] if item in gold)


def precision_at_k(retrieved: Sequence[H], gold: Iterable[H], k: int) -> float:
    """Share of the top ``k`` slots that hold a gold passage: ``hits / k``, even for a ranking shorter than ``k``."""
    return _hits(retrieved, _check(gold, k), k) / k


def recall_at_k(retrieved: Sequence[H], gold: Iterable[H], k: int) -> float:
    """Share of the gold passages found in the top ``k``: ``hits / len(set(gold))``."""
    gold_set = _check(gold, k)
    return _hits(retrieved, gold_set, k) / len(gold_set)


def f1_at_k(retrieved: Sequence[H], gold: Iterable[H], k: int) -> float:
    """Harmonic mean of :func:`precision_at_k` and :func:`recall_at_k` (0.0 when both are 0)."""
    gold_set = _check(gold, k)
    hits = _hits(retrieved, gold_set, k)
    if hits == 0:
        return 0.0
    precision, recall = hits / k, hits / len(gold_set)
    return 2 * precision * recall / (precision + recall)


def all_gold_at_k(retrieved: Sequence[H], gold: Iterable[H], k: int) -> float:
    """1.0 when every gold passage is among the top ``k``, else 0.0; ValueError when ``gold`` is empty or ``k`` < 1."""
    gold_set = _check(gold, k)
    return 1.0 if _hits(retrieved, gold_set, k) == len(gold_set) else 0.0


# -- answers (SQuAD's evaluation, as HotpotQA and MuSiQue score answers) -------------------------------------------

_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lowercase, no punctuation, no a/an/the, whitespace collapsed."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def _golds(gold_answers: Iterable[str]) -> list[str]:
    golds = [g for g in gold_answers if isinstance(g, str)]
    if not golds:
        raise ValueError("no gold answer: a question without a gold answer cannot be scored")
    return golds


def answer_exact_match(prediction: str, gold_answers: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer or alias, else 0.0."""
    answer = normalize_answer(prediction)
    return max(float(answer == normalize_answer(gold)) for gold in _golds(gold_answers))


def _token_f1(prediction: str, gold: str) -> float:
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not predicted or not expected:  # an answer of articles only, or none: right only when both are empty
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def answer_f1(prediction: str, gold_answers: Iterable[str]) -> float:
    """The best token F1 of the normalised prediction against each gold answer and alias (SQuAD's ``f1_score``)."""
    return max(_token_f1(prediction, gold) for gold in _golds(gold_answers))
