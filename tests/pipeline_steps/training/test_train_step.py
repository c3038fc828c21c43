"""Train step: a tiny PPO run registers a policy version with lineage tags and a servable pyfunc;
incremental runs warm-start from the champion; re-runs resume or reuse; dry runs write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.common.config import REPO_ROOT, deep_merge
from rlops.pipeline_steps.infra.context import StepContext
from rlops.registry.client import policy_model_name, reward_fn_model_name

SCENARIO = "credit_approval"
NAME = policy_model_name(SCENARIO)
TINY = 16 * 8 * 2  # 16 envs x 8 steps x 2 iterations
LINEAGE = (
    "reward_fn",
    "reward_fn_sha256",
    "reward_fn_model_version",
    "calibration_version",
    "data_version",
    "parent_champion",
    "mode",
    "timesteps",
    "train_seconds",
)


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(REPO_ROOT / "scenarios" / SCENARIO)


pytestmark = pytest.mark.usefixtures("steps_load_pack")


def make_ctx(tmp_path: Path, run_key: str = "20260105T1000", dry_run: bool = False, **over: Any) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "train": {"num_envs": 16, "eval_episodes": 64, "checkpoint_every": 1},
        "ppo": {"num_steps": 8, "device": "cpu", "learning_rate": 1e-3},
    }
    return StepContext.create(run_key=run_key, dry_run=dry_run, overrides=deep_merge(overrides, over))


def test_full_run_registers_lineage_and_a_servable_pyfunc(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, pack: Any
) -> None:
    import mlflow.pyfunc

    from rlops.agent_sdk.policy_client import ObservationEncoder
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest
    from rlops.pipeline_steps.training.status import train_status

    ctx = make_ctx(tmp_path)
    summary = train_policy(ctx, TrainRequest(timesteps=TINY))
    assert summary.inputs.mode == "full" and summary.inputs.parent_champion is None and not summary.reused
    assert summary.trained is not None and summary.plan is None
    assert summary.trained.iterations == 2 and summary.trained.timesteps == TINY
    res = summary.as_dict()  # the JSON the CLI prints and the DAG task pushes
    assert res["model_version"] == summary.model_version and isinstance(res["mean_return"], float)
    assert res["iterations"] == 2 and res["timesteps"] == TINY and res["mode"] == "full"
    tags = ctx.tracker.model_version_tags(NAME, res["model_version"])
    assert set(LINEAGE) <= set(tags)
    assert tags["reward_fn_sha256"] == pack.reward_fn("v1").version and tags["reward_fn"] == "v1"
    assert tags["parent_champion"] == "none" and tags["mode"] == "full"
    assert tags["data_version"] == "run_key=20260105T1000" and tags["calibration_version"] == "none"
    fn_tags = ctx.tracker.model_version_tags(reward_fn_model_name(SCENARIO), tags["reward_fn_model_version"])
    assert fn_tags["sha256"] == tags["reward_fn_sha256"]
    # checkpoints for resuming, per-iteration metrics in MLflow
    assert sorted(p.name for p in Path(res["checkpoint_dir"]).glob("ckpt_*.pt"))
    status = train_status(ctx, res["run_id"])
    assert [r["step"] for r in status.rows] == [128, 256] and "episodic_return" in status.columns

    # the registered pyfunc loads and decides a legal action for an encoded production state
    model = mlflow.pyfunc.load_model(f"models:/{NAME}/{res['model_version']}")
    enc = ObservationEncoder(pack)
    state = {
        "user_profile": {"age": 30, "income_monthly": 9000.0, "employment": "salaried", "region": "guangdong"},
        "application": {"loan_amount": 30000.0, "purpose": "car", "term_months": 12},
        "system_status": {"fraud_check_done": False, "credit_report_fetched": False},
        "decision": {"approval_result": "pending", "approved_amount": 0.0, "notified": False},
    }
    _, mask, obs = enc.encode(state)
    import pandas as pd

    out = model.predict(pd.DataFrame(obs.astype("float64"), columns=enc.columns))
    assert list(out.columns[:2]) == ["action", "action_index"] and len(out) == 1
    assert bool(mask[0, int(out["action_index"][0])])
    probs = out[[f"prob.{a}" for a in pack.scenario.action_names]].to_numpy()
    assert abs(probs.sum() - 1) < 1e-5 and probs[0][~mask[0]].max() == 0

    # same run key, same inputs: the registered version is returned instead of a second one
    again = train_policy(make_ctx(tmp_path), TrainRequest(timesteps=TINY))
    assert again.reused and again.trained is None and again.model_version == summary.model_version
    assert again.as_dict()["reused"] and "already trained" in again.inputs.note


def test_incremental_without_champion_trains_full_and_says_so(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    res = train_policy(make_ctx(tmp_path), TrainRequest(mode="incremental", timesteps=TINY)).as_dict()
    assert res["requested_mode"] == "incremental" and res["mode"] == "full"
    assert "no champion" in res["note"] and res["parent_champion"] is None


@pytest.mark.parametrize("ewc_lambda", [0.0, 5.0], ids=["plain", "ewc"])
def test_incremental_warm_starts_from_the_champion(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, ewc_lambda: float
) -> None:
    from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    ctx = make_ctx(tmp_path, run_key="20260105T1000")
    first = train_policy(ctx, TrainRequest(timesteps=TINY)).as_dict()
    ctx.tracker.set_alias(NAME, "champion", first["model_version"])
    ctx2 = make_ctx(tmp_path, run_key="20260105T1015-15m", train={"ewc_lambda": ewc_lambda})
    res = train_policy(ctx2, TrainRequest(mode="incremental", timesteps=TINY)).as_dict()
    assert res["mode"] == "incremental" and res["parent_champion"] == first["model_version"]
    tags = ctx2.tracker.model_version_tags(NAME, res["model_version"])
    assert tags["parent_champion"] == first["model_version"] and tags["mode"] == "incremental"
    # Warm start: after two small updates the weights are still next to the champion's, far from
    # a fresh random initialisation.
    champ = load_policy_ref(ctx2, first["model_version"], tmp_path / "dl").network
    new = load_policy_ref(ctx2, f"credit_approval-policy/{res['model_version']}", tmp_path / "dl").network
    w_champ, w_new = champ.actor[0].weight, new.actor[0].weight
    assert (w_new - w_champ).abs().max() < 0.2
    assert (w_new - w_champ).abs().max() < 0.2 * (w_champ - torch.randn_like(w_champ)).abs().max()


def test_resume_continues_from_the_last_checkpoint(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlops.pipeline_steps.training.ppo_run as ppo_run
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    register = ppo_run.register_policy

    def crash(*a: Any, **kw: Any) -> Any:
        raise RuntimeError("worker lost")

    from mlflow.tracking import MlflowClient

    end_run = MlflowClient.set_terminated
    monkeypatch.setattr(ppo_run, "register_policy", crash)  # dies after training, before registering
    # ... and like a killed process, never gets to end its MLflow run.
    monkeypatch.setattr(MlflowClient, "set_terminated", lambda *a, **kw: None)
    with pytest.raises(RuntimeError, match="worker lost"):
        train_policy(make_ctx(tmp_path), TrainRequest(timesteps=TINY))
    monkeypatch.setattr(MlflowClient, "set_terminated", end_run)
    client = MlflowClient(tmp_tracking)
    exp = client.get_experiment_by_name(SCENARIO)
    left_open = [r for r in client.search_runs([exp.experiment_id], "tags.`rlops.step` = 'train_policy'")]
    assert [r.info.status for r in left_open] == ["RUNNING"]
    monkeypatch.setattr(ppo_run, "register_policy", register)
    res = train_policy(make_ctx(tmp_path), TrainRequest(timesteps=TINY)).as_dict()
    assert res["resumed_from"] == "ckpt_00000002.pt" and res["iterations"] == 2 and res["model_version"] == "1"
    stale = client.get_run(left_open[0].info.run_id)  # the resumed training closed it
    assert stale.info.status == "KILLED" and "rlops.closed_by" in stale.data.tags
    assert client.get_run(res["run_id"]).data.tags["rlops.closed_stale_runs"] == stale.info.run_id


def test_dry_run_writes_nothing(
    tmp_tracking: str,
    tmp_storage_root: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mlflow import MlflowClient

    from rlops.cli import main

    params = tmp_path / "params.yaml"
    params.write_text((REPO_ROOT / "params.yaml").read_text() + f"\nlocal_dir: {tmp_path / 'local'}\n")
    monkeypatch.setenv("RLOPS_PARAMS", str(params))
    assert (
        main(
            [
                "train",
                "policy",
                "--mode",
                "incremental",
                "--timesteps",
                "5000",
                "--dry-run",
                "--json",
                "--run-key",
                "20260105T1100",
            ]
        )
        == 0
    )
    res = json.loads(capsys.readouterr().out)
    assert res["dry_run"] and res["mode"] == "full" and res["timesteps_budget"] == 5000
    assert res["warm_start"] == "none (from scratch)" and res["reward_fn"] == "v1"
    assert not (tmp_path / "local").exists()
    client = MlflowClient(tmp_tracking)
    assert client.search_registered_models() == []
    assert not client.search_runs([e.experiment_id for e in client.search_experiments()])
