"""
### retrain_incremental — every 15 minutes

Warm-starts a candidate from the current `champion` on the freshest sandbox calibration,
stress-tests it, compares it with the champion on the same seeded episodes and promotes it only
if every gate passes (the old champion becomes `previous`).

`train_policy` runs on the **gpu** Celery queue (pool `gpu`); the rest on the default queue.
Conf: `scenario`, `reward_fn`, `timesteps`, `mode`, `dry_run` (validated before any work).
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import GPU_POOL, GPU_QUEUE, dag_settings


@dag(
    dag_id="retrain_incremental",
    schedule="*/15 * * * *",
    tags=["rlops", "training", "incremental"],
    doc_md=__doc__,
    **dag_settings(timesteps=100_000, mode="incremental"),
)
def retrain_incremental():
    @task
    def validate_conf(**context) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.validate_conf(context["params"], context, interval_minutes=15)

    @task(queue=GPU_QUEUE, pool=GPU_POOL, retries=1)
    def train_policy(conf: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.train_policy(conf, mode="incremental")

    @task
    def stress_test(conf: dict, trained: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.stress_test(conf, trained)

    @task
    def evaluate_and_promote(conf: dict, trained: dict, stressed: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.evaluate_and_promote(conf, trained, stressed)

    conf = validate_conf()
    trained = train_policy(conf)
    evaluate_and_promote(conf, trained, stress_test(conf, trained))


retrain_incremental()
