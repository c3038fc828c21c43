"""Faults through the real stack: SIGKILL of a training, a worker, the scheduler, a promotion and a
capture; the tracking server down for a minute; PostgreSQL restarted. After each, what an operator
checks: the run was retried to success or the next run succeeds, no MLflow run is left RUNNING, the
champion alias names a version rlops promoted, and every landed row is accepted or quarantined once.

Soak marker: about 20 minutes on 2 cores (``pytest -m soak tests/stack/test_faults.py``). The
PostgreSQL test restarts the machine's server: run it where nothing else uses that server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlops.stack import processes
from tests.stack.conftest import RunningStack

pytestmark = pytest.mark.soak
PACK = "credit_approval"
RETRAIN = f"retrain_full__{PACK}"
CAPTURE = f"trace_capture__{PACK}"
# a budget that keeps train_policy busy long enough to be killed in the middle
LONG_TRAINING = 150_000

# Writes rule-engine traffic into the landing zone as the SDK does in an agent; prints the row count.
_LAND = """
import json, sys
from rlops.agent_sdk.tracer import Tracer
from rlops.pipeline_steps.infra.context import StepContext
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import rule_policy
from rlops.sandbox.traces import rollout_traces

scenario, episodes, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ctx = StepContext.create(scenario)
df = rollout_traces(load_pack(ctx.pack_dir), rule_policy, episodes, seed=11, profile="live",
                    source="live", policy_version="rules", episode_prefix=prefix)
tracer = Tracer(ctx.traces.landing_uri, flush_interval_s=None)
for rec in json.loads(df.to_json(orient="records")):
    tracer.record(rec)
tracer.flush()
tracer.close()
print(len(df))
"""

# The trace store's rows of the pack, and how many (episode, step) pairs occur more than once.
_COUNT = """
import json, sys
from rlops.pipeline_steps.infra.context import StepContext
ctx = StepContext.create(sys.argv[1])
df = ctx.traces.read(sys.argv[1], columns=["episode_id", "step"])
print(json.dumps({"rows": len(df), "duplicates": int(df.duplicated(["episode_id", "step"]).sum())}))
"""


# --------------------------------------------------------------------------- helpers
def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def task_processes(ti_id: str) -> tuple[list[int], list[int]]:
    """``(executor workers, task processes)`` running the task instance ``ti_id``: Airflow titles the
    LocalExecutor's worker ``airflow worker -- LocalExecutor: <ti id>`` and the task it forks
    ``airflow worker -- <ti id>``."""
    workers, tasks = [], []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            line = _cmdline(int(d.name))
            if line.endswith(f"LocalExecutor: {ti_id}"):
                workers.append(int(d.name))
            elif line.endswith(f"-- {ti_id}"):
                tasks.append(int(d.name))
    return workers, tasks


def wait_running(stack: RunningStack, dag_id: str, run_id: str, task_id: str, timeout_s: float = 900) -> str:
    """Until ``task_id`` of the run is running with a task process; its task-instance id."""
    from urllib.parse import quote

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ti = stack.api.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}")
        if ti.get("state") == "running" and task_processes(str(ti["id"]))[1]:
            return str(ti["id"])
        if ti.get("state") in ("success", "failed", "skipped", "upstream_failed"):
            raise AssertionError(f"{dag_id} {run_id} {task_id} ended ({ti['state']}) before it could be killed")
        time.sleep(0.5)
    raise AssertionError(f"{dag_id} {run_id} {task_id} never ran: {stack.tasks(dag_id, run_id)}")


def kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def next_hour(offset_h: int = 1) -> str:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return (now + timedelta(hours=offset_h)).strftime("%Y-%m-%dT%H:%M:%SZ")


def retrain(stack: RunningStack, timesteps: int) -> str:
    # a budget of its own makes the run's inputs differ from every earlier run's (never skipped)
    return stack.trigger(RETRAIN, {"timesteps": timesteps, "staged": False})


def in_stack_env(stack: RunningStack, code: str, *args: str) -> str:
    env = {**stack.env, "MLFLOW_TRACKING_URI": stack.up["mlflow_url"]}
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, cwd=stack.home, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.strip().splitlines()[-1]


def assert_consistent(stack: RunningStack) -> None:
    """No MLflow run of the pack RUNNING; the champion alias names a version rlops promoted."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=stack.up["mlflow_url"])
    experiments = [e.experiment_id for e in client.search_experiments() if PACK in e.name]
    running = client.search_runs(experiments, filter_string="attributes.status = 'RUNNING'") if experiments else []
    assert not running, [(r.info.run_name, r.data.tags.get("rlops.pid")) for r in running]
    model = client.get_registered_model(f"{PACK}-policy")
    champion = model.aliases.get("champion")
    assert champion is not None, "no champion after the fault"
    tags = client.get_model_version(f"{PACK}-policy", champion).tags
    assert tags.get("rlops.promotion.outcome") == "champion", tags


