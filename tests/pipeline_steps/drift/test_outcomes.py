"""Outcome drift: a change in the hidden dynamics, or in the reward the business scores with, is
raised from the first hour of live traffic after it; a fresh draw from the calibrated world is not."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.params_drift import DriftParams, RecalConfig
from rlops.pipeline_steps.drift.outcomes import OutcomeConfig, outcome_drift, welch
from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.timeline.events import parse_events, production_doc

PACK = REPO_ROOT / "scenarios" / "credit_approval"
SEGMENTS = {"older": "user_profile.age >= 60", "low_credit_score": "user_profile.credit_score < 450"}
DEFAULTS = OutcomeConfig.from_drift(DriftParams())  # the product's outcome_* defaults


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from rlops.sandbox.pack import load_pack

    root = tmp_path_factory.mktemp("worlds")
    doc = production_doc(
        yaml.safe_load((PACK / "scenario.yaml").read_text()),
        parse_events(
            [
                {
                    "at_hour": 0,
                    "kind": "outcome",
                    "field": "hidden.default_prob",
                    "factor": 2.5,
                    "when": "user_profile.age >= 60",
                }
            ]
        ),
    )
    shutil.copytree(PACK, root / "prod")
    (root / "prod" / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    shutil.copytree(PACK, root / "rule")  # the business's reward_v2 in force (the rule-change event)
    shutil.copyfile(PACK / "changes" / "reward_v2.py", root / "rule" / "reward_v2.py")
    return load_pack(PACK), load_pack(root / "prod", check_liveness=False), load_pack(root / "rule")


def rows(pack, seed: int, n: int, reward: str = "v1"):  # type: ignore[no-untyped-def]
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    return rollout_traces(
        pack, rule_policy, n, seed=seed, profile="live", reward_fn=reward, source="live", episode_prefix=f"e{seed}"
    )


def test_welch_and_effect_by_hand() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])
    assert welch(a, b) == (pytest.approx(1.0), 0.0)
    p, d = welch(np.array([2.0, 3.0, 4.0]), np.array([1.0, 2.0, 3.0]))
    assert d == pytest.approx(1.0) and 0.2 < p < 0.3  # t = 1.22 on 4 df


def test_a_fresh_draw_of_the_calibrated_world_raises_nothing(worlds) -> None:  # type: ignore[no-untyped-def]
    sandbox_pack, _, _ = worlds
    baseline = rows(sandbox_pack, 0, 2000)
    for seed in (10_000, 20_000, 30_000):
        rep = outcome_drift(sandbox_pack, baseline, rows(sandbox_pack, seed, 1000), DEFAULTS, SEGMENTS)
        assert not rep.drifted, rep.summary
        assert any(c.tested for c in rep.cells) and rep.reason is None


def test_a_concept_change_is_raised_within_the_hour(worlds) -> None:  # type: ignore[no-untyped-def]
    sandbox_pack, prod, _ = worlds
    baseline = rows(sandbox_pack, 0, 2000)
    rep = outcome_drift(sandbox_pack, baseline, rows(prod, 10_000, 1000), DEFAULTS, SEGMENTS)
    assert rep.drifted, rep.summary
    # the settling step of the older applicants carries it: their realised rewards fell
    cell = next(c for c in rep.cells if c.action == "send_notification" and c.segment == "older")
    assert cell.drifted and cell.live_residual < cell.sandbox_residual and cell.effect < -0.2
    doc = rep.to_dict()
    assert doc["drifted"] and "OUTCOME DRIFT" in doc["summary"] and rep.metrics()["outcome.drifted"] == 1.0


def test_a_rule_change_is_raised(worlds) -> None:  # type: ignore[no-untyped-def]
    sandbox_pack, _, _ = worlds
    baseline = rows(sandbox_pack, 0, 2000)
    rule = worlds[2]
    rep = outcome_drift(sandbox_pack, baseline, rows(rule, 10_000, 1000, reward="v2"), DEFAULTS, SEGMENTS)
    assert rep.drifted, rep.summary


def test_thin_traffic_is_reported_not_tested(worlds) -> None:  # type: ignore[no-untyped-def]
    sandbox_pack, _, _ = worlds
    rep = outcome_drift(sandbox_pack, rows(sandbox_pack, 0, 300), rows(sandbox_pack, 5, 20), DEFAULTS)
    assert not rep.drifted and rep.reason and "no (action, segment) cell" in rep.reason
    with pytest.raises(ValueError, match="outcome_alpha"):
        OutcomeConfig.from_drift(DriftParams(outcome_alpha=2))


@pytest.mark.slow
def test_the_drift_check_raises_outcome_drift_after_a_quiet_calibrated_hour(
    worlds,
    tmp_tracking: str,  # type: ignore[no-untyped-def]
    tmp_storage_root: str,
) -> None:
    """As the scheduler runs it: hour 1, live traffic of the calibrated world → recalibrate → the
    check is quiet on outcomes; hour 2, the hidden dynamics changed → outcome drift asks for a retrain,
    with its report in storage and its metrics in MLflow, and the recalibration fits the change from
    the outcomes; hour 3, the change persists and raises no new alarm."""
    import torch

    from rlops.pipeline_steps.drift.calibrate import recalibrate
    from rlops.pipeline_steps.drift.check import comparable_rows, drift_check, window_uri
    from rlops.pipeline_steps.infra.context import StepContext

    torch.set_num_threads(1)
    sandbox_pack, prod, _ = worlds

    def hour(key: str, pack, seed: int):  # type: ignore[no-untyped-def]
        ctx = StepContext.create("credit_approval", key, overrides={"recalibrate": {"check_samples": 5000}})
        t = ctx.key.start
        live = rows(pack, seed, 1500)
        live["ts"] = datetime(t.year, t.month, t.day, t.hour, 5, tzinfo=UTC).isoformat()
        ctx.storage.write_parquet(f"{window_uri(ctx)}/part-0.parquet", comparable_rows(sandbox_pack, live))
        return ctx

    ctx = hour("20261130T0500", sandbox_pack, 1_000)
    recalibrate(ctx, traces_uri=window_uri(ctx))
    quiet = drift_check(ctx, DriftCheckRequest(episodes=2000)).as_dict()
    assert not quiet["outcome_drift"], quiet["outcome_summary"]
    ctx = hour("20261130T0600", prod, 2_000)
    raised = drift_check(ctx, DriftCheckRequest(episodes=2000)).as_dict()
    assert raised["outcome_drift"] and raised["outcome_onset"] and raised["retrain"], raised["outcome_summary"]
    # the pack declares no segment of older applicants: an automatic one (the age's top quarter) finds them
    assert any(c.startswith("send_notification@user_profile.age") for c in raised["outcome_drifted_cells"])
    doc = ctx.storage.read_json(f"{ctx.report_uri('drift')}/outcomes.json")
    assert doc["drifted"] and doc["cells"]
    runs = ctx.tracker.client.search_runs(
        [ctx.tracker.experiment_id_for(ctx.scenario)], "metrics.`outcome.drifted` = 1"
    )
    assert len(runs) == 1
    # the alarm's recalibration fits the changed dynamics from the hour's outcomes (into the calibration)
    cal = recalibrate(ctx, traces_uri=window_uri(ctx)).as_dict()
    fitted = ctx.storage.read_json(cal["calibration_uri"])["outcomes"]
    assert any("user_profile.age" in f["when"] and f["factor"] > 1.5 for f in fitted["hidden.default_prob"])
    # the next hour the change persists, the recalibrated sandbox now predicts it: no new alarm
    ctx = hour("20261130T0700", prod, 3_000)
    again = drift_check(ctx, DriftCheckRequest(episodes=2000)).as_dict()
    assert not again["outcome_onset"] and not again["retrain"], again["outcome_summary"]


def test_recovery_fits_the_changed_dynamics_and_only_into_the_calibration(worlds, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Maximum likelihood finds the older applicants' higher default rate (and nothing in an
    unchanged world); the calibrated sandbox then predicts the live outcomes again, while the pack's
    files stay as they were."""
    from rlops.pipeline_steps.drift.outcome_fit import _loglik, fit_factors, fit_outcomes
    from rlops.sandbox.pack import load_pack

    # the likelihood by hand: one event at p = 0.5 doubled to 1 (capped just below) is certain
    assert _loglik(np.array([1.0]), np.array([0.5]), np.array([1.0]))[0] == pytest.approx(np.log(0.5))
    rng = np.random.default_rng(0)
    p = np.full(4000, 0.2)
    seg = np.arange(4000) < 1000
    y = (rng.random(4000) < np.where(seg, 0.5, 0.2)).astype(float)
    got = fit_factors(y, p, {"a": seg, "b": ~seg}, 0.01, 3, 100)
    assert [g["when"] for g in got] == ["a"] and got[0]["factor"] == pytest.approx(2.5, rel=0.08)
    sandbox_pack, prod, _ = worlds
    before = (PACK / "scenario.yaml").read_text()
    assert fit_outcomes(sandbox_pack, rows(sandbox_pack, 7_000, 2000), RecalConfig()) == {}
    fitted = fit_outcomes(sandbox_pack, rows(prod, 7_000, 2000), RecalConfig())
    (factor,) = fitted["hidden.default_prob"][:1]
    assert "user_profile.age >" in factor["when"] and 1.8 < factor["factor"] < 3.2 and factor["p_value"] < 1e-6
    assert (PACK / "scenario.yaml").read_text() == before
    calibrated = load_pack(PACK, calibration={"outcomes": fitted}, check_liveness=False)
    baseline = rows(calibrated, 0, 2000)
    rep = outcome_drift(calibrated, baseline, rows(prod, 10_000, 1000), DEFAULTS, SEGMENTS)
    older = next(c for c in rep.cells if c.action == "send_notification" and c.segment == "older")
    assert abs(older.effect) < 0.25, rep.summary  # was d ≈ −0.5 against the uncalibrated sandbox


