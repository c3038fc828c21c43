"""Hot reload, operationally: a switch scheduled by the DAG conf or requested with
`rlops train-switch-reward` is picked up between PPO iterations, recorded on the training run
(iteration, old and new sha256), and training continues with the new function."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT, deep_merge
from rlops.pipeline_steps.infra.context import StepContext

RUN_KEY = "20260105T1000"
BUDGET = 16 * 8 * 3  # three iterations


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)


def _ctx(tmp_path: Path) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "train": {"num_envs": 16, "eval_episodes": 32},
        "ppo": {"num_steps": 8, "device": "cpu"},
    }
    return StepContext.create(run_key=RUN_KEY, overrides=deep_merge(overrides, {}))


def _client(ctx: StepContext) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(ctx.params["tracking"]["uri"])


@pytest.mark.usefixtures("steps_load_pack")
def test_scheduled_switch_is_recorded_and_training_continues(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any
) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    ctx = _ctx(tmp_path)
    res = train_policy(
        ctx, TrainRequest(timesteps=BUDGET, reward_switch_to="v0", reward_switch_at_iteration=2)
    ).as_dict()
    v0, v1 = pack.reward_fn("v0").version, pack.reward_fn("v1").version
    assert res["reward_switches"] == [{"iteration": 2, "global_step": 128, "old_sha256": v1, "new_sha256": v0}]
    assert res["iterations"] == 3 and res["reward_fn_sha256_final"] == v0
    tags = ctx.tracker._call("run", lambda c: c.get_run(res["run_id"])).data.tags
    assert tags["reward_switch.2"] == f"{v1} -> {v0}"


@pytest.mark.usefixtures("steps_load_pack")
def test_cli_request_switches_the_training_in_progress(
    tmp_tracking: str,
    tmp_storage_root: str,
    tmp_path: Path,
    pack: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The request is made while the training runs (from inside its first poll, as an operator's
    command would arrive): the next iteration trains with v0, and the switch is recorded."""
    from rlops.cli import main
    from rlops.pipeline_steps.training.hot_reload import RewardSwitchPoller, control_uri
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    ctx = _ctx(tmp_path)
    answers: list[int] = []
    poll = RewardSwitchPoller.__call__

    def operator_asks(self: Any, iteration: int) -> Any:
        if iteration == 1 and not answers:
            answers.append(main(["train", "switch-reward", "--run-key", RUN_KEY, "--to", "v0"]))
        return poll(self, iteration)

    monkeypatch.setattr(RewardSwitchPoller, "__call__", operator_asks)
    res = train_policy(ctx, TrainRequest(timesteps=BUDGET)).as_dict()
    assert answers == [0] and "switch to reward v0" in capsys.readouterr().out
    assert ctx.storage.read_json(control_uri(ctx))["training_run"] == res["run_id"]
    assert [s["iteration"] for s in res["reward_switches"]] == [1]
    assert res["reward_fn_sha256_final"] == pack.reward_fn("v0").version and res["iterations"] == 3
    assert main(["train", "switch-reward", "--run-key", RUN_KEY, "--to", "v7"]) == 2  # a user error
    assert "v7" in capsys.readouterr().err


@pytest.mark.usefixtures("steps_load_pack")
def test_a_stale_request_never_switches_a_later_training(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """No training running: the CLI refuses. A request left from before (written by an older
    version, or by hand) is ignored by the next training of the run key, which trains and
    registers the reward function it started with."""
    from rlops.cli import main
    from rlops.pipeline_steps.training.hot_reload import STATUS_FILE, control_uri
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    ctx = _ctx(tmp_path)
    assert main(["train", "switch-reward", "--run-key", RUN_KEY, "--to", "v0"]) == 2
    assert "no training" in capsys.readouterr().err
    ctx.storage.write_json(control_uri(ctx), {"reward_fn": "v0", "requested_at": "2026-01-01T00:00:00+00:00"})
    res = train_policy(ctx, TrainRequest(timesteps=BUDGET)).as_dict()
    assert res["reward_switches"] == []
    assert res["reward_fn_sha256_final"] == res["reward_fn_sha256"] == pack.reward_fn("v1").version
    status = ctx.storage.read_json(ctx.uri("control", ctx.scenario, RUN_KEY, STATUS_FILE))
    assert status["status"] == "ignored" and "older than this training" in status["reason"]


def test_a_reward_file_added_mid_training_is_refused_cleanly(tmp_storage_root: str, tmp_path: Path, pack: Any) -> None:
    """The training's pack has no such function: the poller refuses (and says why), never raises."""
    from datetime import datetime, timedelta

    from rlops.pipeline_steps.training.hot_reload import STATUS_FILE, RewardSwitchPoller, control_uri

    ctx = _ctx(tmp_path)
    poller = RewardSwitchPoller(ctx, pack, started_at=datetime.now(UTC) - timedelta(minutes=1))
    ctx.storage.write_json(
        control_uri(ctx), {"reward_fn": "v9", "requested_at": datetime.now(UTC).isoformat(timespec="seconds")}
    )
    assert poller(3) is None
    status = ctx.storage.read_json(ctx.uri("control", ctx.scenario, RUN_KEY, STATUS_FILE))
    assert status["status"] == "refused" and "v9" in status["reason"]
    ctx.storage.write_json(
        control_uri(ctx),
        {
            "reward_fn": "v0",
            "reward_fn_sha256": "0" * 64,
            "requested_at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
    )
    assert poller(4) is None  # the file changed since the request: refused, not silently another function
    ctx.storage.write_json(
        control_uri(ctx), {"reward_fn": "v0", "requested_at": datetime.now(UTC).isoformat(timespec="seconds")}
    )
    assert poller(5).version == pack.reward_fn("v0").version


def test_dag_conf_schedules_the_switch() -> None:
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    good = {
        "scenario": "credit_approval",
        "reward_fn": "v1",
        "timesteps": 2000,
        "mode": "full",
        "dry_run": True,
        "reward_switch_to": "v0",
        "reward_switch_at_iteration": 3,
    }
    conf = validate_conf(good)
    assert conf["reward_switch_to"] == "v0" and conf["reward_switch_at_iteration"] == 3
    with pytest.raises(ConfError, match="reward_switch_to"):
        validate_conf({**good, "reward_switch_to": "v9"})
    with pytest.raises(ConfError, match="reward_switch_at_iteration"):
        validate_conf({**good, "reward_switch_at_iteration": 0})
