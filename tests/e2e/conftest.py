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


# --------------------------------------------------------------------------- MLflow server
def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def mlflow_server(tmp_path: Path, _mlflow_template_db: Path) -> Any:
    """A real ``mlflow server`` on 127.0.0.1 (SQL backend: a copy of the pre-migrated SQLite DB,
    proxied artifacts under tmp) that may call webhooks on ``http`` and private addresses, as a
    local receiver needs. Yields its URL."""
    import shutil
    import time
    import urllib.request

    from cryptography.fernet import Fernet
    folder = tmp_path / "mlflow-server"
    folder.mkdir()
    shutil.copyfile(_mlflow_template_db, folder / "mlflow.db")
    port = free_port()
    env = {**os.environ, "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https", "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
           "MLFLOW_WEBHOOK_CACHE_TTL": "1", "MLFLOW_WEBHOOK_REQUEST_MAX_RETRIES": "1",
           "MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY": Fernet.generate_key().decode()}
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-3000:]}")
        time.sleep(0.5)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
