"""Retrieval and answer metrics against hand-computed values."""

from __future__ import annotations

import pytest

from llama_index_mhop.rules.metrics import (
    all_gold_at_k,
    answer_exact_match,
    answer_f1,
    dedupe,
    f1_at_k,
    normalize_answer,
    precision_at_k,
    recall_at_k,
)
from llama_index_mhop.rules.text import normalize_title

METRICS = (precision_at_k, recall_at_k, f1_at_k, all_gold_at_k)


def test_dedupe_keeps_first_positions():
    assert dedupe(["a", "b", "a", "c", "b"]) == ["a", "b", "c"]


def test_two_gold_with_duplicates_in_the_ranking():
    # Deduplicated ranking: a, b, c, d. The second "a" must not push "c" out of the top 3.
    ranking, gold = ["a", "b", "a", "c", "d"], ["a", "c"]
    assert precision_at_k(ranking, gold, 2) == pytest.approx(1 / 2)
    assert recall_at_k(ranking, gold, 2) == pytest.approx(1 / 2)
    assert f1_at_k(ranking, gold, 2) == pytest.approx(1 / 2)
    assert all_gold_at_k(ranking, gold, 2) == 0.0
    assert precision_at_k(ranking, gold, 3) == pytest.approx(2 / 3)
    assert recall_at_k(ranking, gold, 3) == 1.0
    assert f1_at_k(ranking, gold, 3) == pytest.approx(0.8)  # 2 * (2/3 * 1) / (2/3 + 1)
    assert all_gold_at_k(ranking, gold, 3) == 1.0


def test_three_gold():
    ranking, gold = ["x", "g1", "y", "g2", "z", "g3"], ["g1", "g2", "g3"]
    assert recall_at_k(ranking, gold, 2) == pytest.approx(1 / 3)
    assert precision_at_k(ranking, gold, 2) == pytest.approx(1 / 2)
    assert f1_at_k(ranking, gold, 2) == pytest.approx(0.4)  # 2 * (1/6) / (5/6)
    assert recall_at_k(ranking, gold, 4) == pytest.approx(2 / 3)
    assert f1_at_k(ranking, gold, 4) == pytest.approx(4 / 7)  # P=1/2, R=2/3
    assert all_gold_at_k(ranking, gold, 5) == 0.0
    assert all_gold_at_k(ranking, gold, 6) == 1.0


def test_four_gold():
    ranking, gold = ["g1", "g2", "g3", "g4", "x"], ["g4", "g3", "g2", "g1"]
    assert recall_at_k(ranking, gold, 2) == pytest.approx(0.5)
    assert precision_at_k(ranking, gold, 2) == 1.0
    assert f1_at_k(ranking, gold, 2) == pytest.approx(2 / 3)
    assert all_gold_at_k(ranking, gold, 3) == 0.0
    assert [m(ranking, gold, 4) for m in METRICS] == [1.0, 1.0, 1.0, 1.0]
    assert precision_at_k(ranking, gold, 5) == pytest.approx(4 / 5)


def test_k_larger_than_the_ranking_divides_precision_by_k():
    ranking, gold = ["g1", "x"], ["g1", "g2"]
    assert precision_at_k(ranking, gold, 5) == pytest.approx(1 / 5)
    assert recall_at_k(ranking, gold, 5) == pytest.approx(1 / 2)
    assert f1_at_k(ranking, gold, 5) == pytest.approx(2 / 7)  # 2 * (1/5 * 1/2) / (1/5 + 1/2)
    assert all_gold_at_k(ranking, gold, 5) == 0.0
    assert all_gold_at_k(["g2", "g1"], gold, 50) == 1.0


def test_empty_ranking_scores_zero_and_gold_duplicates_count_once():
    assert [m([], ["a"], 3) for m in METRICS] == [0.0, 0.0, 0.0, 0.0]
    assert recall_at_k(["a"], ["a", "a"], 1) == 1.0
    assert all_gold_at_k(["a"], ["a", "a"], 1) == 1.0


@pytest.mark.parametrize("metric", METRICS)
def test_empty_gold_raises(metric):
    with pytest.raises(ValueError, match="gold is empty"):
        metric(["a", "b"], [], 2)


@pytest.mark.parametrize("metric", METRICS)
@pytest.mark.parametrize("k", [0, -1, 2.0, True])
def test_bad_k_raises(metric, k):
    with pytest.raises(ValueError, match="k must be"):
        metric(["a"], ["a"], k)


def test_all_gold_at_21_is_hovers_discrete_retrieval_eval():
    gold = [normalize_title(t) for t in ("The Beatles", "Abbey Road")]
    retrieved = [f"Filler {i} | text" for i in range(20)] + ["Abbey Road | An album.", "the beatles | A band."]
    ranking = [normalize_title(d) for d in retrieved]
    assert all_gold_at_k(ranking, gold, 21) == 0.0  # "the beatles" is 22nd
    assert all_gold_at_k(ranking, gold, 22) == 1.0


# -- answers: SQuAD's normalisation, exact match and token F1, the best over the gold answer and its aliases ----


def test_normalize_answer_lowercases_and_strips_punctuation_articles_and_spaces():
    assert normalize_answer("  The Eiffel-Tower,  in Paris! ") == "eiffeltower in paris"
    assert normalize_answer("An apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # an article only as a whole word
    assert normalize_answer("The") == ""


def test_answer_exact_match_takes_the_best_alias():
    assert answer_exact_match("the Ostra.", ["Ostra River", "Ostra"]) == 1.0
    assert answer_exact_match("river Ostra", ["the Ostra", "Ostra"]) == 0.0
    assert answer_exact_match("1602", ["1602"]) == 1.0


def test_answer_f1_on_hand_computed_overlaps():
    # "river ostra" vs "ostra": 1 common token, precision 1/2, recall 1 -> F1 2/3
    assert answer_f1("The river Ostra.", ["the Ostra"]) == pytest.approx(2 / 3)
    # "pell hills in north" vs "pell hills range": 2 common, precision 2/4, recall 2/3 -> F1 4/7
    assert answer_f1("Pell Hills in the north", ["the Pell Hills range"]) == pytest.approx(4 / 7)
    # the best alias wins: 4/7 against the first, 2/3 against "north pell hills" (3 common, p 3/4, r 3/3 -> 6/7)
    assert answer_f1("Pell Hills in the north", ["the Pell Hills range", "north Pell Hills"]) == pytest.approx(6 / 7)
    # repeated tokens count as often as both sides have them: "x x y" vs "x y y" -> 2 common of 3 and 3
    assert answer_f1("x x y", ["x y y"]) == pytest.approx(2 / 3)
    assert answer_f1("nothing shared", ["Ostra"]) == 0.0


def test_answer_f1_of_empty_normalised_answers():
    assert answer_f1("The", ["a"]) == 1.0  # both empty after normalisation (SQuAD scores it 1)
    assert answer_f1("The", ["Ostra"]) == 0.0


def test_answer_metrics_need_a_gold_answer():
    for metric in (answer_exact_match, answer_f1):
        with pytest.raises(ValueError, match="no gold answer"):
            metric("Ostra", [])
