"""The paired significance test of ``mhop bench`` against cases whose answer is known by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from llama_index_mhop.bench.significance import compare_runs, paired_comparison


def _exact_sign_flip_p(differences: list[float]) -> float:
    """The two-sided exact paired permutation p-value, by enumerating every sign pattern."""
    observed = abs(sum(differences))
    patterns = list(itertools.product((1, -1), repeat=len(differences)))
    extreme = sum(abs(sum(s * d for s, d in zip(signs, differences, strict=True))) >= observed - 1e-12 for signs in patterns)
    return extreme / len(patterns)


def test_identical_runs_give_p_one_and_a_zero_interval() -> None:
    scores = [0.0, 50.0, 100.0, 100.0, 50.0] * 20
    result = paired_comparison(scores, scores)
    assert (result.difference, result.ci_low, result.ci_high, result.p_value, result.n) == (0.0, 0.0, 0.0, 1.0, 100)


def test_exact_test_on_a_tiny_example_matches_the_hand_count() -> None:
    # Differences 1, 2, 3: of the 8 sign patterns only +++ and --- reach |mean| >= 2, so p = 2/8.
    result = paired_comparison([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])
    assert result.p_value == pytest.approx(0.25)
    assert result.difference == pytest.approx(2.0)
    assert 1.0 <= result.ci_low <= result.ci_high <= 3.0


@pytest.mark.parametrize("differences", [[3.0, 1.0, 1.0, -1.0], [2.0, -1.0, 0.0, 4.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
def test_exact_test_matches_a_full_enumeration(differences: list[float]) -> None:
    baseline = [10.0] * len(differences)
    treatment = [b + d for b, d in zip(baseline, differences, strict=True)]
    assert paired_comparison(treatment, baseline).p_value == pytest.approx(_exact_sign_flip_p(differences))


def test_a_large_consistent_gap_is_significant_and_its_interval_excludes_zero() -> None:
    rng = np.random.default_rng(7)
    baseline = rng.uniform(0, 60, size=100)
    treatment = baseline + 20 + rng.normal(0, 5, size=100)
    result = paired_comparison(treatment, baseline)
    assert result.p_value < 0.001
    assert 15 < result.ci_low < result.difference < result.ci_high < 25


def test_a_small_noisy_gap_is_not_significant() -> None:
    # 52 questions where only the treatment finds the gold, 48 where only the baseline does: a 4-point gap.
    treatment = [100.0] * 52 + [0.0] * 48
    baseline = [0.0] * 52 + [100.0] * 48
    result = paired_comparison(treatment, baseline)
    assert result.difference == pytest.approx(4.0)
    assert result.p_value > 0.5
    assert result.ci_low < 0 < result.ci_high


def test_the_result_is_reproducible_for_a_seed() -> None:
    rng = np.random.default_rng(3)
    a, b = rng.uniform(size=200), rng.uniform(size=200)
    assert paired_comparison(a, b, seed=5) == paired_comparison(a, b, seed=5)


@pytest.mark.parametrize(
    ("treatment", "baseline", "message"),
    [([1.0, 2.0], [1.0], "one length"), ([], [], "no paired"), ([1.0, float("nan")], [0.0, 0.0], "finite")],
)
def test_bad_input_is_rejected(treatment: list[float], baseline: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_comparison(treatment, baseline)


def test_compare_runs_compares_every_run_with_the_baseline_per_metric_and_k() -> None:
    runs = [
        {"name": "vector", "per_question": {"recall@2": [0.0, 50.0, 100.0], "all_gold@2": [0.0, 0.0, 100.0]}},
        {"name": "other", "per_question": {"recall@2": [50.0, 100.0, 100.0], "all_gold@2": [0.0, 100.0, 100.0]}},
    ]
    report = compare_runs(runs, baseline="vector", k_values=[2])
    assert report["baseline"] == "vector"
    assert set(report["runs"]) == {"other"}
    recall = report["runs"]["other"]["recall@2"]
    assert recall["difference"] == pytest.approx(100 / 3)
    assert recall["p_value"] == pytest.approx(_exact_sign_flip_p([50.0, 50.0, 0.0]))
    assert report["runs"]["other"]["all_gold@2"]["p_value"] == pytest.approx(1.0)  # one question differs
    assert compare_runs(runs, baseline="bm25", k_values=[2]) == {}
