"""
### drift_monitor — hourly

Compares the last hour of live traces with the sandbox (two-sample KS per numeric field,
chi-square per categorical field, effect-size floor) and checks the champion's live metrics for
anomalies. When drift or an anomaly is found it recalibrates the sandbox to live traffic and
triggers `retrain_full` as an emergency retrain. The drift report (JSON + HTML with histograms)
is logged to MLflow.
"""

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import dag_settings


@dag(
    dag_id="drift_monitor",
    schedule="@hourly",
    tags=["rlops", "monitoring"],
    doc_md=__doc__,
    **dag_settings(),
)
def drift_monitor():
    @task
    def validate_conf(**context) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.validate_conf(context["params"], context, interval_minutes=60)

    @task
    def detect_drift(conf: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.detect_drift(conf)

    @task.short_circuit
    def needs_retrain(drift: dict) -> bool:
        return bool(drift.get("retrain"))

    @task
    def recalibrate(conf: dict, drift: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.recalibrate(conf, drift)

    conf = validate_conf()
    drift = detect_drift(conf)
    calibrated = recalibrate(conf, drift)
    emergency = TriggerDagRunOperator(
        task_id="trigger_emergency_retrain",
        trigger_dag_id="retrain_full",
        conf={"scenario": "{{ params.scenario }}", "reward_fn": "{{ params.reward_fn }}",
              "mode": "full", "dry_run": False},
        wait_for_completion=False,
    )
    needs_retrain(drift) >> calibrated >> emergency


drift_monitor()
