"""The shipped-path bench runs the DAG's training task and the bench's PPO on a tiny budget and
ends with one JSON line holding both figures and their ratio."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlops.common.config import REPO_ROOT


def test_a_tiny_budget_reports_both_paths_in_one_json_line() -> None:
    # A subprocess: the bench points RLOPS_* and MLflow at its own temporary project home.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLOPS_", "MLFLOW_", "AIRFLOW"))}
    out = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "train_shipped.py"),
            *("--timesteps", "1024", "--num-envs", "64", "--runs", "1", "--eval-episodes", "32", "--threads", "1"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
        cwd=REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["pack"] == "credit_approval" and result["threads"] == 1 and result["timesteps_budget"] == 1024
    assert result["shipped_env_steps_per_s"] > 0 and result["bench_env_steps_per_s"] > 0
    assert result["ratio"] == pytest.approx(result["shipped_env_steps_per_s"] / result["bench_env_steps_per_s"], 0.01)
    assert len(result["load_start"]) == len(result["load_end"]) == 3
    (shipped,) = result["shipped"]
    assert shipped["steps"] == 1024 and shipped["iterations"] == 2 and shipped["num_envs"] == 64
    assert result["bench"][0]["steps"] == 1024


def test_a_budget_the_dags_conf_check_refuses_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from bench.train_shipped import main

    for argv, message in (
        (["--timesteps", "500"], "--timesteps must be at least 1000"),
        (["--runs", "0"], "--runs must be at least 1"),
        (["--threads", "many"], "expected auto or an integer >= 1"),
        (["--pack", "no_such_pack"], "no pack under"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
