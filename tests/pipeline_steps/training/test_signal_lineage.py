"""A business signal moves a reward weight: the next retrain records the value in its run, its model
version and the trace rows; a bad value keeps the last good one, recorded; a move beyond
``signals.retrain_delta`` makes the drift monitor ask for a retrain; the stress test covers the range."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import deep_merge
from rlops.common.errors import UserError
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.signal_store import set_signal
from rlops.registry.client import CHAMPION, policy_model_name

SCENARIO = "credit_approval"
NAME = policy_model_name(SCENARIO)


def make_ctx(tmp_path: Path, run_key: str, **over: Any) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "train": {"num_envs": 16, "eval_episodes": 32, "checkpoint_every": 1},
        "ppo": {"num_steps": 8, "device": "cpu"},
        "capture": {"episodes": 20},
    }
    return StepContext.create(SCENARIO, run_key=run_key, overrides=deep_merge(overrides, over))


def _train(ctx: StepContext) -> dict[str, Any]:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    return train_policy(ctx, TrainRequest(timesteps=256)).as_dict()


def _run(ctx: StepContext, run_id: str) -> Any:
    import mlflow

    return mlflow.MlflowClient(ctx.config.tracking.uri).get_run(run_id).data


def test_the_next_retrain_and_trace_rows_record_the_signal(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    import torch

    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    torch.set_num_threads(1)
    params = StepContext.create(SCENARIO).params
    first = _train(make_ctx(tmp_path, "20260105T1000"))
    assert first["reward_signals"] == {"complaint_index": 0.0}  # never set: the baseline, the pack as written
    assert (
        _run(make_ctx(tmp_path, "20260105T1000"), first["run_id"]).tags["signal.complaint_index.status"] == "baseline"
    )

    set_signal(params, "complaint_index", "0.6")
    ctx = make_ctx(tmp_path, "20260105T1100")
    second = _train(ctx)
    assert not second["reused"] and second["reward_signals"] == {"complaint_index": 0.6}
    run = _run(ctx, second["run_id"])
    assert run.params["signal.complaint_index"] == "0.6" and run.tags["signal.complaint_index"] == "0.6"
    assert run.tags["signal.complaint_index.status"] == "set"
    tags = ctx.tracker.model_version_tags(NAME, second["model_version"])
    assert (tags["signal.complaint_index"], tags["reward_fn"]) == ("0.6", "v1")
    assert tags["reward_fn_sha256"] == first["reward_fn_sha256"]  # same source: the signal is its own lineage field

    cap = capture_step(make_ctx(tmp_path, "20260105T1100"), CaptureRequest(simulate=True)).as_dict()
    rows = ctx.traces.read(SCENARIO)
    assert cap["rows_accepted"] == len(rows) > 0
    assert set(rows["reward_signals"].map(json.loads).map(json.dumps)) == {'{"complaint_index": 0.6}'}

    # a bad value: one line, the last good value stays and the next run says so
    with pytest.raises(UserError, match="not a finite number"):
        set_signal(params, "complaint_index", "nan")
    ctx = make_ctx(tmp_path, "20260105T1200")
    third = _train(ctx)
    assert third["reused"] or third["reward_signals"] == {"complaint_index": 0.6}
    status = third["reward_signal_status"]["complaint_index"]
    assert status.startswith("last_good: value nan refused") and status.endswith("kept 0.6")


def test_a_signal_move_asks_for_a_retrain(tmp_tracking: str, tmp_storage_root: str, tmp_path: Path) -> None:
    from rlops.pipeline_steps.drift.check import drift_check

    ctx = make_ctx(tmp_path, "20260105T1000")
    set_signal(ctx.params, "complaint_index", "0.5")
    trained = _train(ctx)
    ctx.tracker.set_alias(NAME, CHAMPION, trained["model_version"])

    set_signal(ctx.params, "complaint_index", "0.55")  # within retrain_delta (0.1 of the range)
    calm = drift_check(make_ctx(tmp_path, "20260105T1100")).as_dict()
    assert calm["retrain"] is False and calm["signal_shifts"][0]["moved"] is False

    set_signal(ctx.params, "complaint_index", "0.9")
    moved = drift_check(make_ctx(tmp_path, "20260105T1200")).as_dict()  # no live traffic: the signal alone decides
    assert moved["retrain"] is True
    shift = moved["signal_shifts"][0]
    assert (shift["champion"], shift["in_force"], shift["moved"]) == (0.5, 0.9, True)
    assert "signal complaint_index is 0.9" in moved["signal_drift"][0]


def test_the_stress_test_covers_the_signal_range(tmp_storage_root: str) -> None:
    from rlops.common.params_promotion import StressConfig
    from rlops.pipeline_steps.stress.report import report_dict
    from rlops.pipeline_steps.stress.step import stress_reward_fn
    from rlops.sandbox.pack import load_pack

    pack = load_pack(Path(StepContext.create(SCENARIO).pack_dir), check_liveness=False)
    cfg = StressConfig(edge_states=1000, gaming_episodes=200)
    reward = stress_reward_fn(pack, pack.reward_fn("v1"), cfg)
    ends = {r["signals"]["complaint_index"]: r["weights"]["compliance"] for r in reward.signal_range}
    assert ends == {0.0: 1.0, 1.0: pytest.approx(1.77)}
    assert any(p.name.endswith(" at complaint_index 1") for p in reward.probes)
    assert report_dict(reward, None, {})["reward"]["signal_range"][1]["findings"] == 0
