"""
### drift_monitor — hourly by default, one DAG per pack (`drift_monitor__<pack>`)

Compares the last hour of live traces with the sandbox (two-sample KS per numeric field,
chi-square per categorical field, effect-size floor) and checks the champion's live metrics for
anomalies. When drift or an anomaly is found it recalibrates the sandbox to live traffic and
triggers the pack's `retrain_full__<pack>` as an emergency retrain (conf `reason: drift`). The
drift report (JSON + HTML with histograms) is logged to MLflow.

With `drift.window_hours` and `drift.slice_hours` the window's field counts are taken by one mapped
`summarise_slice` task per slice of hours (any Celery worker) and added up by `detect_drift`; without
them `plan_slices` hands one empty slice on and `detect_drift` reads the window itself.
"""

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_id, dag_settings, pack_dag_configs, pack_doc

KIND = "drift_monitor"


def build(pack: PackDagConfig):
    @dag(tags=pack.tags("monitoring"), doc_md=pack_doc(__doc__, KIND, pack), **dag_settings(pack, KIND))
    def drift_monitor():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(context["params"], context, interval_minutes=pack.interval_minutes(KIND))

        @task
        def plan_slices(conf: dict) -> list[dict]:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.plan_drift_slices(conf)

        @task
        def summarise_slice(conf: dict, drift_slice: dict) -> dict | None:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.summarise_drift_slice(conf, drift_slice)

        @task
        def detect_drift(conf: dict, slices: list) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.detect_drift(conf, slices)

        @task.short_circuit
        def needs_retrain(drift: dict) -> bool:
            return bool(drift.get("retrain"))

        @task
        def recalibrate(conf: dict, drift: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.recalibrate(conf, drift)

        conf = validate_conf()
        slices = summarise_slice.partial(conf=conf).expand(drift_slice=plan_slices(conf))
        drift = detect_drift(conf, slices)
        calibrated = recalibrate(conf, drift)
        emergency = TriggerDagRunOperator(
            task_id="trigger_emergency_retrain",
            trigger_dag_id=dag_id("retrain_full", pack.scenario),
            # A run id of its own and no logical date: the scheduled retrain of the same hour
            # already holds that date, and a second run for it would be refused (the trigger lost).
            # The interval it trains on is this run's, carried in the conf; a retry of this task
            # finds its run already there and skips.
            trigger_run_id="emergency__{{ run_id }}",
            logical_date=None,
            conf={
                "reward_fn": "{{ params.reward_fn }}",
                "reason": "drift",
                "run_key": "{{ ti.xcom_pull(task_ids='validate_conf')['run_key'] }}",
            },
            skip_when_already_exists=True,
            wait_for_completion=False,
        )
        needs_retrain(drift) >> calibrated >> emergency

    return drift_monitor()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
