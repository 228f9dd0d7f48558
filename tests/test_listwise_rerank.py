"""The LLM-free listwise reranker: the query's own ranking as the anchor, each bridge hop after its source."""

from __future__ import annotations

import pytest

from llama_index_mhop.rules.confidence import listwise_rerank
from llama_index_mhop.rules.ranking import PassageView


def test_listwise_rerank_keeps_the_anchor_and_puts_the_hop_after_its_source():
    query = "Who directed the film that was shot in Leland?"
    views = [
        PassageView("a", "Leland is a town. The film Maximum Overdrive was shot in Leland.", "Leland"),
        PassageView("b", "A distractor about rivers.", "River"),
        PassageView("c", "Maximum Overdrive is a 1986 film directed by Stephen King.", "Maximum Overdrive"),
        PassageView("d", "Stephen King is an author.", "Stephen King"),
    ]
    # The anchor (the original query's ranking) is a, b, c; a second ranking has d first. rrf_k 0:
    # relevance a 1, b 1/2, c 1/3, d 1 (its rank-1 hit), normalised by the maximum 1.
    ranked = listwise_rerank(query, views, [([0, 1, 2], 1.0), ([3], 1.0)], rrf_k=0)
    # a names Maximum Overdrive in its sentence about the shooting ("shot in Leland"): c follows a; c names
    # Stephen King after "directed": d follows c. Then the rest of the anchor (b).
    assert [r.index for r in ranked] == [0, 2, 3, 1]
    assert [r.linked_from for r in ranked] == [None, 0, 2, None]
    assert [r.relevance for r in ranked] == pytest.approx([1.0, 1 / 3, 1.0, 0.5])
    # Without a bridge (nothing about "Maximum Overdrive" in the pool) the anchor's order stays.
    assert [r.index for r in listwise_rerank(query, views[:2], [([0, 1], 1.0)], rrf_k=0)] == [0, 1]
    with pytest.raises(ValueError, match="outside"):
        listwise_rerank(query, views, [([0, 7], 1.0)])


def test_no_weight_lifts_a_passage_above_the_anchor():
    views = [PassageView(i, f"Passage {i} about nothing in particular.", f"Title {i}") for i in "abc"]
    # A heavier second list puts a first; the anchor (c, a, b) still decides, the weights only the relevance.
    ranked = listwise_rerank("which passage?", views, [([2, 0, 1], 1.0), ([0, 1, 2], 3.0)], rrf_k=60)
    assert [r.index for r in ranked] == [2, 0, 1]
    assert ranked[1].relevance == 1.0  # a: 1/62 + 3/61, the largest
    with pytest.raises(ValueError, match="weights"):
        listwise_rerank("which passage?", views, [([0], -1.0)])
