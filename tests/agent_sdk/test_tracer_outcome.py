"""Tracer.outcome: late outcomes of traced episodes written beside the trace files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlops.agent_sdk.tracer import Tracer


def test_outcome_lines_land_beside_the_traces(tmp_path: Path) -> None:
    """Tracer.outcome: one JSON line per outcome under <landing>/_outcomes/scenario=<s>/date=/hour=/,
    never mixed into a trace file; a value that is no finite number is refused at once."""
    tracer = Tracer(tmp_path, flush_interval_s=None)
    tracer.record({"scenario": "s", "episode_id": "e1", "step": 0})
    tracer.outcome("e1", scenario="s", at=datetime(2026, 4, 5, tzinfo=UTC), default=1, components={"fees": -0.5})
    with pytest.raises(ValueError, match="not a finite number"):
        tracer.outcome("e1", scenario="s", default=float("nan"))
    with pytest.raises(ValueError, match="at least one value"):
        tracer.outcome("e1", scenario="s")
    tracer.close()
    outcome_files = sorted((tmp_path / "_outcomes" / "scenario=s").rglob("*.jsonl"))
    trace_files = sorted((tmp_path / "scenario=s").rglob("*.jsonl"))
    assert len(outcome_files) == 1 and len(trace_files) == 1
    line = json.loads(outcome_files[0].read_text())
    assert line == {
        "episode_id": "e1",
        "ts": "2026-04-05T00:00:00+00:00",
        "scenario": "s",
        "values": {"default": 1},
        "components": {"fees": -0.5},
    }
    assert "values" not in trace_files[0].read_text()
