"""A scheduled ``trace_capture`` run carries no conf: its ``simulate`` Param is null, and then the
pack's ``capture.simulate_when_empty`` decides what an interval with an empty landing zone stores
— simulated champion traffic when on, nothing when off — as ``rlops capture`` without a flag does."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def _set_simulate_when_empty(home: Path, on: bool) -> None:
    path = home / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["capture"].update(simulate_when_empty=on, episodes=200, track=False)
    path.write_text(yaml.safe_dump(params))


@pytest.mark.parametrize("simulate_when_empty", [True, False])
def test_a_run_without_conf_follows_simulate_when_empty(
    airflow_db: str, rlops_home: Path, simulate_when_empty: bool
) -> None:
    from airflow.dag_processing.dagbag import DagBag

    _set_simulate_when_empty(rlops_home, simulate_when_empty)
    dag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "trace_capture.py")).dags["trace_capture__credit_approval"]
    assert dag.params["simulate"] is None
    run = dag.test(logical_date=WHEN)  # what the scheduler starts: no conf at all
    assert str(run.state) == "success", [(ti.task_id, ti.state) for ti in run.get_task_instances()]
    out = next(ti for ti in run.get_task_instances() if ti.task_id == "capture").xcom_pull(task_ids="capture")
    if simulate_when_empty:
        assert out["source"] == "simulation:live" and out["rows_accepted"] > 0
    else:
        assert out["source"] == "landing_zone" and out["rows_in"] == 0


def test_simulate_stays_a_switch_or_null(rlops_home: Path) -> None:
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    base = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": False}
    assert validate_conf({**base, "simulate": None})["simulate"] is None
    assert validate_conf({**base, "simulate": True})["simulate"] is True
    with pytest.raises(ConfError, match=r"simulate 'yes': expected true or false \(or null: params\)"):
        validate_conf({**base, "simulate": "yes"})
