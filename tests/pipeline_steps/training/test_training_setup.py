"""A training resolves its inputs once: one compile of the pack, one read of the calibration, and the
training itself reads only the resolved record and the run's services."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import deep_merge
from rlops.common.errors import UserError
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.pipeline_steps.training.setup import resolve_training

RUN_KEY = "20260105T1000"


def make_ctx(tmp_path: Path, dry_run: bool = True, **over: Any) -> StepContext:
    overrides = {"local_dir": str(tmp_path / "local"), "train": {"num_envs": 16}, "ppo": {"device": "cpu"}}
    return StepContext.create(run_key=RUN_KEY, dry_run=dry_run, overrides=deep_merge(overrides, over))


def write_calibration(ctx: StepContext, version: str = "20260105T0900") -> None:
    doc = {"version": version, "data_version": f"traces@{version}", "profile": {}}
    ctx.storage.write_json(ctx.uri("calibrations", ctx.scenario, f"{version}.json"), doc)
    ctx.storage.write_json(ctx.uri("calibrations", ctx.scenario, "latest.json"), doc)


def test_a_dry_run_compiles_the_pack_once_and_reads_the_calibration_once(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlops.sandbox.pack as pack_module
    from rlops.pipeline_steps.training.policy import train_policy

    compiled: list[Any] = []
    reads: list[str] = []
    real_load, real_read = pack_module.load_pack, StepContext.read_calibration

    def counting_load(folder: Any, *args: Any, **kwargs: Any) -> Any:
        compiled.append(kwargs.get("calibration"))
        return real_load(folder, *args, **kwargs)

    def counting_read(self: StepContext, version: str = "latest") -> Any:
        reads.append(version)
        return real_read(self, version)

    monkeypatch.setattr(pack_module, "load_pack", counting_load)
    monkeypatch.setattr(StepContext, "read_calibration", counting_read)
    ctx = make_ctx(tmp_path)
    write_calibration(ctx)

    summary = train_policy(ctx, TrainRequest(timesteps=2_000))

    assert len(compiled) == 1 and reads == ["latest"]
    assert compiled[0] is not None and compiled[0]["version"] == "20260105T0900"  # the calibrated pack
    out = summary.as_dict()
    assert out["dry_run"] and out["calibration_version"] == "20260105T0900"
    assert out["data_version"] == "traces@20260105T0900" and out["reward_fn"] == "v1"
    json.dumps(out)


def test_the_record_fills_what_the_request_leaves_to_the_params(tmp_path: Path, tmp_storage_root: str) -> None:
    ctx = make_ctx(tmp_path, train={"reward_source": "blend", "reward_blend_lambda": 0.25, "source": "sandbox"})
    setup = resolve_training(ctx, TrainRequest(reward_fn="v1"))
    assert setup.source == "sandbox" and setup.reward.reward_fn == "v1" and setup.reward.source == "asked for"
    assert (setup.reward_source.kind, setup.reward_source.model_weight) == ("blend", 0.25)
    assert setup.calibration is None and setup.calibration_version == "none"
    assert setup.local_root == tmp_path / "local" and setup.train.num_envs == 16

    asked = resolve_training(ctx, TrainRequest(reward_source="model", reward_blend_lambda=0.5))
    assert (asked.reward_source.kind, asked.reward_source.model_weight) == ("model", 1.0)


@pytest.mark.parametrize(
    ("request_", "message"),
    [(TrainRequest(mode="partial"), "--mode"), (TrainRequest(timesteps=0), "--timesteps")],
)
def test_bad_options_are_refused_before_anything_is_read(
    tmp_path: Path, tmp_storage_root: str, request_: TrainRequest, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        resolve_training(make_ctx(tmp_path), request_)
