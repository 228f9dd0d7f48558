"""An LLM-free listwise reranker: relevance to the query plus what each passage adds to the passages above it.

The LLM-free stand-in for seed 001's ``ListwiseDocumentReranker``, which reads all passages together to find
multi-hop links. Passages are chosen greedily, best first; at each position the passage with the highest gain

    gain(p) = relevance(p) + link_weight * link(p) + coverage_weight * coverage(p)

is placed next, where, with ``S`` the passages already placed:

* ``relevance(p) = sum_l w_l / (rrf_k + rank_l(p))`` over the rankings ``l`` that contain ``p`` (weighted
  Reciprocal Rank Fusion), divided by its maximum so it lies in (0, 1]. The original query's ranking carries
  the largest weight, so the good first ranking stays on top.
* ``link(p) = max relevance(s)`` over the first ``link_top`` passages ``s`` of ``S`` whose text names ``p``'s
  subject (0 when none does): the passage about a bridge entity that a top passage mentions rises with it, the
  way a hyperlink from a relevant page makes its target relevant.
* ``coverage(p) = |targets p is about and no passage in S is about| / |targets|``: a passage about a query
  entity that no higher passage covers rises (diversity over the query's entities, as for comparison
  questions).

Ties keep the order of first appearance, so the result is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .confidence_strategies import PassageView
from .fusion import reciprocal_rank_fusion
from .text import mentions, names_match

__all__ = [
    "DEFAULT_COVERAGE_WEIGHT",
    "DEFAULT_LINK_TOP",
    "DEFAULT_LINK_WEIGHT",
    "DEFAULT_RERANK_RRF_K",
    "RankedPassage",
    "listwise_rerank",
]

DEFAULT_LINK_WEIGHT = 1.0
DEFAULT_COVERAGE_WEIGHT = 0.5
DEFAULT_LINK_TOP = 3
DEFAULT_RERANK_RRF_K = 60


@dataclass(frozen=True)
class RankedPassage:
    """One position of the listwise ranking: the passage's index in the input and the parts of its gain."""

    index: int
    score: float
    relevance: float
    link: float
    coverage: float


def listwise_rerank(
    passages: Sequence[PassageView],
    rankings: Sequence[tuple[Sequence[int], float]],
    targets: Sequence[str] = (),
    link_weight: float = DEFAULT_LINK_WEIGHT,
    coverage_weight: float = DEFAULT_COVERAGE_WEIGHT,
    link_top: int = DEFAULT_LINK_TOP,
    rrf_k: int = DEFAULT_RERANK_RRF_K,
) -> list[RankedPassage]:
    """Rank all passages together (see the module docstring for the formula).

    Args:
        passages: the candidate passages.
        rankings: ``(ranking, weight)`` pairs; a ranking lists indices into ``passages``, best first.
        targets: the entities to cover (usually the query's entities).
        link_weight: weight of the link term.
        coverage_weight: weight of the coverage term.
        link_top: how many of the first placed passages can lift the passages they name.
        rrf_k: the Reciprocal Rank Fusion constant.

    Returns:
        Every passage once, best first.

    Raises:
        ValueError: a ranking names an index outside ``passages``, or a weight or ``rrf_k`` is negative.
    """
    n = len(passages)
    if rrf_k < 0 or link_top < 0 or link_weight < 0 or coverage_weight < 0:
        raise ValueError("rrf_k, link_top, link_weight and coverage_weight must be >= 0")
    for ranking, _ in rankings:
        for index in ranking:
            if not 0 <= index < n:
                raise ValueError(f"ranking index {index} is outside 0..{n - 1}")
    fused = reciprocal_rank_fusion([r for r, _ in rankings], k=rrf_k, weights=[w for _, w in rankings])
    relevance = [0.0] * n
    for index, score in fused:
        relevance[index] = score
    # Ties of the greedy choice keep the order of first appearance (in the rankings, then the rest).
    order = dict.fromkeys([*(index for ranking, _ in rankings for index in ranking), *range(n)])
    first_seen = {index: position for position, index in enumerate(order)}
    top = max(relevance, default=0.0)
    if top > 0:
        relevance = [r / top for r in relevance]
    targets = [t for t in dict.fromkeys(targets) if t.strip()]
    about = [[t for t in targets if passages[i].is_about(t)] for i in range(n)]
    uncovered = set(targets)
    link = [0.0] * n
    placed: list[RankedPassage] = []
    remaining = set(range(n))
    while remaining:
        best, best_key = -1, None
        for index in remaining:
            cover = len([t for t in about[index] if t in uncovered]) / len(targets) if targets else 0.0
            gain = relevance[index] + link_weight * link[index] + coverage_weight * cover
            key = (gain, -first_seen[index])
            if best_key is None or key > best_key:
                best, best_key = index, key
        cover = len([t for t in about[best] if t in uncovered]) / len(targets) if targets else 0.0
        placed.append(RankedPassage(best, best_key[0], relevance[best], link[best], cover))
        remaining.discard(best)
        uncovered.difference_update(about[best])
        if len(placed) <= link_top:
            # A placed top passage lifts every remaining passage whose subject it names.
            source = passages[best]
            for index in remaining:
                subject = passages[index].subject
                if (
                    subject
                    and not names_match(subject, source.subject or "")
                    and mentions(source.text, subject)
                ):
                    link[index] = max(link[index], relevance[best])
    return placed
