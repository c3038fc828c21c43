"""A retrain whose inputs have not changed is skipped; any input that changes — the calibration of
its interval, the budget, the reward function — makes it train again; a retrain that did not
complete is tried again. The calibration a run reads is the one of its own interval, never a later
hour's."""

from __future__ import annotations

from pathlib import Path

import pytest

CONF = {"reward_fn": "v1", "timesteps": 10_000, "mode": "full", "reward_source": None}


def test_unchanged_inputs_skip_and_changed_inputs_train(rlops_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration import retrain_inputs
    from rlops.pipeline_steps.orchestration.retrain_inputs import mark_done, record_if_changed

    ctx = StepContext.create("credit_approval", "20261201T0100-15m")
    assert record_if_changed(ctx, "full", CONF)
    assert record_if_changed(ctx, "full", CONF)  # the first one never completed: try again
    mark_done(ctx, "full")
    assert not record_if_changed(ctx, "full", CONF)  # nothing new to learn from
    monkeypatch.setattr(retrain_inputs, "incremental_blocker", lambda ctx: None)  # as with a champion
    assert record_if_changed(ctx, "incremental", CONF)  # each mode keeps its own record
    assert record_if_changed(ctx, "full", {**CONF, "timesteps": 20_000})
    mark_done(ctx, "full")
    assert record_if_changed(ctx, "full", {**CONF, "reward_fn": "v0"})
    mark_done(ctx, "full")
    later = StepContext.create("credit_approval", "20261201T0115-15m")
    assert not record_if_changed(later, "full", {**CONF, "reward_fn": "v0"})
    # A recalibration (drift) is a new input.
    cal = {"version": "20261201T0100-15m", "profiles": {}}
    later.storage.write_json(later.uri("calibrations", "credit_approval", "20261201T0100-15m.json"), cal)
    later.storage.write_json(later.uri("calibrations", "credit_approval", "latest.json"), cal)
    assert record_if_changed(later, "full", {**CONF, "reward_fn": "v0"})


def test_an_incremental_retrain_waits_for_a_champion_and_for_the_roll_out(
    rlops_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It fine-tunes the champion: with none there is nothing to fine-tune, and while a challenger
    is rolling out a few thousand steps on the old champion must not displace it."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration.retrain_inputs import incremental_blocker, record_if_changed

    ctx = StepContext.create("credit_approval", "20261201T0100-15m")
    assert "no champion" in str(incremental_blocker(ctx))
    assert not record_if_changed(ctx, "incremental", {**CONF, "mode": "incremental"})
    assert not ctx.storage.exists(ctx.uri("state", "retrain", "credit_approval", "incremental.json"))  # not pending
    aliases = {"champion": "3", "challenger": "4"}
    monkeypatch.setattr(type(ctx.tracker), "get_alias", lambda self, name, alias: aliases.get(alias))
    assert "v4 is rolling out" in str(incremental_blocker(ctx))
    assert not record_if_changed(ctx, "incremental", {**CONF, "mode": "incremental"})
    del aliases["challenger"]
    assert incremental_blocker(ctx) is None
    assert record_if_changed(ctx, "incremental", {**CONF, "mode": "incremental"})


def test_a_run_reads_the_calibration_of_its_own_interval(rlops_home: Path) -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create("credit_approval", "20261201T0500")
    for key in ("20261201T0300", "20261201T0500", "20261201T0900"):
        ctx.storage.write_json(ctx.uri("calibrations", "credit_approval", f"{key}.json"), {"version": key})
        ctx.storage.write_json(ctx.uri("calibrations", "credit_approval", "latest.json"), {"version": key})
    assert ctx.read_calibration()["version"] == "20261201T0500"  # not 09:00's, written later
    assert StepContext.create("credit_approval", "20261201T0400").read_calibration()["version"] == "20261201T0300"
    assert StepContext.create("credit_approval", "20261201T0200").read_calibration() is None
    assert StepContext.create("credit_approval", "20261201T1000").read_calibration()["version"] == "20261201T0900"


def test_a_retrain_whose_candidate_an_earlier_run_of_its_interval_promoted_ends_as_already_champion(
    rlops_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The emergency retrain the drift monitor triggers and the scheduled full retrain share the
    hour's run key: the second finds the first's training (same inputs, same version) already the
    champion. It ends without judging it again — and without failing its DAG run — and its inputs
    count as done, so the next quarter-hour does not train them a third time."""
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration import tasks
    from rlops.pipeline_steps.orchestration.retrain_inputs import record_if_changed
    from rlops.pipeline_steps.orchestration.run_conf import RunConf

    conf = {**CONF, "scenario": "credit_approval", "run_key": "20261201T0100"}
    ctx = StepContext.create("credit_approval", "20261201T0100")
    monkeypatch.setattr(type(ctx.tracker), "get_alias", lambda self, name, alias: {"champion": "7"}.get(alias))
    monkeypatch.setattr(RunConf, "step_context", lambda self: ctx)
    promoted: list[str] = []
    monkeypatch.setattr("rlops.pipeline_steps.promotion.flow.promote", lambda *a, **k: promoted.append("called"))
    assert record_if_changed(ctx, "full", conf)  # the scheduled run's inputs: pending
    out = tasks.evaluate_and_promote(conf, {"model_version": "7"}, {"passed": True}, staged=False)
    assert out == {"promoted": False, "action": "none", "candidate": "7", "reason": "v7 is already the champion"}
    assert promoted == []  # no second evaluation of the champion against itself
    assert not record_if_changed(ctx, "full", conf)  # done: the next run with these inputs skips
