"""The champion return anomaly: an hour that falls below the sandbox and the level before is a
suspect; the alarm waits for the next hour to stay down, with the state kept in storage between
checks."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from rlops.pipeline_steps.drift.anomaly import (
    AnomalyRule,
    AnomalyState,
    ReturnAnomaly,
    ReturnSummary,
    check_return_anomaly,
    pooled,
    return_anomaly,
)

POLICY = "credit_approval-policy/1"
SE = np.sqrt(1 / 1000)  # one hour's standard error: unit spread, 1,000 episodes
RULE = AnomalyRule(min_drop=0.1, z=2.5, confirm="next_hour", confirm_z=3.5, level_hours=6, scale_floor=0.05)


def _returns(mean: float, n: int = 1000, seed: int = 0) -> np.ndarray:
    r = np.random.default_rng(seed).normal(0.0, 1.0, n)
    return (r - r.mean()) / r.std(ddof=1) + mean  # exactly this mean and a unit spread: se = 1/sqrt(n)


def _summary(mean: float, run_key: str, policy: str | None = POLICY, n: int = 1000) -> ReturnSummary:
    return ReturnSummary.of(_returns(mean, n), policy, run_key)


SANDBOX = _summary(0.90, "baseline", n=2000)


def _history(*means: float, policy: str = POLICY) -> AnomalyState:
    return AnomalyState(tuple(_summary(m, f"h{i}", policy) for i, m in enumerate(means)))


def test_pooled_hours_are_the_concatenated_episodes() -> None:
    a = ReturnSummary.of(np.array([0.0, 2.0]), POLICY, "a")
    b = ReturnSummary.of(np.array([4.0, 6.0]), POLICY, "b")
    p = pooled([a, b])
    assert (p.mean, p.episodes) == (3.0, 4)
    assert p.var == pytest.approx(20 / 3)  # sample variance of 0, 2, 4, 6


def test_a_drop_against_the_sandbox_alone_is_no_suspect() -> None:
    verdict, state = return_anomaly(_summary(0.63, "h0"), SANDBOX, AnomalyState(), RULE)
    assert not verdict.anomaly and not verdict.suspect
    assert verdict.reference.startswith("none: no earlier check of")
    assert [h.run_key for h in state.history] == ["h0"]


def test_a_fall_is_measured_from_the_pooled_level_before() -> None:
    # level 0.70 over two hours (se² = 1/2000), live 2.6 se of the difference below: a suspect
    se = np.sqrt(1 / 2000 + 1 / 1000)
    state = AnomalyState((_summary(0.69, "h0"), _summary(0.71, "h1")))
    verdict, after = return_anomaly(_summary(0.70 - 2.6 * se, "h2"), SANDBOX, state, RULE)
    assert verdict.level_drop == pytest.approx(2.6 * se)
    assert verdict.level_threshold == pytest.approx(2.5 * se, rel=1e-3)
    assert verdict.suspect and not verdict.anomaly
    assert after.suspect is not None and after.suspect.run_key == "h2" and after.suspect_level is not None
    assert after.suspect_level.mean == pytest.approx(0.70) and after.history == state.history


def test_a_suspect_whose_next_hour_stays_down_raises_the_alarm() -> None:
    state = _history(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    first, state = return_anomaly(_summary(0.57, "h6"), SANDBOX, state, RULE)
    assert first.suspect and not first.anomaly
    second, after = return_anomaly(_summary(0.58, "h7"), SANDBOX, state, RULE)
    # the pair's mean 0.575 against the level 0.70: se √(1/2000 + 1/6000) = 0.0258, threshold 0.0904
    assert second.confirmation.pair_drop == pytest.approx(0.125)
    assert second.confirmation.pair_threshold == pytest.approx(3.5 * np.sqrt(1 / 2000 + 1 / 6000), rel=1e-3)
    assert second.anomaly and second.reference.startswith("confirmed: h6")
    assert [h.run_key for h in after.history] == ["h7"] and after.suspect is None  # a new level


def test_a_suspect_hour_that_already_alarms_for_input_drift_is_not_confirmed_again() -> None:
    # the error-rate event of the 48-hour timeline: its hour alarms for drifted errors (retrain)
    # and is a return suspect; the next hour stays down, but that fall has had its alarm
    state = _history(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    first, state = return_anomaly(_summary(0.57, "h6"), SANDBOX, state, RULE, alarmed_for="input drift (error)")
    assert first.suspect and first.suspect_cleared == "the hour already alarms for input drift (error)"
    assert state.suspect is None and [h.run_key for h in state.history] == ["h6"]
    second, _ = return_anomaly(_summary(0.58, "h7"), SANDBOX, state, RULE)
    assert not second.anomaly and second.confirmation is None
    # without the drift alarm the same two hours raise the return alarm
    _, pending = return_anomaly(_summary(0.57, "h6"), SANDBOX, _history(*[0.70] * 6), RULE)
    assert return_anomaly(_summary(0.58, "h7"), SANDBOX, pending, RULE)[0].anomaly


def test_a_suspect_whose_next_hour_reverts_is_dropped() -> None:
    state = _history(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    _, state = return_anomaly(_summary(0.57, "h6"), SANDBOX, state, RULE)
    verdict, after = return_anomaly(_summary(0.69, "h7"), SANDBOX, state, RULE)
    assert not verdict.anomaly and not verdict.confirmation.confirmed
    assert not verdict.suspect
    # the chance hour leaves the level; the reverted hour joins it (six hours kept)
    assert [h.run_key for h in after.history] == ["h1", "h2", "h3", "h4", "h5", "h7"]


def test_the_next_hour_must_itself_stay_below_the_level() -> None:
    # a deep suspect carries the pair below the threshold, but the next hour is back above the level
    state = _history(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    _, state = return_anomaly(_summary(0.40, "h6"), SANDBOX, state, RULE)
    verdict, _ = return_anomaly(_summary(0.71, "h7"), SANDBOX, state, RULE)
    assert verdict.confirmation.pair_drop > verdict.confirmation.pair_threshold
    assert not verdict.anomaly


def test_without_confirmation_the_suspect_hour_alarms() -> None:
    rule = AnomalyRule(min_drop=0.1, z=2.5, confirm="none", confirm_z=3.5, level_hours=6, scale_floor=0.05)
    verdict, after = return_anomaly(_summary(0.57, "h6"), SANDBOX, _history(0.70, 0.70, 0.70), rule)
    assert verdict.anomaly and after.suspect is None and [h.run_key for h in after.history] == ["h6"]


def test_a_sandbox_within_anomaly_drop_of_the_live_return_makes_no_suspect() -> None:
    sandbox = _summary(0.62, "baseline", n=2000)  # only 0.05 above the live hour
    verdict, _ = return_anomaly(_summary(0.57, "h3"), sandbox, _history(0.70, 0.70, 0.70), RULE)
    assert verdict.level_drop > verdict.level_threshold and not verdict.suspect


def test_another_policys_hours_are_no_level_and_its_suspect_is_not_confirmed() -> None:
    state = _history(0.70, 0.70, policy="rules")
    verdict, after = return_anomaly(_summary(0.40, "h2"), SANDBOX, state, RULE)
    assert not verdict.suspect and POLICY in verdict.reference
    pending = AnomalyState((), _summary(0.40, "h1", "rules"), _summary(0.70, "level", "rules"))
    verdict, _ = return_anomaly(_summary(0.40, "h2"), SANDBOX, pending, RULE)
    assert verdict.confirmation is None and not verdict.anomaly


def test_no_live_episodes_is_no_anomaly() -> None:
    empty = ReturnSummary.of(np.array([]), POLICY, "h0")
    verdict, state = return_anomaly(empty, SANDBOX, _history(0.7), RULE)
    assert not verdict.anomaly and state == _history(0.7)


class _Storage:
    """Keeps JSON as text, as a file would: each check reads what the last one wrote."""

    def __init__(self) -> None:
        self.files: dict[str, str] = {}

    def exists(self, uri: str) -> bool:
        return uri in self.files

    def read_json(self, uri: str) -> object:
        return json.loads(self.files[uri])

    def write_json(self, uri: str, doc: object) -> None:
        self.files[uri] = json.dumps(doc)


STATE_URI = "mem://drift_state/credit_approval/live_return.json"


def _ctx(storage: _Storage, run_key: str, dry_run: bool = False, **drift: object) -> SimpleNamespace:
    settings = {
        "anomaly_drop": 0.1,
        "anomaly_z": 2.5,
        "anomaly_confirm": "next_hour",
        "anomaly_confirm_z": 3.5,
        "scale_floor": 0.05,
    }
    return SimpleNamespace(
        run_key=run_key,
        scenario="credit_approval",
        dry_run=dry_run,
        storage=storage,
        uri=lambda *parts: "mem://" + "/".join(parts),
        config=SimpleNamespace(drift=SimpleNamespace(**{**settings, "anomaly_level_hours": 6, **drift})),
    )


def _check(storage: _Storage, run_key: str, mean: float, dry_run: bool = False, **drift: object) -> ReturnAnomaly:
    ctx = _ctx(storage, run_key, dry_run, **drift)
    return check_return_anomaly(ctx, ctx.config.drift, _returns(mean), _returns(0.90, 2000), POLICY)


def test_hourly_checks_keep_the_suspect_in_storage_until_the_next_hour_confirms_it() -> None:
    """As the scheduler runs them, each in its own process: the state is only what storage holds."""
    storage = _Storage()
    for i in range(3):
        assert not _check(storage, f"20261201T0{i}00", 0.70).suspect
    suspect = _check(storage, "20261201T0300", 0.57)
    assert suspect.suspect and not suspect.anomaly
    assert json.loads(storage.files[STATE_URI])["state"]["suspect"]["run_key"] == "20261201T0300"
    dry = _check(storage, "20261201T0400", 0.57, dry_run=True)
    assert dry.anomaly  # a dry run decides as the real run …
    assert json.loads(storage.files[STATE_URI])["run_key"] == "20261201T0300"  # … and writes nothing
    confirmed = _check(storage, "20261201T0400", 0.57)
    assert confirmed.anomaly and confirmed.reference.startswith("confirmed: 20261201T0300")
    again = _check(storage, "20261201T0400", 0.57)  # a retried task: the same state, the same verdict
    assert again.anomaly


def test_the_earlier_state_file_is_read_as_a_one_hour_level() -> None:
    storage = _Storage()
    storage.write_json(STATE_URI, _summary(0.70, "20261201T0000").to_dict())
    verdict = _check(storage, "20261201T0100", 0.55)
    assert verdict.suspect and verdict.level_run_keys == ("20261201T0000",)


def test_the_check_takes_its_settings_from_the_drift_block() -> None:
    """A fall of 2.6 standard errors of the difference below a one-hour level: a suspect at the
    default z = 2.5, none at ``drift.anomaly_z: 3``; with ``anomaly_confirm: none`` an alarm."""
    se = np.sqrt(2 / 1000)
    cases = (({}, True, False), ({"anomaly_z": 3.0}, False, False), ({"anomaly_confirm": "none"}, False, True))
    for drift, suspect, alarm in cases:
        storage = _Storage()
        _check(storage, "20261201T1000", 0.60, **drift)
        verdict = _check(storage, "20261201T1100", 0.60 - 2.6 * se, **drift)
        assert (verdict.suspect, verdict.anomaly) == (suspect, alarm), drift


@pytest.mark.parametrize("unit", [1.0, 0.01])
def test_the_same_defaults_see_a_lasting_fall_at_every_reward_scale(unit: float) -> None:
    """The alarm of ``test_a_suspect_whose_next_hour_stays_down_raises_the_alarm`` with every return
    100× smaller (a click rate): the drop below the sandbox is a share of its scale, not 0.1 in
    reward units, which no click rate can fall."""

    def hour(mean: float, run_key: str, n: int = 1000) -> ReturnSummary:
        return ReturnSummary.of(_returns(mean, n) * unit, POLICY, run_key)

    sandbox = hour(0.90, "baseline", 2000)
    state = AnomalyState(tuple(hour(0.70, f"h{i}") for i in range(6)))
    first, state = return_anomaly(hour(0.57, "h6"), sandbox, state, RULE)
    # max(0.1 of the sandbox's 0.9, 2.5 se of the live − sandbox difference), in the pack's units
    assert first.suspect and first.threshold == pytest.approx(2.5 * np.sqrt(1 / 1000 + 1 / 2000) * unit)
    second, _ = return_anomaly(hour(0.58, "h7"), sandbox, state, RULE)
    assert second.anomaly


def test_the_verdict_as_a_dict_shows_only_the_fields_that_apply_in_the_reports_order() -> None:
    none, _ = return_anomaly(ReturnSummary.of(np.array([]), POLICY, "h0"), SANDBOX, AnomalyState(), RULE)
    assert list(none.as_dict()) == ["anomaly", "suspect", "drop", "threshold", "reference"]
    state = _history(0.70, 0.70, 0.70, 0.70, 0.70, 0.70)
    _, state = return_anomaly(_summary(0.57, "h6"), SANDBOX, state, RULE)
    reverted, _ = return_anomaly(_summary(0.69, "h7"), SANDBOX, state, RULE, alarmed_for="input drift (x)")
    doc = reverted.as_dict()
    assert list(doc) == [
        "anomaly",
        "suspect",
        "drop",
        "threshold",
        "confirmation",
        "level_drop",
        "level_threshold",
        "level_hours",
        "level_run_keys",
        "reference",
    ]
    assert list(doc["confirmation"]) == [
        "suspect_run_key",
        "level_mean",
        "next_below_level",
        "pair_drop",
        "pair_threshold",
        "confirmed",
    ]
    assert doc["level_run_keys"] == ["h0", "h1", "h2", "h3", "h4", "h5"] and json.loads(json.dumps(doc)) == doc