def restart_parts(stack: RunningStack) -> dict[str, Any]:
    out = stack.rlops("stack", "up", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return dict(json.loads(out.stdout))


def run_succeeds_after(stack: RunningStack, run_id: str, timesteps: int) -> None:
    """The faulted run ends (retried to success, or failed by the fault); the next run succeeds."""
    stack.wait(RETRAIN, run_id, 1800)
    following = retrain(stack, timesteps)
    assert stack.wait(RETRAIN, following, 1800) == "success", stack.tasks(RETRAIN, following)
    assert_consistent(stack)


# --------------------------------------------------------------------------- the faults
@pytest.fixture(scope="module")
def with_champion(stack: RunningStack) -> RunningStack:
    run_id = stack.trigger(CAPTURE, {"simulate": True}, logical_date=next_hour(-2))
    assert stack.wait(CAPTURE, run_id, 600) == "success", stack.tasks(CAPTURE, run_id)
    first = retrain(stack, 30_000)
    assert stack.wait(RETRAIN, first, 1800) == "success", stack.tasks(RETRAIN, first)
    assert_consistent(stack)
    return stack


def test_sigkill_of_a_training_is_retried_to_success(with_champion: RunningStack) -> None:
    stack = with_champion
    run_id = retrain(stack, LONG_TRAINING)
    ti = wait_running(stack, RETRAIN, run_id, "train_policy")
    time.sleep(5)
    kill(task_processes(ti)[1])
    assert stack.wait(RETRAIN, run_id, 1800) == "success", stack.tasks(RETRAIN, run_id)
    assert_consistent(stack)


def test_sigkill_of_a_worker_mid_training_then_the_next_run_succeeds(with_champion: RunningStack) -> None:
    stack = with_champion
    run_id = retrain(stack, LONG_TRAINING + 1)
    ti = wait_running(stack, RETRAIN, run_id, "train_policy")
    time.sleep(5)
    workers, tasks = task_processes(ti)
    kill(workers + tasks)
    run_succeeds_after(stack, run_id, 30_001)


def test_sigkill_of_the_scheduler_mid_training_then_the_next_run_succeeds(with_champion: RunningStack) -> None:
    stack = with_champion
    run_id = retrain(stack, LONG_TRAINING + 2)
    wait_running(stack, RETRAIN, run_id, "train_policy")
    time.sleep(5)
    state = json.loads((stack.stack_home / "state.json").read_text())
    kill(processes.session_members([int(state["parts"]["airflow-scheduler"]["pid"])]))
    time.sleep(3)
    assert "airflow-scheduler" in restart_parts(stack)["started"]
    run_succeeds_after(stack, run_id, 30_002)


def test_sigkill_of_a_promotion_then_the_next_run_succeeds(with_champion: RunningStack) -> None:
    stack = with_champion
    run_id = retrain(stack, 30_003)
    ti = wait_running(stack, RETRAIN, run_id, "evaluate_and_promote")
    time.sleep(2)
    kill(task_processes(ti)[1])
    run_succeeds_after(stack, run_id, 30_004)


def test_sigkill_of_a_capture_loses_no_landed_row(with_champion: RunningStack) -> None:
    stack = with_champion
    if datetime.now(UTC).minute >= 55:  # landing files are filed by the hour they are written in
        time.sleep((60 - datetime.now(UTC).minute) * 60 + 5)
    before = json.loads(in_stack_env(stack, _COUNT, PACK))
    landed = int(in_stack_env(stack, _LAND, PACK, "600", f"fault-capture-{time.time_ns()}"))
    # the interval being written now: a run of its own key, triggered without a logical date (a
    # logical date at the interval's end would wait for that time)
    run_key = datetime.now(UTC).strftime("%Y%m%dT%H00")
    run_id = stack.trigger(CAPTURE, {"simulate": False, "run_key": run_key})
    ti = wait_running(stack, CAPTURE, run_id, "capture")
    kill(task_processes(ti)[1])
    state = stack.wait(CAPTURE, run_id, 900)
    if state != "success":  # the kill took its last try: the next run of the interval captures
        run_id = stack.trigger(CAPTURE, {"simulate": False, "run_key": run_key})
        assert stack.wait(CAPTURE, run_id, 900) == "success", stack.tasks(CAPTURE, run_id)
    from urllib.parse import quote

    xcom = stack.api.request(
        "GET",
        f"/api/v2/dags/{CAPTURE}/dagRuns/{quote(run_id, safe='')}/taskInstances/capture/xcomEntries/return_value",
    )
    result = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    assert result["rows_in"] == landed, result
    assert result["rows_accepted"] + result["rows_quarantined"] == landed, result
    after = json.loads(in_stack_env(stack, _COUNT, PACK))
    assert after["duplicates"] == 0, after
    assert after["rows"] - before["rows"] == result["rows_accepted"], (before, after, result)


def test_the_tracking_server_down_for_a_minute_then_the_next_run_succeeds(with_champion: RunningStack) -> None:
    stack = with_champion
    state = json.loads((stack.stack_home / "state.json").read_text())
    mlflow_part = processes.Started(int(state["parts"]["mlflow"]["pid"]), int(state["parts"]["mlflow"]["start_ticks"]))
    processes.stop(mlflow_part)
    down_at = time.monotonic()
    run_id = retrain(stack, 30_005)
    time.sleep(max(0.0, 60 - (time.monotonic() - down_at)))
    assert "mlflow" in restart_parts(stack)["started"]
    run_succeeds_after(stack, run_id, 30_006)


@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="needs the machine's PostgreSQL (pg_ctlcluster)")
def test_postgresql_restarted_then_the_next_run_succeeds(with_champion: RunningStack) -> None:
    stack = with_champion
    if not str(json.loads((stack.stack_home / "state.json").read_text())["database"]).startswith("postgresql"):
        pytest.skip("this stack's Airflow runs on SQLite")
    version = sorted(os.listdir("/etc/postgresql"))[-1]
    run_id = retrain(stack, 30_007)
    wait_running(stack, RETRAIN, run_id, "train_policy")
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True, timeout=120)
    time.sleep(20)
    restart_parts(stack)  # whatever part the restart took down comes back; the rest is reused
    run_succeeds_after(stack, run_id, 30_008)
