"""A ``drift.window_hours`` window fanned out over ``drift.slice_hours`` slices (one mapped task
each) reports exactly what one task reading the window whole reports."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from rlops.common.config import REPO_ROOT

KEY = "20261130T0700"
HOURS = 3


def _write_live(ctx: Any, hours: int = HOURS, rules: bool = False) -> int:
    """Random-policy traffic (the rule engine's with ``rules``: what the baseline serves, so no
    drift) in each hour partition of the window ending with ``ctx``'s key, with a few missing values
    so that the units of a field with gaps are counted too."""
    from rlops.pipeline_steps.drift.check import comparable_rows
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy, rule_policy
    from rlops.sandbox.traces import rollout_traces
    from rlops.trace_store.store import join_uri, partition_path

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    total = 0
    for h in range(hours):
        t = ctx.key.end - timedelta(hours=hours - h)
        policy = rule_policy if rules else random_policy(h)
        live = comparable_rows(pack, rollout_traces(pack, policy, 120, seed=100 + h, episode_prefix=f"live-{h}"))
        live["ts"] = datetime(t.year, t.month, t.day, t.hour, 5, tzinfo=UTC).isoformat()
        numeric = [c for c in live.columns if c.startswith("state.") and live[c].dtype.kind == "f"]
        if not rules:
            live.loc[live.index[::7], numeric[0]] = np.nan
        part = partition_path(scenario=ctx.scenario, date=f"{t:%Y-%m-%d}", hour=t.hour)
        ctx.storage.write_parquet(join_uri(ctx.traces.trace_uri, part, "part-0.parquet"), live)
        total += len(live)
    return total


def _fields(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    def num(v: Any) -> Any:
        return None if v is None or (isinstance(v, float) and np.isnan(v)) else v

    return [(f["field"], f["test"], num(f["statistic"]), num(f["p_value"]), f["drifted"]) for f in report["fields"]]


def test_slices_add_up_to_the_summary_of_one_pass(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.drift.check import drift_check, drift_columns, long_window, summarised_target
    from rlops.pipeline_steps.drift.fan_out import plan_slices, summarise_slice
    from rlops.pipeline_steps.drift.slice_counts import SLICE_DIR, merge_slices
    from rlops.pipeline_steps.infra.context import StepContext

    overrides = {"drift": {"window_hours": HOURS, "slice_hours": 1, "outcome_max_rows": 400, "baseline_episodes": 200}}
    ctx = StepContext.create("credit_approval", KEY, overrides=overrides)
    total = _write_live(ctx)

    plan = plan_slices(ctx)
    assert [s["index"] for s in plan] == [0, 1, 2] and sum(s["rows"] for s in plan) == total
    assert [s["offset"] for s in plan] == [0, plan[0]["rows"], plan[0]["rows"] + plan[1]["rows"]]
    results = [summarise_slice(ctx, s) for s in reversed(plan)]  # mapped tasks finish in any order
    assert all(r is not None for r in results)

    cfg = ctx.config.drift
    long = long_window(ctx, cfg)
    assert long is not None
    baseline = ctx.storage.read_parquet(plan[0]["baseline_uri"])
    reader = ctx.traces.reader
    columns = drift_columns(reader.columns(long[1]), cfg)
    merged = merge_slices(ctx.storage, reader, [r for r in results if r], baseline, long[1:], cfg.cluster, columns)
    whole, _ = summarised_target(ctx, cfg, long[1], long[2], long[3], baseline)
    assert merged.rows == whole.rows == total
    assert merged.fields.keys() == whole.fields.keys()
    for name, a in whole.fields.items():
        b = merged.fields[name]
        assert (b.kind, b.n, b.units) == (a.kind, a.n, a.units), name
        if a.kind == "numeric":
            assert np.array_equal(b.cuts, a.cuts) and np.array_equal(b.below, a.below), name
            assert np.array_equal(b.equal, a.equal), name
        else:
            assert a.counts is not None and b.counts is not None
            assert b.counts.astype(int).to_dict() == a.counts.astype(int).to_dict(), name
    pd.testing.assert_frame_equal(merged.plot_rows, whole.plot_rows)
    assert np.array_equal(np.sort(merged.episode_returns), np.sort(whole.episode_returns))

    one = drift_check(ctx).as_dict()
    one_report = json.loads(ctx.storage.read_text(one["report_uri"]))
    slice_dir = ctx.uri(SLICE_DIR, ctx.scenario, KEY)
    assert len(ctx.storage.list(slice_dir)) == 2 * len(plan)  # counts and histogram rows a slice
    fanned = drift_check(ctx, slices=results).as_dict()
    fanned_report = json.loads(ctx.storage.read_text(fanned["report_uri"]))
    assert ctx.storage.list(slice_dir) == []  # merged into the report, then deleted
    assert _fields(fanned_report) == _fields(one_report)
    for key in ("drifted_fields", "live_mean_return", "sandbox_mean_return", "policy_version", "retrain", "summary"):
        assert fanned[key] == one[key], key


def test_without_slice_hours_the_plan_is_one_empty_slice(tmp_tracking: str, tmp_storage_root: str) -> None:
    from rlops.pipeline_steps.drift.fan_out import plan_slices, summarise_slice
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create("credit_approval", KEY, overrides={"drift": {"window_hours": HOURS}})
    assert plan_slices(ctx) == [{}]
    assert summarise_slice(ctx, {}) is None


def test_a_slice_whose_rows_changed_since_the_plan_fails_with_what_to_do(
    tmp_tracking: str, tmp_storage_root: str
) -> None:
    from rlops.pipeline_steps.drift.fan_out import SliceError, plan_slices, summarise_slice
    from rlops.pipeline_steps.infra.context import StepContext

    overrides = {"drift": {"window_hours": 2, "slice_hours": 1, "baseline_episodes": 100}}
    ctx = StepContext.create("credit_approval", KEY, overrides=overrides)
    _write_live(ctx, hours=2)
    plan = plan_slices(ctx)
    late = {**plan[1], "rows": plan[1]["rows"] + 5}
    with pytest.raises(SliceError, match="the plan counted .* run the drift check again"):
        summarise_slice(ctx, late)
    with pytest.raises(SliceError, match="expected a mapping with keys"):
        summarise_slice(ctx, {"index": 0})


def test_the_drift_monitor_dag_maps_one_task_per_slice(
    airflow_db: str, rlops_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from rlops.pipeline_steps.drift.check import drift_check
    from rlops.pipeline_steps.drift.slice_counts import SLICE_DIR
    from rlops.pipeline_steps.infra.context import StepContext

    params = yaml.safe_load((rlops_home / "params.yaml").read_text())
    params["drift"].update({"window_hours": HOURS, "slice_hours": 1, "baseline_episodes": 200})
    (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))
    ctx = StepContext.create("credit_approval", KEY)
    _write_live(ctx, rules=True)  # no drift: the run ends at needs_retrain, without a recalibration

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "drift_monitor.py"))
    assert bag.import_errors == {}
    dag = bag.dags["drift_monitor__credit_approval"]
    when = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)  # the hourly run at 08:00 owns [07:00, 08:00)
    run = dag.test(logical_date=when, run_conf={"reward_fn": "v1", "dry_run": False})
    tis = run.get_task_instances()
    mapped = sorted(ti.map_index for ti in tis if ti.task_id == "summarise_slice")
    assert mapped == [0, 1, 2], {ti.task_id: ti.state for ti in tis}
    detect = next(ti for ti in tis if ti.task_id == "detect_drift")
    assert str(detect.state) == "success"
    fanned = detect.xcom_pull(task_ids="detect_drift")

    one = drift_check(ctx).as_dict()  # the same window read whole by one task
    assert fanned["run_key"] == one["run_key"] == KEY
    for key in ("drifted_fields", "live_mean_return", "policy_version", "retrain", "summary"):
        assert fanned[key] == one[key], key
    assert fanned["retrain"] is False, fanned["summary"]
    assert ctx.storage.list(ctx.uri(SLICE_DIR, ctx.scenario, KEY)) == []  # the slice files are gone
