"""The DVC pipeline: ``dvc repro`` in a fresh clone (the committed ``.dvc/`` and ``dvc.yaml``, no
``dvc init``) runs every stage through the rlops commands and leaves a lock file and metrics."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT, deep_merge

STAGES = ["validate", "capture", "drift", "recalibrate", "reward_model", "train", "stress", "evaluate"]


pytestmark = pytest.mark.slow  # every stage of the pipeline, about 80 s: `make test-slow` (and CI) run it


@pytest.fixture()
def dvc_project(tmp_path: Path, tmp_tracking: str) -> Path:
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("dvc.yaml", ".dvcignore"):
        shutil.copy(REPO_ROOT / name, proj / name)
    shutil.copytree(REPO_ROOT / ".dvc", proj / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    shutil.copytree(
        REPO_ROOT / "scenarios" / "credit_approval",
        proj / "scenarios" / "credit_approval",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params = deep_merge(
        params,
        {
            "dvc": {"capture_episodes": 600, "timesteps": 60_000},
            "drift": {"baseline_episodes": 600},
            "reward_model": {"pairs": 400, "epochs": 4},
            "train": {"num_envs": 256, "eval_episodes": 200},
            "evaluate": {"episodes": 600, "bootstrap_samples": 200, "latency_samples": 30},
            "stress": {"edge_states": 1000, "gaming_episodes": 300, "policy_episodes": 200},
            "recalibrate": {"check_samples": 1000},
        },
    )
    params["tracking"]["uri"] = tmp_tracking
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (proj / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    (proj / "metrics").mkdir()
    (proj / ".gitignore").write_text("rlops-data/mlflow.db\nrlops-data/checkpoints\nrlops-data/mlartifacts\n")
    return proj


def test_dvc_repro_runs_every_stage(dvc_project: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO_ROOT),
        "RLOPS_PARAMS": str(dvc_project / "params.yaml"),
        "RLOPS_HOME": str(dvc_project),
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
        "DVC_NO_ANALYTICS": "1",
    }
    for var in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB", "MLFLOW_TRACKING_URI"):
        env.pop(var, None)

    def sh(*cmd: str, timeout: int = 900) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(cmd, cwd=dvc_project, env=env, capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return out

    sh("git", "init", "-q")
    sh("git", "-c", "user.email=ci@example.com", "-c", "user.name=ci", "commit", "-q", "--allow-empty", "-m", "init")
    sh(str(Path(bin_dir) / "dvc"), "repro")

    lock = yaml.safe_load((dvc_project / "dvc.lock").read_text())
    assert set(lock["stages"]) == set(STAGES)
    assert lock["stages"]["capture"]["params"]["params.yaml"]["dvc.run_key"] == "20260101T0000"
    metrics = {s: json.loads((dvc_project / "metrics" / f"{s}.json").read_text()) for s in STAGES}
    assert metrics["validate"]["valid"] is True
    cap = metrics["capture"]
    assert cap["rows_in"] == cap["rows_accepted"] + cap["rows_quarantined"] > 0
    assert metrics["train"]["model_version"] == "1"
    assert "passed" in metrics["stress"] and "gates" in metrics["evaluate"]
    assert (dvc_project / "metrics" / "train_curve.csv").read_text().startswith("step,")

    # Nothing changed: a second repro is a no-op.
    out = sh(str(Path(bin_dir) / "dvc"), "repro")
    assert "didn't change" in out.stdout or "up to date" in out.stdout.lower()
