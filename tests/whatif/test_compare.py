"""The intervals of a what-if, pinned on cases small enough to check by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlops.whatif.compare import difference, mean_interval, z_of


def test_z_of_95_percent() -> None:
    assert z_of(0.95) == pytest.approx(1.959964, abs=1e-6)


def test_normal_interval_of_a_mean() -> None:
    # mean 2, sample std 1 over 4 values: half-width 1.96 * 1 / 2
    e = mean_interval(np.array([1.0, 2.0, 2.0, 3.0]) * 1.0, 1.96, rate=False)
    s = float(np.std([1, 2, 2, 3], ddof=1))
    assert (e.mean, e.n) == (2.0, 4) and e.high - e.mean == pytest.approx(1.96 * s / 2)


def test_wilson_interval_of_a_rate_stays_in_0_1() -> None:
    e = mean_interval(np.zeros(100), 1.96, rate=True)
    assert e.mean == 0.0 and e.low == 0.0 and e.high == pytest.approx(1.96**2 / (100 + 1.96**2))
    e = mean_interval(np.array([1.0] * 5 + [0.0] * 5), 1.96, rate=True)
    assert e.low == pytest.approx(1 - e.high) and 0.2 < e.low < 0.5


def test_paired_difference_cancels_the_shared_spread() -> None:
    a = np.array([0.0, 10.0, 20.0, 30.0])
    d = difference(a, np.ones(4, bool), a + 1.0, np.ones(4, bool), 1.96)
    assert (d.mean, d.low, d.high) == (1.0, 1.0, 1.0)


def test_unpaired_difference_when_each_counts_its_own_episodes() -> None:
    a, b = np.array([0.0, 1.0, 0.0, 1.0]), np.array([1.0, 1.0, 0.0, 1.0])
    ca, cb = np.array([True, True, True, True]), np.array([True, True, False, True])
    d = difference(a, ca, b, cb, 1.96)
    assert d.mean == pytest.approx(1.0 - 0.5)
    half = 1.96 * math.sqrt(np.var(a, ddof=1) / 4 + 0.0 / 3)
    assert d.high - d.mean == pytest.approx(half)


def test_nothing_to_count_is_nan_not_zero() -> None:
    e = mean_interval(np.array([]), 1.96, rate=True)
    assert e.n == 0 and math.isnan(e.mean) and e.to_dict()["mean"] is None
