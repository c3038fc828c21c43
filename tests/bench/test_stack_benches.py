"""The stack benches' usage errors and their parameters (the benches themselves run for an hour:
``bench/stack_soak.py``; minutes: ``bench/train_stack.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench.stack_soak import WORLD_CHANGES, soak_params
from rlops.common.config import REPO_ROOT
from rlops.common.params_model import Params
from rlops.timeline.events import parse_events


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench" / script), *args], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    ("script", "args"),
    [
        ("stack_soak.py", ["--minutes", "1"]),
        ("stack_soak.py", ["--packs", "no_such_pack"]),
        ("train_stack.py", ["--runs", "0"]),
        ("train_stack.py", ["--timesteps", "10"]),
        ("soak_changes.py", ["--packs", "no_such_pack"]),
        ("soak_changes.py", ["--episodes", "5"]),
    ],
)
def test_bad_arguments_are_one_usage_line_and_exit_2(script: str, args: list[str]) -> None:
    out = _run(script, *args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines()[-1].startswith(f"{script}: error:")


def test_soak_params_are_valid_params_at_a_compressed_cadence(tmp_path: Path) -> None:
    doc = soak_params(tmp_path, ["credit_approval", "complaint_handling"], cadence=5)
    params = Params.model_validate(doc)
    assert params.dags.trace_capture == "*/5 * * * *" and params.dags.retrain_full == "*/15 * * * *"
    assert params.ope.window_hours == 0.25  # the gate reads the last three captures, not a day
    assert params.dags.unpaused == ["*__credit_approval", "*__complaint_handling"]
    assert len({params.stack.airflow_port, params.stack.mlflow_port, params.stack.console_port}) == 3


def test_the_world_changes_are_valid_timeline_events() -> None:
    for pack, changes in WORLD_CHANGES.items():
        events = parse_events([{**{k: v for k, v in c.items() if k != "at"}, "at_hour": c["at"]} for c in changes])
        # an input drift, then a change of what follows a decision that recalibration learns: the hidden
        # outcome odds, an API's error rate or its latency
        assert events[0].kind == "population" and events[1].kind in ("outcome", "error_rate", "latency"), pack
