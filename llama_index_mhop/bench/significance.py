"""Paired significance against a baseline: sign-flip permutation tests, seeded bootstrap intervals (scipy)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats

__all__ = ["DEFAULT_CONFIDENCE_LEVEL", "DEFAULT_N_RESAMPLES", "DEFAULT_SEED", "PairedComparison", "compare_runs",
           "paired_comparison"]

DEFAULT_N_RESAMPLES = 10_000
DEFAULT_CONFIDENCE_LEVEL = 0.95
DEFAULT_SEED = 0


@dataclass(frozen=True)
class PairedComparison:
    """A retriever against a baseline on one metric, in the metric's units: the mean per-question difference, its
    bootstrap interval, the two-sided paired permutation p-value (1.0 when every difference is 0) and ``n``."""

    difference: float
    ci_low: float
    ci_high: float
    p_value: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mean_difference(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.mean(x - y, axis=axis)


def paired_comparison(treatment: Sequence[float], baseline: Sequence[float], n_resamples: int = DEFAULT_N_RESAMPLES,
                      confidence_level: float = DEFAULT_CONFIDENCE_LEVEL, seed: int = DEFAULT_SEED) -> PairedComparison:
    """Compare paired per-question scores: mean difference, its confidence interval and a permutation p-value.
    ValueError when the two differ in length, are empty, or hold a value that is not finite."""
    x = np.asarray(treatment, dtype=float)
    y = np.asarray(baseline, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"paired scores must be two flat sequences of one length, got {x.shape} and {y.shape}")
    if x.size == 0:
        raise ValueError("no paired scores to compare")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("paired scores must be finite numbers")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be >= 1, got {n_resamples}")
    if not 0 < confidence_level < 1:
        raise ValueError(f"confidence_level must be between 0 and 1, got {confidence_level}")
    differences = x - y
    mean = float(differences.mean())
    if np.all(differences == differences[0]):
        # Every sign pattern of a constant difference gives |mean| = |observed|; no spread to bootstrap.
        p_value = 1.0 if differences[0] == 0 else float(min(1.0, 2.0 ** (1 - x.size)))
        return PairedComparison(mean, mean, mean, p_value, int(x.size))
    test = stats.permutation_test((x, y), _mean_difference, permutation_type="samples", vectorized=True,
                                  n_resamples=n_resamples, alternative="two-sided", rng=np.random.default_rng(seed))
    interval = stats.bootstrap((differences,), np.mean, n_resamples=n_resamples, confidence_level=confidence_level,
                               method="percentile", rng=np.random.default_rng(seed)).confidence_interval
    return PairedComparison(mean, float(interval.low), float(interval.high), float(test.pvalue), int(x.size))


def compare_runs(runs: Sequence[Mapping[str, Any]], baseline: str = "vector", k_values: Sequence[int] = (),
                 n_resamples: int = DEFAULT_N_RESAMPLES, seed: int = DEFAULT_SEED) -> dict[str, Any]:
    """Every run against the ``baseline`` run, per ``recall@K`` and ``all_gold@K``, from the runs' ``per_question``
    scores (``{}`` when no run is named ``baseline``)."""
    by_name = {run["name"]: run for run in runs}
    if baseline not in by_name:
        return {}
    reference = by_name[baseline]["per_question"]
    keys = [f"{metric}@{k}" for k in k_values for metric in ("recall", "all_gold")]
    compared = {run["name"]: {key: paired_comparison(run["per_question"][key], reference[key], n_resamples,
                                                     seed=seed).as_dict() for key in keys}
                for run in runs if run["name"] != baseline}
    return {"baseline": baseline,
            "test": "two-sided paired permutation test over questions (sign flips of per-question differences)",
            "interval": f"{DEFAULT_CONFIDENCE_LEVEL:.0%} percentile bootstrap of the mean difference",
            "n_resamples": n_resamples, "seed": seed, "runs": compared}
