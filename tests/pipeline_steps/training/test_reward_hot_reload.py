"""Hot reload, operationally: a switch scheduled by the DAG conf or requested with
`rlops train-switch-reward` is picked up between PPO iterations, recorded on the training run
(iteration, old and new sha256), and training continues with the new function."""

from __future__ import annotations

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
    overrides = {"local_dir": str(tmp_path / "local"), "train": {"num_envs": 16, "eval_episodes": 32},
                 "ppo": {"num_steps": 8, "device": "cpu"}}
    return StepContext.create(run_key=RUN_KEY, overrides=deep_merge(overrides, {}))


def _client(ctx: StepContext) -> Any:
    from mlflow.tracking import MlflowClient
    return MlflowClient(ctx.params["tracking"]["uri"])


@pytest.mark.usefixtures("steps_load_pack")
def test_scheduled_switch_is_recorded_and_training_continues(tmp_tracking: str, tmp_storage_root: str,
                                                             tmp_path: Path, pack: Any) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    ctx = _ctx(tmp_path)
    res = train_policy(ctx, "full", timesteps=BUDGET, reward_switch=(2, "v0"))
    v0, v1 = pack.reward_fn("v0").version, pack.reward_fn("v1").version
    assert res["reward_switches"] == [{"iteration": 2, "global_step": 128, "old_sha256": v1, "new_sha256": v0}]
    assert res["iterations"] == 3 and res["reward_fn_sha256_final"] == v0
    tags = ctx.tracker._call("run", lambda c: c.get_run(res["run_id"])).data.tags
    assert tags["reward_switch.2"] == f"{v1} -> {v0}"


@pytest.mark.usefixtures("steps_load_pack")
def test_cli_request_switches_a_training_of_that_run_key(tmp_tracking: str, tmp_storage_root: str,
                                                         tmp_path: Path, pack: Any,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from rlops.pipeline_steps.training.hot_reload import control_uri
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.cli import main
    ctx = _ctx(tmp_path)
    assert main(["train", "switch-reward", "--run-key", RUN_KEY, "--to", "v0"]) == 0
    assert "switch to reward v0" in capsys.readouterr().out
    assert ctx.storage.read_json(control_uri(ctx))["reward_fn"] == "v0"
    res = train_policy(ctx, "full", timesteps=BUDGET)
    assert [s["iteration"] for s in res["reward_switches"]] == [1]
    assert res["reward_fn_sha256_final"] == pack.reward_fn("v0").version and res["iterations"] == 3
    assert main(["train", "switch-reward", "--run-key", RUN_KEY, "--to", "v7"]) == 2  # a user error
    assert "v7" in capsys.readouterr().err


def test_dag_conf_schedules_the_switch() -> None:
    from rlops.pipeline_steps.orchestration.tasks import ConfError, validate_conf
    good = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 2000, "mode": "full",
            "dry_run": True, "reward_switch_to": "v0", "reward_switch_at_iteration": 3}
    conf = validate_conf(good)
    assert conf["reward_switch_to"] == "v0" and conf["reward_switch_at_iteration"] == 3
    with pytest.raises(ConfError, match="reward_switch_to"):
        validate_conf({**good, "reward_switch_to": "v9"})
    with pytest.raises(ConfError, match="reward_switch_at_iteration"):
        validate_conf({**good, "reward_switch_at_iteration": 0})