@pytest.mark.parametrize(
    "fit, message",
    [
        ({"outcome": "loan_outcome", "by": ["user_profile.age"], "colour": 1}, "unknown key 'colour'"),
        ({"outcome": "loan_outcome"}, "non-empty list of observed field paths"),
        (
            {"outcome": "loan_outcome", "by": ["user_profile.age"], "event_when": "sometimes"},
            "'negative' or 'positive'",
        ),
    ],
)
def test_a_bad_fit_declaration_is_a_clear_pack_error(tmp_path: Path, fit: dict, message: str) -> None:
    from rlops.sandbox.errors import PackError
    from rlops.sandbox.pack import load_pack

    shutil.copytree(PACK, tmp_path / "pack")
    doc = yaml.safe_load((PACK / "scenario.yaml").read_text())
    doc["state"]["hidden"]["default_prob"]["fit"] = fit
    (tmp_path / "pack" / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(PackError, match=message):
        load_pack(tmp_path / "pack", check_liveness=False)
    doc["state"]["hidden"]["default_prob"].pop("fit")
    doc["state"]["user_profile"]["age"]["fit"] = {"outcome": "loan_outcome", "by": ["user_profile.age"]}
    (tmp_path / "pack" / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    with pytest.raises(PackError, match="only a hidden"):
        load_pack(tmp_path / "pack", check_liveness=False)


def test_a_threshold_change_is_fitted_as_one_tail_from_an_hour_of_outcomes(tmp_path: Path) -> None:
    """Applicants over 60 default 2.5 times as often, in an older population: one hour of traffic
    (1,000 episodes) is enough for the fit to find the age's upper tail and a factor near 2.5 —
    not a patchwork of the age's bins or of employment types that correlate with age."""
    from rlops.pipeline_steps.drift.outcome_fit import fit_outcomes
    from rlops.sandbox.pack import load_pack

    events = [
        {"at_hour": 0, "kind": "population", "init": {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}},
        {
            "at_hour": 0,
            "kind": "outcome",
            "field": "hidden.default_prob",
            "factor": 2.5,
            "when": "user_profile.age >= 60",
        },
    ]
    doc = production_doc(yaml.safe_load((PACK / "scenario.yaml").read_text()), parse_events(events))
    shutil.copytree(PACK, tmp_path / "prod")
    (tmp_path / "prod" / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    prod = load_pack(tmp_path / "prod", check_liveness=False)
    first = fit_outcomes(load_pack(PACK), rows(prod, 5, 1000), RecalConfig())["hidden.default_prob"][0]
    assert first["when"].startswith("user_profile.age > ") and " and " not in first["when"], first
    assert 57.0 <= float(first["when"].split("> ")[1]) <= 63.0 and 2.0 < first["factor"] < 3.0, first


def test_an_episode_of_outcome_drift_raises_one_onset() -> None:
    """Hour by hour: the first drifted cells raise the alarm; the drift that persists (more cells
    reaching significance, or a change recalibration cannot fit) is reported, not raised again; an
    hour without outcome drift ends the episode, and a new cell after it raises again."""
    from rlops.pipeline_steps.drift.outcomes import next_onset_state

    state: dict = {}
    hours = [["a@all"], ["a@all", "b@age:q4"], ["c@all"], [], ["a@all"], ["d@all"]]
    onsets = []
    for cells in hours:
        onset, state = next_onset_state(state, cells)
        onsets.append(onset)
    assert onsets == [True, False, False, False, False, True]
    assert state == {"cells": ["a@all", "b@age:q4", "c@all", "d@all"], "persisting": True, "clean_hours": 0}
    assert next_onset_state({"cells": ["a@all"]}, ["a@all"]) == (
        False,
        {"cells": ["a@all"], "persisting": False, "clean_hours": 0},
    )


def test_an_episode_of_outcome_drift_ends_after_enough_clean_hours() -> None:
    """The 48-hour run: the new reward function drifts at h34, the test's power lets it pass for
    seven hours, then new cells of the same change reach significance at h42 — within the episode,
    no second onset. Twelve clean hours end it; a new cell after them raises again."""
    from rlops.pipeline_steps.drift.outcomes import next_onset_state

    state: dict = {}
    hours = [["n@all"]] + [[]] * 7 + [["n@all", "n@age:q1"]] + [[]] * 12 + [["m@all"]]
    onsets = []
    for cells in hours:
        onset, state = next_onset_state(state, cells, clear_hours=12)
        onsets.append(onset)
    assert onsets == [True] + [False] * 20 + [True]
    assert state["persisting"] and state["clean_hours"] == 0


def test_a_rule_change_is_fitted_as_a_reward_scale_and_only_into_the_calibration(worlds) -> None:  # type: ignore[no-untyped-def]
    """The business scoring a default at 4 margins instead of 2.5 (reward_v2): the negative
    loan_outcome scores of an hour of live traffic are ~1.5× the sandbox's; an unchanged world and
    the repaid loans' positive scores fit nothing. The calibrated pack scores with the scale, its
    drift check no longer sees the rule change, and the pack's reward module is untouched."""
    from rlops.pipeline_steps.drift.outcome_fit import fit_reward_scales
    from rlops.sandbox.pack import load_pack

    sandbox_pack, _, rule = worlds
    baseline = rows(sandbox_pack, 0, 2000)
    assert fit_reward_scales(sandbox_pack, rows(sandbox_pack, 10_000, 1000), baseline, RecalConfig()) == {}
    live = rows(rule, 10_000, 1000, reward="v2")
    fitted = fit_reward_scales(sandbox_pack, live, baseline, RecalConfig())
    assert list(fitted) == ["loan_outcome"] and list(fitted["loan_outcome"]) == ["negative"], fitted
    neg = fitted["loan_outcome"]["negative"]
    assert 1.3 < neg["factor"] < 1.65 and neg["p_value"] < 1e-6 and neg["rows"] >= 30
    calibrated = load_pack(PACK, calibration={"rewards": fitted}, check_liveness=False)
    assert calibrated.reward_fn("v1").outcome_scales == (("loan_outcome", neg["factor"], 1.0),)
    assert sandbox_pack.reward_fn("v1").outcome_scales == ()  # the pack as written
    rep = outcome_drift(calibrated, rows(calibrated, 0, 2000), live, DEFAULTS, SEGMENTS)
    assert not rep.drifted, rep.summary


def test_recalibration_on_rule_changed_traffic_writes_the_scale_the_next_training_sees(
    worlds, tmp_path: Path, tmp_tracking: str
) -> None:  # type: ignore[no-untyped-def]
    """The step as the scheduler runs it: an hour of live traffic scored with reward_v2 → the new
    calibration version carries the scale (and its MLflow run the metric) → the pack the next
    retrain loads scores defaults at the new price; the recalibration after it, on the same
    traffic, finds the same scale again (it is fitted against the unscaled sandbox, not itself)."""
    from rlops.common.config import load_params
    from rlops.pipeline_steps.drift.calibrate import recalibrate
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.client import Tracker

    _, _, rule = worlds
    params = load_params(
        overrides={"storage": {"root": f"file://{tmp_path / 'storage'}"}, "tracking": {"uri": tmp_tracking}}
    )
    ctx = StepContext.create("credit_approval", "20261130T0500", params=params)
    uri = ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", "part-0.parquet")
    ctx.storage.write_parquet(uri, rows(rule, 10_000, 1000, reward="v2"))
    out = recalibrate(ctx, ctx.uri("traces")).as_dict()
    factor = out["rewards"]["loan_outcome"]["negative"]["factor"]
    assert 1.3 < factor < 1.65, out["rewards"]
    assert ctx.load_pack().reward_fn("v1").outcome_scales == (("loan_outcome", factor, 1.0),)
    tracker = Tracker(tmp_tracking, "credit_approval")
    (run,) = tracker.client.search_runs([tracker.experiment_id], "tags.`rlops.step` = 'recalibrate'")
    assert run.data.metrics["reward_scale_negative/loan_outcome"] == pytest.approx(factor)
    later = StepContext.create("credit_approval", "20261130T0600", params=params)
    again = recalibrate(later, later.uri("traces")).as_dict()
    assert again["rewards"]["loan_outcome"]["negative"]["factor"] == pytest.approx(factor, rel=0.05)


@pytest.mark.parametrize(
    "rewards, where, message",
    [
        ({"loan_outcome": {"negative": {"factor": -1.5}}}, "rewards.loan_outcome.negative", "finite number > 0"),
        ({"loan_outcome": {"negative": {"factor": "high"}}}, "rewards.loan_outcome.negative", "finite number > 0"),
        ({"loan_outcome": {"worse": {"factor": 1.5}}}, "rewards.loan_outcome", "'negative' and/or 'positive'"),
        ({"loan_outcome": 1.5}, "rewards.loan_outcome", "'negative' and/or 'positive'"),
        ([1.5], "rewards", "expected a mapping"),
    ],
)
def test_a_malformed_reward_scale_in_a_calibration_fails_the_load_with_where_and_what(
    rewards: object, where: str, message: str
) -> None:
    """A hand-edited calibration's ``rewards:`` block is checked when the pack loads (not at the next
    training): the error names the entry and what was expected."""
    from rlops.sandbox.errors import PackError
    from rlops.sandbox.pack import load_pack

    with pytest.raises(PackError) as err:
        load_pack(PACK, calibration={"rewards": rewards}, check_liveness=False)
    assert f"at {where}" in str(err.value) and message in str(err.value), str(err.value)
