"""The champion return anomaly: a drop against the sandbox alone is not enough once the champion's
own live return of the previous check is there to compare with."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rlops.pipeline_steps.drift.anomaly import ReturnSummary, check_return_anomaly, return_anomaly

POLICY = "credit_approval-policy/1"


def _returns(mean: float, n: int = 1000, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return (r - r.mean()) / r.std(ddof=1) + mean  # exactly this mean and a unit spread: se = 1/sqrt(n)


def _summary(mean: float, run_key: str, policy: str | None = POLICY, n: int = 1000) -> ReturnSummary:
    return ReturnSummary.of(_returns(mean, n), policy, run_key)


def test_a_drop_against_the_sandbox_alone_is_no_anomaly() -> None:
    # the timeline's hour 11 after an emergency promotion at hour 10: the new champion's first check,
    # against a sandbox recalibrated on one hour of traffic (0.78; recalibrated an hour later: 0.66)
    live, sandbox = _summary(0.63, "20261201T1100"), _summary(0.78, "20261201T1100", n=2000)
    verdict = return_anomaly(live, sandbox, None, min_drop=0.1, z=3.0)
    assert not verdict["anomaly"] and verdict["reference"].startswith("none: no earlier check of")
    assert verdict["drop"] == pytest.approx(0.15)


def test_an_hour_in_line_with_the_previous_one_is_not_an_anomaly_however_far_below_the_sandbox() -> None:
    # the timeline's hour 11: the sandbox recalibrated an hour before predicts 0.78, the champion
    # earned 0.75 the hour before and 0.65 now (an oracle's hourly return moves as much)
    live, sandbox = _summary(0.65, "20261201T1100"), _summary(0.78, "20261201T1100", n=2000)
    previous = _summary(0.75, "20261201T1000")
    verdict = return_anomaly(live, sandbox, previous, min_drop=0.1, z=3.0)
    assert not verdict["anomaly"]
    assert verdict["previous_drop"] == pytest.approx(0.10)
    assert verdict["previous_threshold"] == pytest.approx(3 * np.sqrt(2 / 1000), rel=1e-3)


def test_a_fall_against_both_references_is_an_anomaly() -> None:
    live, sandbox = _summary(0.45, "20261201T2400"), _summary(0.70, "20261201T2400", n=2000)
    verdict = return_anomaly(live, sandbox, _summary(0.70, "20261201T2300"), min_drop=0.1, z=3.0)
    assert verdict["anomaly"] and verdict["reference"] == "sandbox and previous check"


def test_a_previous_check_of_another_policy_is_no_reference() -> None:
    live, sandbox = _summary(0.40, "20261201T0300"), _summary(0.75, "20261201T0300", n=2000)
    previous = _summary(0.70, "20261201T0200", policy="rules")
    verdict = return_anomaly(live, sandbox, previous, min_drop=0.1, z=3.0)
    assert not verdict["anomaly"] and "credit_approval-policy/1" in verdict["reference"]


def test_no_live_episodes_is_no_anomaly() -> None:
    empty = ReturnSummary.of(np.array([]), POLICY, "20261201T0000")
    assert not return_anomaly(empty, _summary(0.7, "20261201T0000"), None, min_drop=0.1, z=3.0)["anomaly"]


class _Storage:
    def __init__(self) -> None:
        self.files: dict[str, object] = {}

    def exists(self, uri: str) -> bool:
        return uri in self.files

    def read_json(self, uri: str) -> object:
        return self.files[uri]

    def write_json(self, uri: str, doc: object) -> None:
        self.files[uri] = doc


def _ctx(storage: _Storage, run_key: str, dry_run: bool = False, z: float = 3.0) -> SimpleNamespace:
    return SimpleNamespace(
        run_key=run_key,
        scenario="credit_approval",
        dry_run=dry_run,
        storage=storage,
        uri=lambda *parts: "mem://" + "/".join(parts),
        config=SimpleNamespace(drift=SimpleNamespace(anomaly_drop=0.1, anomaly_z=z)),
    )


def test_hourly_checks_in_sequence_compare_each_hour_with_the_one_before() -> None:
    """As the scheduler runs them: each check reads the previous hour's live summary and leaves
    its own; a dry run reads but writes nothing."""
    storage = _Storage()
    sandbox = _returns(0.78, 2000)
    first = check_return_anomaly(_ctx(storage, "20261201T1000"), _returns(0.40), sandbox, POLICY)
    assert not first["anomaly"] and first["reference"].startswith("none")
    assert storage.files["mem://drift_state/credit_approval/live_return.json"]["run_key"] == "20261201T1000"
    second = check_return_anomaly(_ctx(storage, "20261201T1100"), _returns(0.45), sandbox, POLICY)
    assert not second["anomaly"] and second["previous_run_key"] == "20261201T1000"
    dry = check_return_anomaly(_ctx(storage, "20261201T1200", dry_run=True), _returns(0.20), sandbox, POLICY)
    assert dry["anomaly"] and dry["previous_run_key"] == "20261201T1100"
    assert storage.files["mem://drift_state/credit_approval/live_return.json"]["run_key"] == "20261201T1100"


def test_the_check_takes_its_standard_errors_from_drift_anomaly_z() -> None:
    """A fall of 3.2 standard errors of the difference against the hour before: an anomaly at the
    default z = 3, none with ``drift.anomaly_z: 3.5``."""
    sandbox = _returns(0.78, 2000)
    se = np.sqrt(2 / 1000)
    for z, expected in ((3.0, True), (3.5, False)):
        storage = _Storage()
        check_return_anomaly(_ctx(storage, "20261201T1000", z=z), _returns(0.60), sandbox, POLICY)
        verdict = check_return_anomaly(_ctx(storage, "20261201T1100", z=z), _returns(0.60 - 3.2 * se), sandbox, POLICY)
        assert verdict["anomaly"] is expected
        assert verdict["previous_threshold"] == pytest.approx(z * se, rel=1e-3)
