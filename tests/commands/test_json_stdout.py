"""``--json`` means stdout is one JSON document: MLflow prints "View run … at: http://…" links to
stdout when a run ends on a tracking server over HTTP, and a script reading the result with a
JSON parser must not see them (they go to stderr, or are not printed at all)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT


def test_what_a_command_prints_besides_its_json_goes_to_stderr(
    tmp_storage_root: str, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import rlops.pipeline_steps.capture.step as step
    from rlops.cli import main
    from rlops.pipeline_steps.capture.summary import CaptureSummary

    def chatty_capture(*args: Any, **kwargs: Any) -> CaptureSummary:
        sys.stdout.write("🏃 View run capture at: http://127.0.0.1:5000/#/experiments/1/runs/x\n")
        print("a library's progress line")
        interval = {"scenario": "credit_approval", "run_key": "20261130T0500", "interval": ["a", "b"]}
        counts = {"rows_in": 0, "rows_accepted": 0, "rows_quarantined": 0}
        return CaptureSummary(**interval, dry_run=False, source="landing_zone", **counts, partitions=[])

    monkeypatch.setattr(step, "capture_step", chatty_capture)
    assert main(["capture", "--scenario", "credit_approval", "--run-key", "20261130T0500", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["source"] == "landing_zone"
    assert "View run" in err and "a library's progress line" in err
    # Without --json the human-readable lines are on stdout, as before.
    assert main(["capture", "--scenario", "credit_approval", "--run-key", "20261130T0500"]) == 0
    out, _ = capsys.readouterr()
    assert "a library's progress line" in out and "landing_zone: 0 rows in" in out


def test_commands_print_their_json_through_print_json() -> None:
    """Inside a ``--json`` command plain ``print`` goes to stderr: a result printed with
    ``print(json.dumps(...))`` would leave stdout empty."""

    def is_dumps(node: ast.AST) -> bool:  # json.dumps(...), or one branch of `a if c else b` is
        if isinstance(node, ast.IfExp):
            return is_dumps(node.body) or is_dumps(node.orelse)
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dumps"

    found = [
        f"{path.name}:{node.lineno}"
        for path in sorted((REPO_ROOT / "rlops" / "commands").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print"
        if any(is_dumps(arg) for arg in node.args)
    ]
    assert not found, f"print the JSON result with common_args.print_json, not print(json.dumps(...)): {found}"


@pytest.mark.slow
def test_capture_json_against_an_mlflow_server_is_json(mlflow_server: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": mlflow_server,
        "RLOPS_STORAGE_ROOT": f"file://{tmp_path / 'storage'}",
        "RLOPS_ARTIFACT_ROOT": str(tmp_path / "artifacts"),
        "RLOPS_HOME": str(tmp_path),
    }
    env.pop("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", None)
    cmd = [sys.executable, "-m", "rlops.cli", "capture", "--scenario", "credit_approval", "--simulate"]
    cmd += ["--episodes", "50", "--run-key", "20261130T0500", "--json"]
    done = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)  # the whole of stdout, nothing before or after the document
    assert result["source"] == "simulation:live" and result["rows_accepted"] > 0
    assert "View run" not in done.stdout
