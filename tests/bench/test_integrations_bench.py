"""The integrations bench on a tiny budget: the OpenInference instrumentors export spans while the LangGraph
and OpenAI Agents SDK examples run, and the last line holds the decisions, timeouts and a bar judged on them
(the figures themselves are measured by running the bench, never asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from rlops.common.config import REPO_ROOT

BENCH = str(REPO_ROOT / "bench" / "integrations.py")


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    # A subprocess: the bench points RLOPS_* and MLflow at its own temporary registry.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLOPS_", "MLFLOW_", "AIRFLOW"))}
    return subprocess.run(
        [sys.executable, BENCH, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO_ROOT
    )


def test_a_tiny_traced_run_counts_spans_decisions_and_timeouts_in_one_json_line() -> None:
    out = _run("--decisions", "12", "--timesteps", "256", "--tracing", "openinference")
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert any(line.startswith("load average at start:") for line in lines)
    assert any(line.startswith("load average at end:") for line in lines)
    result = json.loads(lines[-1])
    assert result["tracing"] == "openinference" and result["decisions_target"] == 12
    assert result["timeout_ms"] > 0 and len(result["loadavg_start"]) == len(result["loadavg_end"]) == 3
    frameworks = result["frameworks"]
    assert set(frameworks) == {"langgraph", "openai_agents", "autogen"}
    for name, f in frameworks.items():
        assert f["decisions"] >= 12, name
        assert f["timeouts"] == f["fallbacks_by_cause"].get("timeout", 0)
        assert f["decision_p50_ms"] <= f["decision_p99_ms"] <= f["decision_max_ms"]
        assert f["bar_met"] == (f["decision_p99_ms"] < result["timeout_ms"] and f["timeouts"] == 0)
    assert result["bar_met"] == all(f["bar_met"] for f in frameworks.values())
    # tracing was on: the instrumentors' spans reached the exporter, the router's decision spans among them
    assert frameworks["langgraph"]["spans"] > frameworks["langgraph"]["decisions"]
    assert frameworks["langgraph"]["decision_spans"] == frameworks["langgraph"]["decisions"]
    assert frameworks["openai_agents"]["spans"] > 0
    assert frameworks["autogen"]["spans"] is None and "rlops tracer only" in frameworks["autogen"]["tracing"]


@pytest.mark.parametrize(
    "args",
    [["--decisions", "0"], ["--applications", "0"], ["--decisions", "5", "--applications", "5"], ["--tracing", "x"]],
)
def test_a_bad_size_or_tracing_is_a_usage_error(args: list[str]) -> None:
    out = _run(*args, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith("integrations.py: error:")
