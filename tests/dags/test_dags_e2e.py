"""Whole DAG runs through ``dag.test()`` on the embedded default (SQLite, local folders).

One scenario, in order, like an ML-ops week in fast-forward: live traffic is captured, its drift
against the sandbox triggers an emergency retrain, the retrain promotes a first champion, the
champion's own traffic fills the label queue, and an incremental retrain that cannot prove
itself better leaves the champion where it is.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlops.common.config import REPO_ROOT

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
CONF = {"reward_fn": "v1", "dry_run": False}


def _dag(kind: str):
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / f"{kind}.py"))
    assert bag.import_errors == {}
    return bag.dags[f"{kind}__credit_approval"]


def _run(dag_id: str, when: datetime, **conf):
    dag = _dag(dag_id)
    run = dag.test(logical_date=when, run_conf={**CONF, **conf})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    return run, states


def _xcom(run, task_id: str):
    ti = next(t for t in run.get_task_instances() if t.task_id == task_id)
    return ti.xcom_pull(task_ids=task_id)


def test_the_loop_through_the_dags(airflow_db: str, rlops_home: Path) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.registry.client import CHAMPION, PREVIOUS, policy_model_name

    # ---- trace_capture: simulated live traffic lands in the trace store, validated. The 05:00
    # tick owns the quarter hour that has just ended, [04:45, 05:00), never the one starting.
    run, states = _run("trace_capture", WHEN, simulate=True)
    assert str(run.state) == "success", states
    parts = sorted((rlops_home / "data" / "traces").rglob("*.parquet"))
    assert parts and all("hour=04" in str(p) and "part-20261130T0445-15m-" in p.name for p in parts)

    # ---- drift_monitor: live differs from the sandbox → report, recalibration, emergency retrain
    run, states = _run("drift_monitor", WHEN)
    assert str(run.state) == "success", states
    assert states["trigger_emergency_retrain"] == "success"
    assert list((rlops_home / "data" / "reports" / "drift").rglob("report.html"))
    assert list((rlops_home / "data" / "calibrations" / "credit_approval").glob("latest.json"))

    # ---- retrain_full: reward model, PPO from scratch, stress, gates → first champion (unstaged
    # here: the staged roll-out is the rollout DAG's, tested on its own)
    run, states = _run("retrain_full", WHEN, timesteps=200_000, staged=False)
    assert str(run.state) == "success", states
    ctx = StepContext.create("credit_approval")
    name = policy_model_name("credit_approval")
    champion = ctx.tracker.get_alias(name, CHAMPION)
    assert champion is not None, states
    tags = ctx.tracker.model_version_tags(name, champion)
    assert tags["stress_test"] == "pass" and tags.get("calibration_version")

    # ---- label_queue: the champion's traffic; uncertain clusters are queued
    later = WHEN.replace(hour=6)
    assert str(_run("trace_capture", later, simulate=True)[0].state) == "success"
    run, states = _run("label_queue", later)
    assert str(run.state) == "success", states
    from sqlalchemy import create_engine, text

    with create_engine(f"sqlite:///{rlops_home / 'queue.db'}").connect() as conn:
        assert conn.execute(text("select count(*) from label_items")).scalar() > 0

    # ---- retrain_incremental with a token budget: no proof of improvement → champion unchanged
    run, states = _run("retrain_incremental", later, timesteps=2_000)
    assert str(run.state) == "success", states
    assert ctx.tracker.get_alias(name, CHAMPION) == champion
    assert ctx.tracker.get_alias(name, PREVIOUS) is None
