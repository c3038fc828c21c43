"""The sandbox's margins on returns are shares of the champion's return scale: the same defaults
give the same verdicts on a credit return (≈ 0.3) and on a click rate 100× smaller, and a
champion whose mean is zero still has a margin (its standard deviation's floor)."""

from __future__ import annotations

import numpy as np
import pytest

from rlops.common.params_promotion import GateConfig
from rlops.pipeline_steps.promotion.gate_stats import return_scale
from rlops.pipeline_steps.promotion.gates import champion_scale, segment_gates, share_text


def test_return_scale_by_hand() -> None:
    assert return_scale(0.3, 1.0, 0.05) == pytest.approx(0.3)
    assert return_scale(-0.3, 1.0, 0.05) == pytest.approx(0.3)
    assert return_scale(0.0, 2.0, 0.05) == pytest.approx(0.1)  # the floor: 0.05 × sd
    assert np.isnan(return_scale(float("nan"), 1.0, 0.05))
    rb = np.array([0.0, 0.2, 0.4, 0.6])
    assert champion_scale(rb, GateConfig()) == pytest.approx(0.3)
    assert share_text(0.15) == "15%" and share_text(0.005) == "0.5%"


def _segment_verdicts(unit: float) -> list[bool]:
    """A champion earning ``0.3·unit`` per episode; the candidate loses 10 % of that in segment
    ``a`` and 20 % in segment ``b`` (the default tolerance is 15 %)."""
    n = 400
    rb = np.full(2 * n, 0.3 * unit)
    rc = rb.copy()
    rc[:n] -= 0.03 * unit
    rc[n:] -= 0.06 * unit
    a, b = np.zeros(2 * n, bool), np.zeros(2 * n, bool)
    a[:n], b[n:] = True, True
    gates = segment_gates(rc, rb, {"a": a, "b": b}, GateConfig())
    return [g.passed for g in gates]


@pytest.mark.parametrize("unit", [1.0, 0.01, 100.0])
def test_the_same_defaults_judge_every_reward_scale_alike(unit: float) -> None:
    assert _segment_verdicts(unit) == [True, False]


def test_a_segment_that_loses_every_click_is_refused() -> None:
    """A margin of 0.05 in reward units passed it: the drop (0.005) is smaller than the margin."""
    rb = np.full(500, 0.005)
    rc = np.zeros(500)
    everyone = np.ones(500, bool)
    (relative,) = segment_gates(rc, rb, {"all": everyone}, GateConfig())
    assert not relative.passed
    assert "15% of the champion's scale" in relative.threshold
