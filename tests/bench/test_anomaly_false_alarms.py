"""The false-alarm bench counts the product's verdicts, carrying the check's state from hour to
hour: a chance hour that reverts is a suspect and no alarm; without the confirmation it is one."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from bench.anomaly_false_alarms import POLICY, false_alarms, summarise
from rlops.pipeline_steps.drift.anomaly import AnomalyRule, ReturnSummary

RULE = AnomalyRule(min_drop=0.1, z=2.5, confirm="next_hour", confirm_z=3.5, level_hours=6, scale_floor=0.05)


def _hour(mean: float, n: int = 1000, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return (r - r.mean()) / r.std(ddof=1) + mean  # se of one hour's mean: 1/sqrt(n)


SANDBOX = ReturnSummary.of(_hour(0.90, 2000), POLICY, "baseline")


def test_a_chance_hour_that_reverts_is_a_suspect_and_no_alarm_unless_unconfirmed() -> None:
    hours = summarise([_hour(m) for m in (0.70, 0.70, 0.70, 0.58, 0.70, 0.70)])
    confirmed = false_alarms(hours, SANDBOX, RULE)
    unconfirmed = false_alarms(hours, SANDBOX, replace(RULE, confirm="none"))
    assert (confirmed["checks"], confirmed["suspects"], confirmed["alarms"]) == (5, 1, 0)
    assert confirmed["hours_between_alarms"] is None
    assert confirmed["rate_upper_95"] == pytest.approx(1 - 0.025 ** (1 / 5))
    assert (unconfirmed["alarms"], unconfirmed["rate"]) == (1, pytest.approx(1 / 5))


def test_a_fall_that_stays_is_one_alarm() -> None:
    hours = summarise([_hour(m) for m in (0.70, 0.70, 0.70, 0.58, 0.58, 0.58)])
    out = false_alarms(hours, SANDBOX, RULE)
    assert (out["suspects"], out["alarms"]) == (1, 1)


def test_too_few_hours_or_episodes_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.anomaly_false_alarms import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--hours", "1"])
    assert exit_info.value.code == 2
    assert "--hours and --episodes must each be at least 2" in capsys.readouterr().err
