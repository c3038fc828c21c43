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

    from rlops.pipeline_steps.orchestration.tasks import ConfError, validate_conf

    with pytest.raises(ConfError, match="reward_fn 'x'") as info:
        validate_conf(
            {"scenario": "credit_approval", "reward_fn": "x", "timesteps": 5000, "mode": "full", "dry_run": False}
        )
    assert isinstance(info.value, UserError) and isinstance(info.value, AirflowFailException)
    assert isinstance(info.value.__cause__, ConfError)
