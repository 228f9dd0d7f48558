import pytest

from llama_index_mhop.rules.ranking import anchored_fusion, reciprocal_rank_fusion


def test_scores_match_hand_computation():
    fused = dict(reciprocal_rank_fusion([["a", "b", "c"], ["b", "c"], ["c"]], k=60))
    assert fused["a"] == pytest.approx(1 / 61)
    assert fused["b"] == pytest.approx(1 / 62 + 1 / 61)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 62 + 1 / 61)


def test_order_is_by_score_then_best_rank_then_first_seen():
    # a and x tie on score (one rank-1 hit each): a was seen first. b and y tie too (rank 2).
    fused = reciprocal_rank_fusion([["a", "b"], ["x", "y"]], k=60)
    assert [item for item, _ in fused] == ["a", "x", "b", "y"]
    # p: ranks 1 and 3; q: rank 2 twice. Scores differ: 1/61 + 1/63 > 2/62.
    fused = reciprocal_rank_fusion([["p", "q"], ["z", "q", "p"]], k=60)
    assert [item for item, _ in fused][:2] == ["p", "q"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 63)
    assert fused[1][1] == pytest.approx(2 / 62)


def test_duplicates_inside_one_list_count_once_at_best_rank():
    fused = dict(reciprocal_rank_fusion([["a", "b", "a", "a"]], k=60))
    assert fused == {"a": pytest.approx(1 / 61), "b": pytest.approx(1 / 62)}


def test_empty_inputs():
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []
    assert dict(reciprocal_rank_fusion([[], ["a"]], k=0)) == {"a": 1.0}


def test_top_n_and_k():
    fused = reciprocal_rank_fusion([["a", "b", "c"]], k=1, top_n=2)
    assert fused == [("a", pytest.approx(1 / 2)), ("b", pytest.approx(1 / 3))]
    assert reciprocal_rank_fusion([["a"]], top_n=0) == []
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion([["a"]], k=-1)
    with pytest.raises(ValueError, match="top_n"):
        reciprocal_rank_fusion([["a"]], top_n=-2)


def test_weights_multiply_each_lists_contributions():
    fused = dict(reciprocal_rank_fusion([["a", "b"], ["b"]], k=60, weights=[3.0, 1.0]))
    assert fused == {"a": pytest.approx(3 / 61), "b": pytest.approx(3 / 62 + 1 / 61)}
    assert [item for item, _ in reciprocal_rank_fusion([["a"], ["b"]], weights=[0.5, 2.0])] == ["b", "a"]
    with pytest.raises(ValueError, match="weights"):
        reciprocal_rank_fusion([["a"]], weights=[-1.0])
    with pytest.raises(ValueError, match="2 weights for 1"):
        reciprocal_rank_fusion([["a"]], weights=[1.0, 1.0])


def test_anchored_fusion_keeps_the_anchor_and_puts_each_hop_after_its_source():
    anchor = ["a1", "a2", "a3"]
    fused = anchored_fusion(anchor, {"a1": ["b"], "b": ["c"], "a3": ["a2"]}, rest=["x", "c", "y"])
    # b follows a1, c follows b (a chain of hops stays together); a2 is already placed when a3 reaches it.
    assert fused == ["a1", "b", "c", "a2", "a3", "x", "y"]
    assert anchored_fusion(anchor, {}, rest=["a2", "z"], top_n=4) == ["a1", "a2", "a3", "z"]
    assert anchored_fusion([], {"a1": ["b"]}, rest=["a1"]) == ["a1", "b"]
