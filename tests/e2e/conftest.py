"""End-to-end fixtures: an Airflow metadata DB (SQLite, migrated once), and an rlops project
home with tiny budgets so whole DAG runs fit in a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from common.config import REPO_ROOT, deep_merge

# Budgets small enough for 2 CPU cores, large enough that the steps do real work.
TINY: dict[str, Any] = {
    "capture": {"episodes": 800},
    "drift": {"baseline_episodes": 800},
    "reward_model": {"pairs": 800, "epochs": 8},
    "train": {"num_envs": 512, "eval_episodes": 400, "checkpoint_every": 1000},
    "evaluate": {"episodes": 1500, "bootstrap_samples": 400, "latency_samples": 50},
    "stress": {"edge_states": 1000, "gaming_episodes": 500, "policy_episodes": 400},
    "recalibrate": {"check_samples": 2000},
    "label_queue": {"threshold": 0.2, "min_cluster_states": 5, "min_bucket_states": 1, "clusters": 4},
}


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """Migrate the session's Airflow metadata DB (its home is set in tests/conftest.py) and create
    the ``gpu`` pool the training tasks use."""
    env = dict(os.environ)
    for cmd in (["db", "migrate"], ["pools", "set", "gpu", "1", "GPU training slots"]):
        out = subprocess.run([sys.executable, "-m", "airflow", *cmd], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
    return env["AIRFLOW_HOME"]


@pytest.fixture()
def rlops_home(tmp_path: Path, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project home: storage, MLflow and the label queue under tmp, tiny budgets."""
    params = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    params = deep_merge(params, TINY)
    params["storage"]["root"] = f"file://{tmp_path / 'data'}"
    params["tracking"]["uri"] = tmp_tracking
    params["label_queue"]["db_url"] = f"sqlite:///{tmp_path / 'queue.db'}"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    monkeypatch.setenv("RLOPS_PARAMS", str(tmp_path / "params.yaml"))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    for var in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path
