"""retrain_full with params `train.reward_source: blend`: the DAG relabels the captured traces with
the reward model it just trained and trains the policy on it; the policy version names that reward
model version."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import yaml

from tests.dags.test_dags_e2e import _run, _xcom

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def test_retrain_full_trains_on_the_reward_model_it_just_trained(airflow_db: str, rlops_home: Path) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.client import policy_model_name

    params = yaml.safe_load((rlops_home / "params.yaml").read_text())
    params["train"].update(reward_source="blend", reward_blend_lambda=0.5, num_envs=256, eval_episodes=200)
    params["stress"].update(gaming_episodes=200, policy_episodes=200)
    (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))
    assert str(_run("trace_capture", WHEN, simulate=True)[0].state) == "success"

    run, states = _run("retrain_full", WHEN, timesteps=4_096, mode="full")
    assert states["train_policy"] == "success" and states["relabel"] == "success", states
    rm = _xcom(run, "train_reward_model")
    relabelled = _xcom(run, "relabel")
    trained = _xcom(run, "train_policy")
    assert relabelled["rows_out"] == relabelled["rows_in"] > 0
    assert relabelled["reward_model_version"] == rm["model_version"]
    assert trained["reward_source"] == "blend" and trained["reward_model_version"] == rm["model_version"]
    assert trained["behaviour_cloning"]["steps_imitated"] > 0
    tags = StepContext.create("credit_approval").tracker.model_version_tags(
        policy_model_name("credit_approval"), trained["model_version"]
    )
    assert tags["reward_model_version"] == rm["model_version"] and tags["reward_source"] == "blend"
