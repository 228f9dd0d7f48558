"""The LLM-free listwise reranker: relevance, link and coverage terms computed by hand."""

from __future__ import annotations

import pytest

from llama_index_mhop.confidence_strategies import PassageView
from llama_index_mhop.listwise_rerank import listwise_rerank


def test_listwise_rerank_formula_by_hand():
    views = [
        PassageView("a", "Leland is a town. Maximum Overdrive was shot there.", "Leland"),
        PassageView("b", "A distractor about rivers.", "River"),
        PassageView("c", "Maximum Overdrive is a 1986 film.", "Maximum Overdrive"),
    ]
    # One ranking a, b, c with weight 1 and rrf_k 0: relevance 1, 1/2, 1/3 before normalising (max is 1).
    ranked = listwise_rerank(
        views, [([0, 1, 2], 1.0)], targets=["Leland"], link_weight=1.0, coverage_weight=0.5, rrf_k=0
    )
    # a: 1 + 0.5 coverage = 1.5. Then c is linked from a: 1/3 + 1 * 1 = 1.333 > b's 0.5.
    assert [r.index for r in ranked] == [0, 2, 1]
    assert ranked[0].score == pytest.approx(1.5) and ranked[1].score == pytest.approx(1 / 3 + 1.0)
    assert ranked[1].link == 1.0 and ranked[2].score == pytest.approx(0.5)
    # Without the link term the first-stage order stays.
    assert [r.index for r in listwise_rerank(views, [([0, 1, 2], 1.0)], link_weight=0.0, rrf_k=0)] == [
        0,
        1,
        2,
    ]
    with pytest.raises(ValueError, match="outside"):
        listwise_rerank(views, [([0, 7], 1.0)])


def test_original_query_weight_keeps_its_ranking_on_top():
    views = [PassageView(i, f"Passage {i} about nothing in particular.", f"Title {i}") for i in "abc"]
    # The weighted list (c first) outweighs two unit lists that put a first.
    ranked = listwise_rerank(views, [([2, 0, 1], 3.0), ([0, 1, 2], 1.0), ([0, 2, 1], 1.0)], rrf_k=60)
    assert [r.index for r in ranked] == [2, 0, 1]
    with pytest.raises(ValueError, match="weights"):
        listwise_rerank(views, [([0], -1.0)])
