"""The stack's pieces that need no running Airflow: secrets created once, a stale pid never taken for
a part, ports already taken, the DAGs unpaused by default, the schedule's interval, bad input."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rlops.common.config import resolve_params
from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, PackDagConfig, schedule_minutes
from rlops.stack import airflow_setup, processes
from rlops.stack.home import StackHome
from tests.conftest import free_port
from tests.stack.conftest import stack_env, stack_params


def test_secrets_are_created_once_private_and_kept(tmp_path: Path) -> None:
    home = StackHome(tmp_path / "stack")
    home.create()
    first = home.secrets()
    assert home.secrets() == first
    for f in (home.secrets_file, home.credentials_file, home.passwords_file):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
    assert stat.S_IMODE(home.root.stat().st_mode) == 0o700
    assert json.loads(home.passwords_file.read_text()) == {"admin": first["airflow_password"]}
    assert len(first["jwt_secret"]) >= 64  # HS512
    doc = json.loads(home.secrets_file.read_text())
    del doc["webhook_secret"]
    home.secrets_file.write_text(json.dumps(doc))
    again = home.secrets()
    assert again["airflow_password"] == first["airflow_password"] and again["webhook_secret"]


def test_a_corrupt_state_file_is_one_clear_error(tmp_path: Path) -> None:
    from rlops.common.errors import UserError

    home = StackHome(tmp_path)
    home.state_file.write_text("{not json")
    with pytest.raises(UserError, match="state.json is not readable JSON"):
        home.state()
    home.state_file.write_text("[1, 2]")
    with pytest.raises(UserError, match="expected a JSON object"):
        home.state()


def test_a_recorded_pid_is_ours_only_with_its_start_time(tmp_path: Path) -> None:
    started = processes.start(["sleep", "30"], os.environ, tmp_path / "sleep.log", tmp_path)
    try:
        assert processes.is_ours(started)
        assert not processes.is_ours(processes.Started(started.pid, started.start_ticks + 1))  # a reused pid
        assert not processes.is_ours(processes.Started(0, 0))
        processes.stop(started, grace_s=5)
        assert not processes.is_ours(started)
    finally:
        subprocess.run(["kill", "-9", str(started.pid)], capture_output=True)


def test_stop_reaches_children_that_left_the_group(tmp_path: Path) -> None:
    script = "import os, subprocess, time; subprocess.Popen(['sleep', '60'], process_group=0); time.sleep(60)"
    started = processes.start([sys.executable, "-c", script], os.environ, tmp_path / "p.log", tmp_path)
    import time

    deadline = time.monotonic() + 10
    while len(processes.session_members([started.pid])) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    members = processes.session_members([started.pid])
    assert len(members) == 2
    processes.stop(started, grace_s=5)
    time.sleep(0.3)
    assert processes.session_members([started.pid]) == []


def test_port_free() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert not processes.port_free("127.0.0.1", s.getsockname()[1])
    assert processes.port_free("127.0.0.1", 0)


def test_default_unpaused_dags_are_the_scenario_pack_and_every_promote(tmp_path: Path) -> None:
    params = resolve_params().model
    packs = ["credit_approval", "loan_desk"]
    dag_ids = [f"{k}__{p}" for k in DAG_KINDS for p in packs]
    wanted = airflow_setup.wanted_unpaused(params, dag_ids, packs)
    assert wanted == sorted([f"{k}__credit_approval" for k in DAG_KINDS] + ["promote__loan_desk"])
    chosen = params.model_copy(update={"dags": params.dags.model_copy(update={"unpaused": ["rollout__*"]})})
    assert airflow_setup.wanted_unpaused(chosen, dag_ids, packs) == ["rollout__credit_approval", "rollout__loan_desk"]


def test_up_waits_only_for_the_dags_of_packs_that_get_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    from rlops.common.config import REPO_ROOT
    from rlops.stack import control

    root = tmp_path / "scenarios"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / "credit_approval")
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / "bad_params")
    (root / "bad_params" / "params.yaml").write_text("train:\n  no_such_key: 1\n")
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / "bad name")
    monkeypatch.setenv("RLOPS_SCENARIOS_DIR", str(root))
    assert control._packs(resolve_params().model) == ["credit_approval"]


@pytest.mark.parametrize(
    ("schedule", "minutes"),
    [("*/5 * * * *", 5), ("*/15 * * * *", 15), ("@hourly", 60), ("0 */2 * * *", 120), (None, 33), ("@once", 33)],
)
def test_schedule_minutes(schedule: str | None, minutes: int) -> None:
    assert schedule_minutes(schedule, 33) == minutes


def test_a_run_owns_its_designed_interval_or_a_faster_schedule_s_period() -> None:
    pack = PackDagConfig("p", "v1", 1000, 1000, {"retrain_full": "*/5 * * * *", "drift_monitor": "0 */2 * * *"})
    assert pack.interval_minutes("retrain_full") == 5  # compressed cadence: 5-minute intervals
    assert pack.interval_minutes("drift_monitor") == 60  # slower than designed: still the last hour
    assert pack.interval_minutes("trace_capture") == 15  # unscheduled: as designed


def _rlops(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = stack_env(home, stack_params(home))
    return subprocess.run(
        [sys.executable, "-m", "rlops.cli", "stack", *args], env=env, cwd=home, capture_output=True, text=True
    )


def test_status_and_down_with_nothing_up(tmp_path: Path) -> None:
    out = _rlops(tmp_path, "status")
    assert out.returncode == 2 and "no stack at" in out.stderr and "rlops stack up" in out.stderr
    out = _rlops(tmp_path, "down")
    assert out.returncode == 0 and "nothing of this stack was running" in out.stdout


def test_up_refuses_a_port_taken_by_another_program_and_starts_nothing(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        params = stack_params(tmp_path, stack={"airflow_port": port, "database": "sqlite"})
        env = stack_env(tmp_path, params)
        out = subprocess.run(
            [sys.executable, "-m", "rlops.cli", "stack", "up"], env=env, cwd=tmp_path, capture_output=True, text=True
        )
    assert out.returncode == 2, out.stderr
    assert f"127.0.0.1:{port} (airflow-api-server) already in use" in out.stderr
    assert "stack.airflow_port" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "stack").exists(), "a refused up leaves no folder or secrets behind"
    assert not list(tmp_path.rglob("registry.key")), "a refused up creates no registry key"


def test_up_from_another_folder_names_the_running_stack_that_holds_the_ports(tmp_path: Path) -> None:
    # A stack started from folder `first` holds the ports; `up` from folder `second` must say so, not
    # blame "another program", and create nothing in `second`.
    first = StackHome(tmp_path / "first" / "stack")
    first.airflow_home.mkdir(parents=True)
    first.save_state({"parts": {}})
    port = free_port()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1',{port})); s.listen(); "
         "print('up', flush=True); time.sleep(60)"],
        cwd=first.airflow_home, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "up"
        second = tmp_path / "second"
        second.mkdir()
        params = stack_params(second, stack={"console_port": port, "database": "sqlite"})
        out = subprocess.run(
            [sys.executable, "-m", "rlops.cli", "stack", "up"],
            env=stack_env(second, params), cwd=second, capture_output=True, text=True,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert out.returncode == 2, out.stderr
    assert f"held by the stack of {first.root}" in out.stderr and "--home" in out.stderr, out.stderr
    assert not (second / "stack").exists() and not list(second.rglob("registry.key"))


def test_the_airflow_cli_reads_the_stack_s_settings_from_airflow_home(tmp_path: Path) -> None:
    home = StackHome(tmp_path / "stack")
    home.airflow_home.mkdir(parents=True)
    db = f"sqlite:///{tmp_path / 'af.db'}"
    env = {
        "AIRFLOW_HOME": str(home.airflow_home),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db,
        "AIRFLOW__CORE__FERNET_KEY": "k%ey",  # '%' must survive configparser's interpolation
        "AIRFLOW__CORE__DAGS_FOLDER": str(tmp_path / "dags"),
        "RLOPS_HOME": str(tmp_path),
    }
    path = airflow_setup.write_cli_config(home, env)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # what an operator's shell has: AIRFLOW_HOME only
    shell = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLOPS_"))}
    code = (
        "from airflow.configuration import conf; "
        "print(conf.get('database', 'sql_alchemy_conn')); print(conf.get('core', 'fernet_key')); "
        "print(conf.get('core', 'dags_folder'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**shell, "AIRFLOW_HOME": str(home.airflow_home)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-3:] == [db, "k%ey", str(tmp_path / "dags")], out.stdout


def test_down_stops_what_runs_tasks_before_mlflow() -> None:
    from rlops.stack.control import _stop_rank

    names = ["mlflow", "webhook", "console", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor",
             "airflow-triggerer", "log-rotation", "old-part"]  # fmt: skip
    order = sorted(names, key=_stop_rank)
    assert order[0] == "old-part" and order[1] == "airflow-scheduler" and order[-2:] == ["mlflow", "log-rotation"]
    assert order.index("airflow-triggerer") < order.index("airflow-api-server")


def test_process_logs_rotate_without_the_writer_reopening(tmp_path: Path) -> None:
    from rlops.stack.log_rotation import rotate

    log = tmp_path / "mlflow.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)  # how a part's output is opened
    try:
        for round_ in range(5):
            os.write(fd, f"round {round_} ".encode() * 200)
            rotated = rotate(tmp_path, max_bytes=1000, keep=2)
            assert rotated == [log] and log.stat().st_size == 0
        os.write(fd, b"after")
        assert log.read_bytes() == b"after"  # the writer's next line starts the emptied file
    finally:
        os.close(fd)
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert kept == ["mlflow.log", "mlflow.log.1", "mlflow.log.2"]
    assert (tmp_path / "mlflow.log.1").read_bytes().startswith(b"round 4") and b"round 3" in (
        tmp_path / "mlflow.log.2"
    ).read_bytes()
    small = tmp_path / "console.log"
    small.write_text("short")
    assert rotate(tmp_path, max_bytes=1000, keep=2) == [] and small.read_text() == "short"
