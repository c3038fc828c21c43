"""What an operator sees in Airflow: a rejected candidate and an interval without traffic end their
task as *skipped* with the reason (never a plain success), a promotion that MLflow broke fails and
is retried, every task rides out a tracking-server outage of two minutes, a free-text reason is kept
and ``force`` retrains unchanged inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus

WHEN = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


PROMOTION_DAG = """
from airflow.sdk import dag, task


@dag(dag_id="promotion_outcome", schedule=None, catchup=False, params={"status": "refused"})
def promotion_outcome():
    @task
    def step(**context) -> dict:
        from rlops.pipeline_steps.orchestration.tasks import promotion_result
        from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus

        out = PromotionOutcome(status=PromotionStatus(context["params"]["status"]), scenario="credit_approval",
                               reason="gate mean_return failed", dry_run=False, candidate="4")
        return promotion_result(out)

    step()


promotion_outcome()
"""


@pytest.mark.parametrize(
    ("status", "state"),
    [
        (PromotionStatus.REFUSED, "skipped"),
        (PromotionStatus.NOT_PROMOTABLE, "skipped"),
        (PromotionStatus.CHAMPION_MOVED, "skipped"),
        (PromotionStatus.CHAMPION, "success"),
        (PromotionStatus.STAGED, "success"),
    ],
)
def test_a_rejected_candidate_is_a_skipped_task_with_its_reason(
    airflow_db: str, tmp_path: Path, status: PromotionStatus, state: str
) -> None:
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    (tmp_path / "promotion_outcome.py").write_text(PROMOTION_DAG)
    # dag.test() runs DAGs serialized to the metadata database, as the DAG processor would have
    bag = BundleDagBag(dag_folder=str(tmp_path), bundle_path=str(tmp_path), bundle_name="dags-folder")
    assert bag.import_errors == {}
    DagBundlesManager().sync_bundles_to_db()
    sync_bag_to_db(bag, "dags-folder", None)
    dag = bag.dags["promotion_outcome"]
    run = dag.test(logical_date=WHEN + timedelta(minutes=list(PromotionStatus).index(status)),
                   run_conf={"status": status.value})  # fmt: skip
    ti = next(t for t in run.get_task_instances() if t.task_id == "step")
    assert str(ti.state) == state
    xcom = ti.xcom_pull(task_ids="step")
    assert xcom["candidate"] == "4" and (xcom["action"] != "none") is (state == "success")  # the result stays readable


def test_a_promotion_that_mlflow_broke_fails(airflow_db: str) -> None:
    from rlops.pipeline_steps.orchestration.task_runtime import PromotionFailed
    from rlops.pipeline_steps.orchestration.tasks import promotion_result

    out = PromotionOutcome(status=PromotionStatus.FAILED, scenario="credit_approval", reason="MLflow down",
                           dry_run=False, candidate="4")  # fmt: skip
    with pytest.raises(PromotionFailed, match="MLflow down"):
        promotion_result(out)


def test_a_capture_without_traffic_is_a_skipped_task(airflow_db: str, rlops_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "trace_capture.py")).dags["trace_capture__credit_approval"]
    run = dag.test(logical_date=WHEN, run_conf={"simulate": False})
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["capture"] == "skipped", states
    out = next(ti for ti in run.get_task_instances() if ti.task_id == "capture").xcom_pull(task_ids="capture")
    assert out["rows_in"] == 0 and out["source"] == "landing_zone"


def _min_wait_s(task: Any) -> float:
    """The shortest time Airflow's retries of ``task`` span (its backoff adds a jitter on top)."""
    delay = task.retry_delay.total_seconds()
    cap = task.max_retry_delay.total_seconds() if task.max_retry_delay else float("inf")
    waits = [min(cap, delay * (2**i if task.retry_exponential_backoff else 1)) for i in range(task.retries)]
    return sum(waits)


def test_every_task_rides_out_a_two_minute_tracking_outage() -> None:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
    assert bag.import_errors == {}
    short = {
        f"{d.dag_id}.{t.task_id}": _min_wait_s(t)
        for d in bag.dags.values()
        for t in d.tasks
        if _min_wait_s(t) < timedelta(minutes=3).total_seconds()
    }
    assert not short, f"tasks whose retries give up before a 3-minute outage ends: {short}"


def test_a_free_text_reason_is_kept_and_an_endless_one_refused(rlops_home: Path) -> None:
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    base = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": False}
    assert validate_conf({**base, "reason": "after the pricing change"})["reason"] == "after the pricing change"
    with pytest.raises(ConfError, match="at most 200 characters"):
        validate_conf({**base, "reason": "x" * 500})
    with pytest.raises(ConfError, match="force 'yes': expected true or false"):
        validate_conf({**base, "force": "yes"})


def test_force_retrains_unchanged_inputs(rlops_home: Path, caplog: pytest.LogCaptureFixture) -> None:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.orchestration import tasks
    from rlops.pipeline_steps.orchestration.retrain_inputs import mark_done, record_if_changed

    conf = {"reward_fn": "v1", "timesteps": 10_000, "mode": "full", "reward_source": None,
            "scenario": "credit_approval", "run_key": "20261201T0100-15m", "dry_run": False}  # fmt: skip
    ctx = StepContext.create("credit_approval", "20261201T0100-15m")
    assert record_if_changed(ctx, "full", conf)
    mark_done(ctx, "full")
    with caplog.at_level("WARNING"):
        assert not tasks.inputs_changed(conf, "full")
    assert '{"force": true}' in caplog.text and "20261201T0100-15m" in caplog.text
    assert tasks.inputs_changed({**conf, "force": True}, "full")
