"""A killed command leaves no MLflow run RUNNING: SIGTERM and SIGINT end the CLI's open runs as
KILLED on the way out; the runs of a process killed outright (SIGKILL) are ended by the next run
of the same step of the pack on that host."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.registry import tags as T

SCENARIO = "credit_approval"

# A CLI with one more command, ``hold``: a step run opened and held until the process is stopped.
HOLDING_CLI = textwrap.dedent(
    """
    import sys, time
    import rlops.cli as cli

    def register(sub):
        def hold(args):
            from rlops.pipeline_steps.infra.context import StepContext
            from rlops.pipeline_steps.infra.pass_run import step_run

            with step_run(StepContext.create("credit_approval", "20261130T0900"), "promote", label="v1") as run:
                print(run.run_id, flush=True)
                time.sleep(120)

        sub.add_parser("hold").set_defaults(func=hold)

    real = cli._registrars
    cli._registrars = lambda: [*real(), register]
    sys.exit(cli.main(["hold"]))
    """
)

KILLED_OUTRIGHT = textwrap.dedent(
    """
    import os, signal
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.pass_run import step_run

    with step_run(StepContext.create("credit_approval", "20261130T0900"), "promote", label="v1") as run:
        print(run.run_id, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _start(script: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert run_id, proc.stderr.read() if proc.stderr else ""
    return proc, run_id


def _run(run_id: str) -> Any:
    return StepContext.create(SCENARIO, "20261130T0900").tracker.client.get_run(run_id)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stopped_cli_ends_its_runs_as_killed(
    sig: signal.Signals, code: int, tmp_tracking: str, tmp_storage_root: str
) -> None:
    proc, run_id = _start(HOLDING_CLI)
    assert _run(run_id).info.status == "RUNNING"
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == code
    run = _run(run_id)
    assert run.info.status == "KILLED"
    assert _run(run.data.tags["mlflow.parentRunId"]).info.status == "KILLED"


def test_the_next_run_of_the_step_ends_the_runs_of_a_killed_process(tmp_tracking: str, tmp_storage_root: str) -> None:
    proc, dead = _start(KILLED_OUTRIGHT)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    ctx = StepContext.create(SCENARIO, "20261130T1000")
    left = _run(dead)
    assert left.info.status == "RUNNING" and left.data.tags[T.PID] == str(proc.pid)
    assert left.data.tags[T.HOST] == socket.gethostname()
    # runs that are not this step's stale ones: another host's, a live process's, another step's
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        others = {
            "other host": {T.STEP: "promote", T.SCENARIO: SCENARIO, T.PID: str(proc.pid), T.HOST: "elsewhere"},
            "live": {T.STEP: "promote", T.SCENARIO: SCENARIO, T.PID: str(sleeper.pid), T.HOST: socket.gethostname()},
            "other step": {
                T.STEP: "evaluate",
                T.SCENARIO: SCENARIO,
                T.PID: str(proc.pid),
                T.HOST: socket.gethostname(),
            },
        }
        exp = ctx.tracker.experiment_id
        ids = {k: ctx.tracker.client.create_run(exp, tags=t).info.run_id for k, t in others.items()}
        with step_run(ctx, "promote", label="v2") as run:
            pass
        assert _run(run.run_id).info.status == "FINISHED"
        closed = _run(dead)
        assert closed.info.status == "KILLED" and f"process {proc.pid} ended" in closed.data.tags[T.CLOSED_BY]
        assert _run(closed.data.tags["mlflow.parentRunId"]).info.status == "KILLED"
        assert {k: _run(i).info.status for k, i in ids.items()} == dict.fromkeys(others, "RUNNING")
    finally:
        sleeper.kill()
        sleeper.wait()
