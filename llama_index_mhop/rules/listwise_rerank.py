"""An LLM-free listwise reranker: the query's own ranking, with each hop placed right after the passage it leads from.

The LLM-free stand-in for seed 001's ``ListwiseDocumentReranker``, which reads all passages together to find
multi-hop links. It never dilutes the original query's ranking at the top; a passage rises above the query's
own hits only by a multi-hop link:

* ``relevance(p) = sum_l w_l / (rrf_k + rank_l(p))`` over the rankings ``l`` that contain ``p`` (weighted
  Reciprocal Rank Fusion), divided by its maximum so it lies in (0, 1]: the order of every candidate;
* the *anchor*, the first ranking (the original query's), keeps its order;
* the *links* (:func:`~llama_index_mhop.rules.bridges.link_passages`): the anchor's top passage leads, through the
  bridge entity its question-matching sentence names, to the best-ranked passage about that entity, which is
  placed right after it; that passage leads to the next hop the same way;
* then every other passage by relevance (:func:`~llama_index_mhop.rules.fusion.anchored_fusion`).

Ties follow :func:`~llama_index_mhop.rules.fusion.reciprocal_rank_fusion` (best rank, then first seen), so the result is
deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .bridges import link_passages
from .fusion import anchored_fusion, reciprocal_rank_fusion
from .passage_views import PassageView

__all__ = ["DEFAULT_RERANK_RRF_K", "RankedPassage", "listwise_rerank"]

DEFAULT_RERANK_RRF_K = 60


@dataclass(frozen=True)
class RankedPassage:
    """One position of the listwise ranking: the passage's index in the input, its relevance, and the index
    of the passage that led to it by a bridge link (None when it holds its place by relevance)."""

    index: int
    relevance: float
    linked_from: int | None = None


def listwise_rerank(
    query: str,
    passages: Sequence[PassageView],
    rankings: Sequence[tuple[Sequence[int], float]],
    rrf_k: int = DEFAULT_RERANK_RRF_K,
) -> list[RankedPassage]:
    """Rank all passages together (see the module docstring).

    Args:
        query: the question or claim.
        passages: the candidate passages.
        rankings: ``(ranking, weight)`` pairs; a ranking lists indices into ``passages``, best first. The first
            is the anchor (the original query's ranking).
        rrf_k: the Reciprocal Rank Fusion constant.

    Returns:
        Every passage once, best first.

    Raises:
        ValueError: a ranking names an index outside ``passages``, or a weight or ``rrf_k`` is negative.
    """
    n = len(passages)
    if rrf_k < 0:
        raise ValueError(f"rrf_k must be >= 0, got {rrf_k}")
    for ranking, _ in rankings:
        for index in ranking:
            if not 0 <= index < n:
                raise ValueError(f"ranking index {index} is outside 0..{n - 1}")
    fused = reciprocal_rank_fusion([r for r, _ in rankings], k=rrf_k, weights=[w for _, w in rankings])
    relevance = [0.0] * n
    for index, score in fused:
        relevance[index] = score
    top = max(relevance, default=0.0)
    if top > 0:
        relevance = [r / top for r in relevance]
    # The fused order (ties by best rank, then first seen), then passages no ranking holds.
    by_relevance = list(dict.fromkeys([*(index for index, _ in fused), *range(n)]))
    anchor = list(dict.fromkeys(rankings[0][0])) if rankings else []
    links: dict[int, list[int]] = {}
    if anchor:
        position = {passage.id: i for i, passage in enumerate(passages)}
        found = link_passages(query, [passages[anchor[0]]], [passages[i] for i in by_relevance])
        links = {position[source]: [position[t] for t in targets] for source, targets in found.items()}
    linked_from = {target: source for source, targets in links.items() for target in targets}
    order = anchored_fusion(anchor, links, by_relevance)
    return [RankedPassage(i, relevance[i], linked_from.get(i)) for i in order]
