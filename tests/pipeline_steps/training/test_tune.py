"""``rlops train tune``: an Optuna study whose first trial is the defaults, every trial an MLflow
run under one tuning run, and ``--write`` as the only way it touches the pack's params.yaml."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT, deep_merge
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.training.request import TuneRequest

SCENARIO = "credit_approval"


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(REPO_ROOT / "scenarios" / SCENARIO)


pytestmark = pytest.mark.usefixtures("steps_load_pack")


def make_ctx(tmp_path: Path, ppo: dict[str, Any] | None = None) -> StepContext:
    packs = tmp_path / "scenarios"
    shutil.copytree(REPO_ROOT / "scenarios" / SCENARIO, packs / SCENARIO)
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "scenarios_dir": str(packs),
        "train": {"num_envs": 16},
        "ppo": {"num_steps": 8, "device": "cpu"},
    }
    return StepContext.create(SCENARIO, run_key="20260105T1000", overrides=deep_merge(overrides, {"ppo": ppo or {}}))


def test_two_trials_are_mlflow_runs_and_the_best_is_no_worse_than_the_defaults(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.training.tune import KNOBS, tune

    ctx = make_ctx(tmp_path)
    params_file = ctx.pack_dir / "params.yaml"
    before = params_file.read_text()
    res = tune(ctx, TuneRequest(trials=2, budget_s=120, timesteps=256, eval_episodes=64))
    assert params_file.read_text() == before and res.written is None  # no --write: untouched
    assert len(res.trials) == 2 and res.trials[0]["number"] == 0
    assert {k: res.trials[0][k] for k in KNOBS} == res.default_params  # trial 0 is the defaults
    assert [t["defaults"] for t in res.trials] == [True, False] and not res.trials[0]["pruned"]
    assert res.default_params["num_envs"] == 16 and res.default_params["num_steps"] == 8
    assert res.trials[0]["value"] == pytest.approx(res.default_value)
    complete = [t for t in res.trials if not t["pruned"]]
    assert res.best_value == pytest.approx(max(t["value"] for t in complete)) and res.best_value >= res.default_value
    client = ctx.tracker.client
    for row in res.trials:  # every trial is an MLflow run under the tuning run
        run = client.get_run(row["run_id"])
        assert run.data.tags["mlflow.parentRunId"] == res.parent_run_id
        assert run.data.tags["rlops.step"] == "tune_trial" and "episodic_return" in run.data.metrics
        assert run.data.tags["defaults"] == str(row["defaults"]).lower()
        if not row["pruned"]:  # scored on the held-out episodes, not on its training return
            assert run.data.metrics["objective"] == pytest.approx(row["value"])
    parent = client.get_run(res.parent_run_id)
    assert parent.data.metrics["best_value"] == pytest.approx(res.best_value)
    assert parent.data.metrics["default_value"] == pytest.approx(res.default_value)
    assert parent.data.params["eval_episodes"] == "64"


def test_trial_0_is_the_defaults_even_outside_the_search_space(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.training.tune import tune

    ctx = make_ctx(tmp_path, ppo={"ent_coef": 0.0})  # no point of the log-scale entropy range
    res = tune(ctx, TuneRequest(trials=1, timesteps=128, eval_episodes=16))
    assert res.trials[0]["defaults"] and res.trials[0]["ent_coef"] == 0.0 == res.default_params["ent_coef"]
    assert res.best_params == res.default_params and res.best_value == res.default_value


def test_write_puts_the_best_config_into_the_packs_params(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.training.tune import tune

    ctx = make_ctx(tmp_path)
    before = ctx.pack_dir.joinpath("params.yaml").read_text()
    res = tune(ctx, TuneRequest(trials=1, timesteps=128, eval_episodes=16, write=True))
    assert res.written == str(ctx.pack_dir / "params.yaml")
    text = Path(res.written).read_text()
    assert text.startswith(before.rstrip("\n"))  # the pack's own lines and comments stay
    data = yaml.safe_load(text)
    assert data["train"]["num_envs"] == res.best_params["num_envs"] == 16
    assert data["ppo"]["learning_rate"] == pytest.approx(res.best_params["learning_rate"])
    assert data["ppo"]["num_steps"] == 8


def test_write_merges_the_best_knobs_and_keeps_comments(tmp_path: Path) -> None:
    from rlops.pipeline_steps.training.tune import write_params

    f = tmp_path / "params.yaml"
    f.write_text(
        "# pack overrides\nppo:\n  learning_rate: 0.01   # keep me\n  anneal_lr: true\n\nevaluate:\n  segments: {}\n"
    )
    best = {
        "learning_rate": 0.001,
        "ent_coef": 0.02,
        "clip_coef": 0.15,
        "gamma": 0.99,
        "num_envs": 512,
        "num_steps": 16,
    }
    write_params(f, best)
    text = f.read_text()
    assert "# pack overrides" in text and "learning_rate: 0.001   # keep me" in text
    data = yaml.safe_load(text)
    assert data["ppo"] == {
        "learning_rate": 0.001,
        "anneal_lr": True,
        "ent_coef": 0.02,
        "clip_coef": 0.15,
        "gamma": 0.99,
        "num_steps": 16,
    }
    assert data["train"] == {"num_envs": 512} and data["evaluate"] == {"segments": {}}


def test_trials_report_to_the_pruner_at_equal_environment_steps() -> None:
    import optuna

    from rlops.pipeline_steps.training.tune import _TrialSink

    study = optuna.create_study(direction="maximize")
    trial = study.ask()
    sink = _TrialSink(None, trial, step_unit=1000)  # a trial whose batch is half the defaults'
    for i, global_step in enumerate((500, 1000, 1500, 2000), start=1):
        sink.on_iteration(i, None, {"episodic_return": float(i), "global_step": global_step})
    assert study.trials[0].intermediate_values == {0: 1.0, 1: 2.0, 2: 4.0}
