"""A command's ``--dry-run`` computes what the real run would decide and skips only the writes:
its ``--json`` carries the same decision fields (drifted fields and retrain, a promotion's verdict,
counts) as the real run on the same inputs, in a temporary project home."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT

SCENARIO = "credit_approval"
RUN_KEY = "20261130T0500"


def run_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """``rlops <argv> --json`` in this process: its one JSON document (exit 0 or 3, the drift exit)."""
    from rlops.cli import main

    capsys.readouterr()
    rc = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert rc in (0, 3), f"rlops {' '.join(argv)} exited {rc}: {err[-2000:]}"
    doc: dict[str, Any] = json.loads(out)
    return doc


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


def test_drift_check_dry_run_reports_the_drift_the_real_run_finds(
    rlops_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Live traces of the run key's hour with a slowed service: the dry run names the drifted
    latency and calls for the retrain exactly as the real run does, and writes no report."""
    from rlops.pipeline_steps.drift.check import comparable_rows, window_uri
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    ctx = StepContext.create(SCENARIO, RUN_KEY)
    live = comparable_rows(pack, rollout_traces(pack, random_policy(3), 300, seed=3, episode_prefix="live"))
    live["latency_ms"] = live["latency_ms"] * 4 + 50  # a slower service: latency drifts
    ctx.storage.write_parquet(f"{window_uri(ctx)}/part-0.parquet", live)
    argv = ["drift", "check", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--episodes", "300"]
    before = files_under(rlops_home / "data")
    dry = run_json([*argv, "--dry-run"], capsys)
    assert files_under(rlops_home / "data") == before, "the dry run wrote to storage"
    real = run_json(argv, capsys)
    assert "latency_ms" in real["drifted_fields"] and real["retrain"] is True
    decision = ("drifted_fields", "anomaly", "outcome_drift", "outcome_onset", "outcome_drifted_cells", "retrain")
    assert {k: dry[k] for k in decision} == {k: real[k] for k in decision}
    assert dry["dry_run"] is True and dry["report_uri"] is None and real["report_uri"]
