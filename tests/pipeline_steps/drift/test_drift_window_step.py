"""The drift check over a ``drift.window_hours`` window: the report the streamed summary writes is
the one detect_drift gives on the window's rows."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.drift.request import DriftCheckRequest


def _clean(fields: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    def num(v: Any) -> Any:
        return None if v is None or (isinstance(v, float) and math.isnan(v)) else v

    return [(f["field"], f["test"], num(f["statistic"]), num(f["p_value"]), f["drifted"]) for f in fields]


def test_a_day_window_check_reports_what_its_rows_give(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.drift.check import comparable_rows, drift_check, window_uri
    from rlops.pipeline_steps.drift.stats import detect_drift
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    overrides = {"drift": {"window_hours": 2, "outcome_max_rows": 400}}
    for key, seed in (("20261130T0500", 1), ("20261130T0600", 2)):
        ctx = StepContext.create("credit_approval", key, overrides=overrides)
        t = ctx.key.start
        live = rollout_traces(pack, random_policy(seed), 150, seed=seed, episode_prefix=f"live-{seed}")
        live["ts"] = datetime(t.year, t.month, t.day, t.hour, 5, tzinfo=UTC).isoformat()
        ctx.storage.write_parquet(f"{window_uri(ctx)}/part-0.parquet", comparable_rows(pack, live))
    out = drift_check(ctx, DriftCheckRequest(episodes=200)).as_dict()
    report = json.loads(ctx.storage.read_text(out["report_uri"]))
    rows = ctx.traces.reader.read(ctx.traces.scenario_uri(ctx.scenario), ctx.key.lookback(2.0))
    base = ctx.storage.read_parquet(out["baseline_uri"])
    cfg = ctx.config.drift
    ref = detect_drift(
        base,
        rows,
        threshold=cfg.threshold,
        min_effect=cfg.min_effect,
        bh=cfg.bh,
        clusters=(base["episode_id"], rows["episode_id"]),
        workers=1,
    )
    assert report["n_target_rows"] == len(rows) > 400
    assert _clean(report["fields"]) == _clean(ref.to_dict()["fields"])
    assert out["drifted_fields"] == ref.drifted_fields
    live_returns = rows.groupby("episode_id")["reward_total"].sum()
    assert out["live_mean_return"] == round(float(live_returns.mean()), 4)
    assert "outcome drift not tested" not in out["outcome_summary"]
