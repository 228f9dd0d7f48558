"""Reciprocal Rank Fusion (Cormack, Clarke and Buettcher, SIGIR 2009), as used by seeds 000 and 001.

``score(d) = sum over ranked lists L containing d of w_L / (k + rank_L(d))`` with ranks starting at 1 and every
weight ``w_L`` 1 unless given. The package's one RRF: the fusion retriever, the confidence loop's round-1 order
and the listwise reranker's relevance all call :func:`reciprocal_rank_fusion`.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

__all__ = ["DEFAULT_RRF_K", "anchored_fusion", "reciprocal_rank_fusion"]

DEFAULT_RRF_K = 60
H = TypeVar("H", bound=Hashable)


def reciprocal_rank_fusion(
    ranked_lists: Iterable[Sequence[H]],
    k: int = DEFAULT_RRF_K,
    top_n: int | None = None,
    weights: Sequence[float] | None = None,
) -> list[tuple[H, float]]:
    """Fuse ranked lists of ids into one ranking by Reciprocal Rank Fusion.

    Args:
        ranked_lists: each a ranking of ids, best first. An id repeated inside one list counts once,
            at its best (first) rank. Empty lists contribute nothing.
        k: the RRF constant (60 in the paper and the seed).
        top_n: keep only the best ``top_n`` (all when None).
        weights: one weight per ranked list (all 1 when None); a list's contributions are multiplied by it.

    Returns:
        ``(id, score)`` pairs, best first. Ties are broken by the id's best rank in any list, then by the order
        in which ids were first seen, so the result is deterministic for a given input.

    Raises:
        ValueError: ``k``, ``top_n`` or a weight is negative, or ``weights`` and the lists differ in number.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if top_n is not None and top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    lists = list(ranked_lists)
    if weights is None:
        weights = [1.0] * len(lists)
    if len(weights) != len(lists):
        raise ValueError(f"{len(weights)} weights for {len(lists)} ranked lists")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    contributions: dict[H, list[float]] = {}
    best_rank: dict[H, int] = {}
    for ranking, weight in zip(lists, weights, strict=True):
        seen: set[H] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            contributions.setdefault(item, []).append(weight / (k + rank))
            best_rank[item] = min(best_rank.get(item, rank), rank)
    # fsum is exactly rounded, so a score does not depend on the order of the lists (plain + would).
    scores = {item: math.fsum(parts) for item, parts in contributions.items()}
    first_seen = {item: position for position, item in enumerate(scores)}
    fused = sorted(scores.items(), key=lambda pair: (-pair[1], best_rank[pair[0]], first_seen[pair[0]]))
    return fused if top_n is None else fused[:top_n]


def anchored_fusion(
    anchor: Sequence[H],
    reached_from: Mapping[H, Sequence[H]] | None = None,
    rest: Iterable[H] = (),
    top_n: int | None = None,
) -> list[H]:
    """Fuse around the original query's own ranking without diluting it.

    The ``anchor`` (the query's own ranking) keeps its order. Right after each placed id come the ids reached
    from it (``reached_from[id]``, e.g. the passage a bridge entity of that passage leads to), then the ids
    reached from those, depth first, so a chain of hops sits under the passage it starts from. After the anchor
    come the other candidates in the order of ``rest`` (e.g. a Reciprocal Rank Fusion of the expansion lists),
    each again followed by what it reaches. Every id appears once, at its first place; no id rises above the
    anchor's top id.

    Args:
        anchor: the original query's ranking, best first.
        reached_from: for an id, the ids reached from it, best first.
        rest: every other candidate, best first.
        top_n: keep only the first ``top_n`` (all when None).

    Raises:
        ValueError: ``top_n`` is negative.
    """
    if top_n is not None and top_n < 0:
        raise ValueError(f"top_n must be >= 0, got {top_n}")
    reached_from = reached_from or {}
    fused: list[H] = []
    placed: set[H] = set()
    for start in [*anchor, *rest]:
        stack = [start]
        while stack:
            item = stack.pop()
            if item in placed:
                continue
            placed.add(item)
            fused.append(item)
            stack.extend(reversed(list(reached_from.get(item, ()))))
    return fused if top_n is None else fused[:top_n]
