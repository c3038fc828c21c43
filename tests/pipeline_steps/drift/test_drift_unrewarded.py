"""Live traffic without rewards: an agent traced through an integration that reports none.

``test_live_rows_without_a_reward_measure_no_return`` caught: with ``reward_total`` null on every
live row the drift check reported a live mean return of 0.0 as if measured (the sum of no rewards),
next to the sandbox's — a fall the return-anomaly check would take for a collapse of the champion.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.drift.request import DriftCheckRequest

SCENARIO = "credit_approval"


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # the run key's hour partition, read whole
        {"drift": {"window_hours": 2}},  # a window counted by DuckDB
        {"drift": {"window_hours": 2}, "trace_store": {"engine": "pandas"}},  # counted from the frames
    ],
    ids=["hour", "window-duckdb", "window-pandas"],
)
def test_live_rows_without_a_reward_measure_no_return(
    pack: Any, overrides: dict[str, Any], tmp_tracking: str, tmp_storage_root: str
) -> None:
    from rlops.pipeline_steps.drift.check import comparable_rows, drift_check, window_uri
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    ctx = StepContext.create(SCENARIO, "20261130T0500", overrides=overrides)
    live = rollout_traces(pack, random_policy(1), 150, seed=1, episode_prefix="live")
    live["ts"] = datetime(2026, 11, 30, 5, 5, tzinfo=UTC).isoformat()
    live["reward_total"] = np.nan  # the integration reports no rewards
    live["reward_breakdown"] = None
    ctx.storage.write_parquet(f"{window_uri(ctx)}/part-0.parquet", comparable_rows(pack, live))

    out = drift_check(ctx, DriftCheckRequest(episodes=200))
    assert out.live_mean_return is None and out.sandbox_mean_return is not None
    assert out.live_return_note is not None and out.live_return_note.startswith("no live return measured")
    assert "no live return measured" in out.summary
    assert out.anomaly is False and out.anomaly_check is not None and out.anomaly_check.reference == "none"
    doc = json.loads(json.dumps(out.as_dict()))
    assert doc["live_mean_return"] is None and "reward_total" in doc["live_return_note"]
    assert doc["outcome_drift"] is False and "nan" not in (out.outcome_summary or "")
