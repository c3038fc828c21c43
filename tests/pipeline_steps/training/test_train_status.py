"""``rlops train status``: a training in progress found by its process id, the latest iterations
with return, entropy, KL, clip fraction and steps/s, and the plateau flag after 10 flat iterations."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext

SCENARIO = "credit_approval"
ROW = {"entropy": 1.0, "approx_kl": 0.01, "clipfrac": 0.1, "sps": 1000.0}


def make_ctx(tmp_path: Path) -> StepContext:
    overrides = {
        "local_dir": str(tmp_path / "local"),
        "train": {"num_envs": 16, "eval_episodes": 32},
        "ppo": {"num_steps": 8, "device": "cpu"},
    }
    return StepContext.create(SCENARIO, run_key="20260105T1000", overrides=overrides)


def test_a_running_training_is_found_by_pid_and_a_flat_return_is_a_plateau(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.training.status import train_status

    ctx = make_ctx(tmp_path)
    tags = {"rlops.step": "train_policy", "rlops.pid": os.getpid(), "rlops.host": socket.gethostname()}
    with ctx.tracker.start_run("train-full-x", tags=tags) as run:
        returns = [0.1, 0.5, *([0.5] * 10)]  # best at iteration 2, then 10 iterations without improvement
        for i, r in enumerate(returns):
            run.log_metrics({"episodic_return": r, **ROW}, step=(i + 1) * 128)
            if i == len(returns) - 2:
                early = train_status(ctx, pid=os.getpid())
                assert early.run_id == run.run_id and not early.plateau
        status = train_status(ctx, pid=os.getpid(), last=5)
        assert status.run_id == run.run_id and status.status == "RUNNING"
        assert status.plateau and status.iterations_without_improvement == 10 and status.iterations == 12
        assert len(status.rows) == 5 and status.rows[-1]["step"] == 12 * 128
        assert {"episodic_return", "entropy", "approx_kl", "clipfrac", "sps"} <= set(status.columns)
    with pytest.raises(LookupError, match="no training in progress"):  # finished: read it by run id
        train_status(ctx, pid=os.getpid())
    assert train_status(ctx, run.run_id).status == "FINISHED"


def test_a_training_run_records_its_pid(
    tmp_tracking: str, tmp_storage_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest
    from rlops.pipeline_steps.training.status import train_status
    from rlops.sandbox.pack import load_pack

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO)
    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: pack)
    torch.set_num_threads(1)
    ctx = make_ctx(tmp_path)
    res = train_policy(ctx, TrainRequest(timesteps=16 * 8 * 2)).as_dict()
    status = train_status(ctx, res["run_id"])
    assert status.tags["rlops.pid"] == str(os.getpid()) and status.tags["rlops.host"] == socket.gethostname()
    assert status.iterations == 2 and not status.plateau and "clipfrac" in status.columns
