"""``train.source: logs``: a candidate learnt from the logged traffic of an exploring incumbent on
the one-step offer pack, registered as PPO's are, with its source and held-out split recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import deep_merge
from rlops.common.errors import UserError
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.pipeline_steps.training.request import TrainRequest
from rlops.registry.client import policy_model_name

SCENARIO = "offer_selection"
RUN_KEY = "20260105T1100"


def make_ctx(tmp_path: Path, scenario: str = SCENARIO, **over: Any) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "capture": {"episodes": 3000},
        "exploration": {"share": 0.5, "distribution": "uniform"},
        "train": {
            "eval_episodes": 200,
            "logs_holdout_share": 0.25,
            "logs_split_seed": 3,
            "offpolicy": {"epochs": 2, "batch_size": 1024, "hidden_sizes": [16], "reward_model_epochs": 2},
        },
    }
    return StepContext.create(scenario, run_key=RUN_KEY, overrides=deep_merge(overrides, over))


def test_the_split_is_a_function_of_the_episode_id() -> None:
    split = HoldOut(seed=3, share=0.25)
    ids = [f"ep-{i}" for i in range(4000)]
    held = split.held_out(ids)
    assert held == split.held_out(ids) and 0.22 < sum(held) / len(ids) < 0.28
    assert held != HoldOut(seed=4, share=0.25).held_out(ids)
    assert HoldOut.from_tags(split.tags()) == split and HoldOut.from_tags({}) is None
    assert not any(HoldOut(seed=3, share=0.0).held_out(ids))
    with pytest.raises(ValueError, match="share"):
        HoldOut(seed=0, share=1.0)


def test_logs_source_learns_from_captured_traffic_and_registers_a_candidate(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    import mlflow
    import numpy as np
    import torch

    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.policy_loader import load_policy_ref, resolve
    from rlops.pipeline_steps.promotion.ope_gate import ope_gates
    from rlops.pipeline_steps.training.policy import train_policy

    torch.set_num_threads(1)
    ctx = make_ctx(tmp_path)
    cap = capture_step(ctx, CaptureRequest(simulate=True)).as_dict()
    rows = ctx.traces.read(SCENARIO)
    assert cap["rows_accepted"] == len(rows) == 3000
    assert 0.3 < rows["explored"].mean() < 0.7  # the incumbent explores half its decisions

    out = train_policy(ctx, TrainRequest(source="logs")).as_dict()
    assert out["model_version"] == "1" and not out["reused"]
    held = sum(HoldOut(3, 0.25).held_out(rows["episode_id"].unique()))
    assert out["timesteps"] == 3000 - held  # one decision per episode: the training episodes

    tags = ctx.tracker.model_version_tags(policy_model_name(SCENARIO), "1")
    assert tags["train_source"] == "logs"
    assert (tags["logs_split_seed"], tags["logs_holdout_share"]) == ("3", "0.25")
    run = mlflow.MlflowClient(ctx.config.tracking.uri).get_run(out["run_id"]).data
    assert run.tags["rlops.train.source"] == "logs"
    assert run.params["train.source"] == "logs" and run.params["logs.holdout_episodes"] == str(held)

    # the registered artifact is PPO's: it loads and decides, illegal offers at probability 0
    ref = resolve(ctx, "1")
    assert ref is not None
    loaded = load_policy_ref(ctx, ref, tmp_path / "dl")
    assert loaded is not None
    policy = loaded.network
    env = ctx.load_pack().make_env(512, seed=1)
    act = policy.act(env.observe(), deterministic=True)
    masks = env.action_masks()
    assert bool(masks.gather(1, act.action.unsqueeze(1)).all())
    assert float(act.probs[~masks].abs().max()) == 0.0 and not np.isnan(out["mean_return"])

    # the off-policy gate judges it on the held-out episodes only; another candidate on them all
    gate_ctx = make_ctx(tmp_path, ope={"direct_method": "none", "min_episodes": 50})
    pack, ope, explore = gate_ctx.load_pack(), gate_ctx.config.ope, gate_ctx.config.exploration
    judged = ope_gates(gate_ctx, ope, explore, pack, policy, None, "v1", None, HoldOut.from_tags(tags))
    assert judged.result is not None and judged.result.episodes == held
    assert "held out of its training log" in judged.note
    everything = ope_gates(gate_ctx, ope, explore, pack, policy, None, "v1", None)
    assert everything.result is not None and everything.result.episodes == 3000

    again = train_policy(ctx, TrainRequest(source="logs")).as_dict()
    assert again["reused"] and again["model_version"] == "1"  # same window, same settings: same version


def test_a_multi_step_pack_is_refused_with_the_reason(tmp_tracking: str, tmp_storage_root: str, tmp_path: Path) -> None:
    from rlops.pipeline_steps.training.policy import train_policy

    ctx = make_ctx(tmp_path, "credit_approval")
    with pytest.raises(UserError, match="multi-step logs is not supported yet"):
        train_policy(ctx, TrainRequest(source="logs"))


def test_no_logged_traffic_is_a_clear_error(tmp_tracking: str, tmp_storage_root: str, tmp_path: Path) -> None:
    from rlops.pipeline_steps.training.policy import train_policy

    with pytest.raises(UserError, match="no complete live episode"):
        train_policy(make_ctx(tmp_path, train={"source": "logs"}), TrainRequest())
