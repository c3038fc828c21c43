"""A real one-machine stack for the deployment tests: ``rlops stack up`` in a throwaway project home
(its own params file, storage, MLflow store, ports and Airflow database), driven through the REST
API as an operator would, and taken down (processes, then the database) at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.airflow_api import AirflowApi, read_credentials
from rlops.common.config import deep_merge
from rlops.stack.airflow_setup import maintenance_connection
from tests.conftest import REPO_ROOT, TINY, free_port

_DROPPED = ("AIRFLOW", "MLFLOW_", "RLOPS_")


@dataclass
class RunningStack:
    home: Path
    env: dict[str, str]
    up: dict[str, Any]
    up_seconds: float

    @property
    def stack_home(self) -> Path:
        return Path(self.up["home"])

    @property
    def api(self) -> AirflowApi:
        user, password = read_credentials(self.stack_home / "airflow-credentials.json")
        return AirflowApi(self.up["airflow_url"], user, password, timeout_s=30)

    def rlops(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "rlops.cli", *args],
            env=self.env,
            cwd=self.home,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def trigger(self, dag_id: str, conf: dict[str, Any], logical_date: str | None = None) -> str:
        body = {"logical_date": logical_date, "conf": conf}
        out = self.api.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", body)
        return str(out["dag_run_id"])

    def run_state(self, dag_id: str, run_id: str) -> str:
        rid = urllib.parse.quote(run_id, safe="")
        return str(self.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}")["state"])

    def tasks(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        rid = urllib.parse.quote(run_id, safe="")
        out = self.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{rid}/taskInstances")
        return {t["task_id"]: t["state"] for t in out["task_instances"]}

    def runs(self, dag_id: str) -> list[dict[str, Any]]:
        return list(self.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100")["dag_runs"])

    def wait(self, dag_id: str, run_id: str, timeout_s: float) -> str:
        """Until the run ends; its state (the task states in the failure message otherwise)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = self.run_state(dag_id, run_id)
            if state in ("success", "failed"):
                return state
            time.sleep(3)
        raise AssertionError(f"{dag_id} {run_id} still {state} after {timeout_s:.0f} s: {self.tasks(dag_id, run_id)}")

    def task_log(self, dag_id: str, run_id: str, task_id: str) -> str:
        logs = self.stack_home / "airflow" / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        return "\n".join(p.read_text(errors="replace") for p in sorted(logs.rglob("*.log")))


def stack_params(home: Path, **overrides: Any) -> Path:
    """A params file for a throwaway stack: the project's, tiny budgets, everything under ``home``,
    free ports."""
    params = deep_merge(yaml.safe_load((REPO_ROOT / "params.yaml").read_text()), TINY)
    params = deep_merge(
        params,
        {
            "storage": {"root": f"file://{home / 'data'}"},
            "tracking": {"uri": f"sqlite:///{home / 'mlflow.db'}", "artifact_root": str(home / "mlartifacts")},
            "label_queue": {"db_url": f"sqlite:///{home / 'queue.db'}"},
            "stack": {
                "home": str(home / "stack"),
                "airflow_port": free_port(),
                "mlflow_port": free_port(),
                "console_port": free_port(),
                "webhook_port": free_port(),
            },
        },
    )
    params = deep_merge(params, overrides)
    path = home / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def stack_env(home: Path, params: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}
    return {**env, "RLOPS_HOME": str(home), "RLOPS_PARAMS": str(params)}


def drop_database(url: str) -> None:
    if not url.startswith("postgresql"):
        return
    name = urllib.parse.urlsplit(url).path.lstrip("/")
    conn = maintenance_connection(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        conn.close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """``rlops stack up`` in a fresh project home, unscheduled (the tests trigger every run they
    judge), every pack's DAGs parsed; down and its database dropped afterwards."""
    home = tmp_path_factory.mktemp("stack-project")
    params = stack_params(home, dags={"scheduled": False})
    env = stack_env(home, params)
    t0 = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "rlops.cli", "stack", "up", "--json"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    seconds = time.monotonic() - t0
    running = RunningStack(home, env, json.loads(out.stdout) if out.stdout.strip() else {}, seconds)
    try:
        assert out.returncode == 0, f"stack up exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        yield running
    finally:
        down = running.rlops("stack", "down", "--json")
        state = home / "stack" / "state.json"
        database = json.loads(state.read_text()).get("database", "") if state.exists() else ""
        drop_database(database)
        assert down.returncode == 0, down.stderr
