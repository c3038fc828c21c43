"""The false-alarm bench counts the product's verdicts: one hour far below the one before, in
front of a sandbox that expects more, is one alarm, and only at the z values it exceeds."""

from __future__ import annotations

import numpy as np
import pytest

from bench.anomaly_false_alarms import POLICY, false_alarms, summarise
from rlops.pipeline_steps.drift.anomaly import ReturnSummary


def _hour(mean: float, n: int = 1000, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return (r - r.mean()) / r.std(ddof=1) + mean  # se of one hour's mean: 1/sqrt(n)


def test_one_drop_of_3_2_standard_errors_is_one_alarm_at_z_3_and_none_at_3_5() -> None:
    se = np.sqrt(2 / 1000)
    hours = summarise([_hour(0.70), _hour(0.70), _hour(0.70 - 3.2 * se), _hour(0.70 - 3.2 * se)])
    sandbox = ReturnSummary.of(_hour(0.90, 2000), POLICY, "baseline")
    at3 = false_alarms(hours, sandbox, min_drop=0.1, z=3.0)
    at35 = false_alarms(hours, sandbox, min_drop=0.1, z=3.5)
    assert (at3["checks"], at3["alarms"], at3["previous_reference_trips"]) == (3, 1, 1)
    assert at3["rate"] == pytest.approx(1 / 3) and at3["hours_between_alarms"] == pytest.approx(3.0)
    assert at3["normal_tail"] == pytest.approx(0.00135, abs=1e-5)
    assert at35["alarms"] == 0 and at35["hours_between_alarms"] is None
    assert at35["rate_upper_95"] == pytest.approx(1 - 0.025 ** (1 / 3))


def test_a_sandbox_within_anomaly_drop_of_the_live_return_raises_no_alarm() -> None:
    hours = summarise([_hour(0.70), _hour(0.55)])  # 3.35 standard errors below the hour before …
    sandbox = ReturnSummary.of(_hour(0.62, 2000), POLICY, "baseline")  # … but only 0.07 below the sandbox
    out = false_alarms(hours, sandbox, min_drop=0.1, z=3.0)
    assert out["previous_reference_trips"] == 1 and out["alarms"] == 0


def test_too_few_hours_or_episodes_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.anomaly_false_alarms import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--hours", "1"])
    assert exit_info.value.code == 2
    assert "--hours and --episodes must each be at least 2" in capsys.readouterr().err
