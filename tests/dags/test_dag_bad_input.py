"""Bad input fails a DAG run at once: Airflow's retries are for what may mend by itself (a storage
hiccup), not for a conf or a pack that is wrong."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def test_a_bad_conf_fails_the_first_task_without_a_retry(airflow_db: str, rlops_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "trace_capture.py"))
    dag = bag.dags["trace_capture__credit_approval"]
    assert dag.default_args["retries"] >= 1  # the DAG does retry other failures
    run = dag.test(logical_date=WHEN, run_conf={"scenario": "credit_approval", "reward_fn": "v9"})
    tis = {ti.task_id: ti for ti in run.get_task_instances()}
    assert str(run.state) == "failed"
    assert str(tis["validate_conf"].state) == "failed", tis["validate_conf"].state
    assert tis["validate_conf"].try_number == 1
    assert str(tis["capture"].state) == "upstream_failed"


def test_the_error_keeps_its_class_and_message_for_other_callers() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    with pytest.raises(ConfError, match="reward_fn 'x'") as info:
        validate_conf(
            {"scenario": "credit_approval", "reward_fn": "x", "timesteps": 5000, "mode": "full", "dry_run": False}
        )
    assert isinstance(info.value, UserError) and isinstance(info.value, AirflowFailException)
    assert isinstance(info.value.__cause__, ConfError)


def test_a_capture_that_quarantines_most_rows_fails_without_a_retry(airflow_db: str, rlops_home: Path) -> None:
    """The run fails, not green: every row of its interval broke the contract (and was kept, in
    quarantine)."""
    import json

    from airflow.dag_processing.dagbag import DagBag

    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    at = datetime(2026, 11, 30, 4, 50, tzinfo=UTC)  # in the 15 minutes the run at WHEN owns
    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    rows = rollout_traces(pack, rule_policy, 10, seed=2, profile="live", source="live", start_ts=at)
    rows = rows.assign(ts=at.isoformat(), action="launch_rockets")  # an action the scenario lacks
    folder = rlops_home / "data" / "landing" / "scenario=credit_approval" / "date=2026-11-30" / "hour=04"
    folder.mkdir(parents=True)
    (folder / "20261130T045000000000Z-agent-1-000000.jsonl").write_text(
        rows.to_json(orient="records", lines=True, date_format="iso")
    )

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "trace_capture.py"))
    run = bag.dags["trace_capture__credit_approval"].test(logical_date=WHEN)
    tis = {ti.task_id: ti for ti in run.get_task_instances()}
    assert str(run.state) == "failed"
    assert str(tis["capture"].state) == "failed" and tis["capture"].try_number == 1
    ctx = StepContext.create("credit_approval", "20261130T0445-15m")
    quarantined = ctx.storage.list(ctx.traces.quarantine_uri, suffix=".parquet")
    assert sum(len(ctx.storage.read_parquet(u)) for u in quarantined) == len(rows) > 0
    manifest = json.loads(ctx.storage.read_text(ctx.traces.manifest_uri("credit_approval", ctx.run_key)))
    assert manifest["rows_in"] == manifest["rows_quarantined"] == len(rows)
