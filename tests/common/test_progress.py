"""One decision for progress bars: only for a person at a terminal. Outside one (an Airflow task),
MLflow's lines go through logging at their level, never raw to stderr, which the task runner logs
as ERROR."""

from __future__ import annotations

import io
import logging
import os
from collections.abc import Iterator

import pytest

from rlops.common.progress import AIRFLOW_ENV, progress_bar, show_progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AIRFLOW_ENV, raising=False)
    assert show_progress(stream=_Tty())


def test_no_bar_under_json_in_a_pipe_or_in_airflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(AIRFLOW_ENV, raising=False)
    assert not show_progress(as_json=True, stream=_Tty())
    assert not show_progress(stream=io.StringIO())
    monkeypatch.setenv(AIRFLOW_ENV, "retrain_full")
    assert not show_progress(stream=_Tty())


def test_a_bar_asked_for_outside_a_terminal_writes_nothing(
    tmp_storage_root: str, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext

    monkeypatch.delenv(AIRFLOW_ENV, raising=False)
    ctx = StepContext.create("credit_approval", "20261130T0500", overrides={"capture": {"track": False}})
    out = capture_step(
        ctx, CaptureRequest(simulate=False), progress=True
    ).as_dict()  # stderr is pytest's capture: no terminal
    assert out["rows_in"] == 0
    assert "capture" not in capsys.readouterr().err

    tty = _Tty()
    with progress_bar(True, total=3, desc="on a terminal", file=tty) as bar:
        bar.update(3)
    assert "on a terminal" in tty.getvalue()


@pytest.fixture
def mlflow_loggers() -> Iterator[None]:
    """MLflow's logger configuration as it was, after the test, and the root logger's handlers:
    the task function imports Airflow, whose first import configures logging with a handler on the
    stderr of the moment, this test's captured one, closed once the test ends (a later MLflow
    record reaching it would print a logging error)."""
    import mlflow  # noqa: F401 - configures its loggers on import

    names = ("mlflow", "alembic", "huey", "sqlalchemy.engine")
    saved = {n: (list(logging.getLogger(n).handlers), logging.getLogger(n).propagate) for n in names}
    root = list(logging.getLogger().handlers)
    yield
    for n, (handlers, propagate) in saved.items():
        logging.getLogger(n).handlers, logging.getLogger(n).propagate = handlers, propagate
    logging.getLogger().handlers = root


def test_in_a_task_mlflow_logs_through_logging_at_its_level(
    mlflow_loggers: None,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    monkeypatch.setenv(AIRFLOW_ENV, "trace_capture__credit_approval")
    monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", raising=False)
    with pytest.raises(ConfError):  # any task function: each one routes the output first
        validate_conf({"scenario": "credit_approval", "reward_fn": "x", "timesteps": 1, "mode": "full"})
    caplog.set_level(logging.INFO)
    logging.getLogger("mlflow.tracking.fluent").info("a line of MLflow's")
    record = next(r for r in caplog.records if r.getMessage() == "a line of MLflow's")
    assert record.levelname == "INFO"
    assert "a line of MLflow's" not in capsys.readouterr().err  # not raw stderr, which the runner calls ERROR
    assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"


def test_a_task_log_carries_no_library_bookkeeping(tmp_path: object) -> None:
    """A task's first import of Great Expectations (capture, drift, recalibration) logged over 200
    "Skipping registering function …" lines; MLflow printed a "View run … at" line after each run."""
    import subprocess
    import sys

    code = (
        "import logging, os, sys\n"
        "logging.basicConfig(level=logging.INFO, stream=sys.stdout, format='%(name)s %(message)s')\n"
        "from rlops.common.progress import route_library_output\n"
        "route_library_output()\n"
        "import great_expectations\n"
        "from rlops.data_contracts import validation\n"
        "print('suppress', os.environ.get('MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT'))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env[AIRFLOW_ENV] = "trace_capture__credit_approval"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = (out.stdout + out.stderr).splitlines()
    assert not [x for x in lines if "Skipping registering function" in x], len(lines)
    assert "suppress true" in lines


def test_a_library_stream_registered_after_the_routing_is_routed_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The base layer names no library: the registry registers MLflow's stream when it is first
    imported, which may come after a task routed its output."""
    from rlops.common import progress

    stream = io.StringIO()
    own, logger = logging.StreamHandler(stream), logging.getLogger("rlops.tests.a_library")
    logger.addHandler(own)
    monkeypatch.setattr(logger, "propagate", False)
    monkeypatch.setattr(progress, "_library_streams", [])
    monkeypatch.setattr(progress, "_routed", False)
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])  # logging is configured
    monkeypatch.setenv(AIRFLOW_ENV, "trace_capture__credit_approval")
    for name in ("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"):
        monkeypatch.setenv(name, os.environ.get(name, "true"))
    try:
        progress.route_library_output()
        assert own in logger.handlers  # no one named its stream yet
        progress.register_library_stream(lambda: stream)
        assert own not in logger.handlers and logger.propagate
    finally:
        logger.removeHandler(own)
