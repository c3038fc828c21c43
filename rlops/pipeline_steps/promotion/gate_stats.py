"""The statistics of the promotion gates (:mod:`rlops.pipeline_steps.promotion.gates`): a paired
bootstrap interval of the mean return difference (sandbox), a two-proportion z-test, the same with a
non-inferiority margin and a Welch t-test (live A/B), each one-sided where a gate asks whether the
candidate is worse, and the scale
of returns every margin on them is a share of (:func:`return_scale`, for the off-policy gate and the
roll-out's regression check too).

Pure functions over arrays and counts; a sample too small or not finite gives NaN, never a verdict.
"""

from __future__ import annotations

import math

import numpy as np


def paired_bootstrap(diffs: np.ndarray, samples: int, confidence: float, seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``diffs`` and the percentile bootstrap interval ``(low, high)`` of the mean.
    Any non-finite difference makes all three NaN (no interval can be trusted)."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.size == 0 or not np.isfinite(d).all():
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = np.empty(samples)
    chunk = max(1, 4_000_000 // d.size)  # bound memory: ``chunk × n`` indices at a time
    for start in range(0, samples, chunk):
        k = min(chunk, samples - start)
        means[start : start + k] = d[rng.integers(0, d.size, size=(k, d.size))].mean(axis=1)
    alpha = 1.0 - confidence
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(d.mean()), float(lo), float(hi)


def two_proportion_z(x1: int, n1: int, x2: int, n2: int) -> tuple[float, float]:
    """z statistic of ``p1 - p2`` (pooled) and the one-sided p-value of ``p1 > p2``."""
    from scipy.stats import norm

    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    p = (x1 + x2) / (n1 + n2)
    se = math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
    if se == 0:  # pooled rate 0 or 1: both groups identical
        return 0.0, 0.5
    z = (x1 / n1 - x2 / n2) / se
    return float(z), float(norm.sf(z))


def proportion_beyond(x1: int, n1: int, x2: int, n2: int, margin: float) -> tuple[float, float]:
    """z statistic of ``p1 − p2 − margin`` (unpooled standard error) and the one-sided p-value that
    ``p1 − p2`` exceeds ``margin``: a non-inferiority test of a rate against another. Two rates
    without variance (each 0 or 1) decide by their difference alone: p 0 beyond the margin, else 1."""
    from scipy.stats import norm

    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    p1, p2 = x1 / n1, x2 / n2
    d = p1 - p2 - margin
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    if se == 0:
        return (math.inf, 0.0) if d > 0 else (-math.inf if d < 0 else 0.0, 1.0)
    return float(d / se), float(norm.sf(d / se))


def welch_greater(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Welch t statistic of ``mean(a) - mean(b)`` and the one-sided p-value of ``mean(a) > mean(b)``."""
    from scipy.stats import ttest_ind

    if len(a) < 2 or len(b) < 2:
        return float("nan"), float("nan")
    res = ttest_ind(a, b, equal_var=False, alternative="greater")
    return float(res.statistic), float(res.pvalue)


def return_scale(mean: float, sd: float, floor: float) -> float:
    """The scale a margin on returns is a share of: ``|mean|``, but at least ``floor`` × the
    per-episode return's standard deviation, so that a value near zero does not make every margin
    vanish (NaN when ``mean`` is not finite). The same defaults then judge a credit return (≈ 0.3)
    and a click rate (≈ 0.005) alike."""
    if not math.isfinite(mean):
        return float("nan")
    return max(abs(mean), floor * sd if math.isfinite(sd) else 0.0)


__all__ = ["paired_bootstrap", "proportion_beyond", "return_scale", "two_proportion_z", "welch_greater"]
