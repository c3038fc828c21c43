"""
### retrain_incremental — every 15 minutes by default; one DAG per pack (`retrain_incremental__<pack>`)

Warm-starts a candidate from the current `champion` on the sandbox calibration of the run's
interval, stress-tests it, compares it with the champion on the same seeded episodes and, when
every gate passes, stages it as challenger (`rollout.staged`; `rollout__<pack>` moves it on). A
run whose inputs (trace partitions, calibration, champion, reward function, budget) equal the last
one's is skipped (`dags.skip_unchanged`): most quarter hours change nothing a retrain would see.

`train_policy` runs on the **gpu** Celery queue (pool `gpu`); the rest on the default queue.
Conf (all optional; defaults from the pack's params): `reward_fn`, `timesteps`, `dry_run`, `staged`.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import (
    GPU_POOL,
    GPU_QUEUE,
    PackDagConfig,
    dag_id,
    dag_settings,
    pack_dag_configs,
    pack_doc,
)

KIND = "retrain_incremental"


def build(pack: PackDagConfig):
    @dag(
        tags=pack.tags("training", "incremental"),
        doc_md=pack_doc(__doc__, KIND, pack),
        **dag_settings(pack, KIND, mode="incremental"),
    )
    def retrain_incremental():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(
                context["params"], context, interval_minutes=pack.interval_minutes(KIND), pools=(GPU_POOL,)
            )

        @task.short_circuit
        def inputs_changed(conf: dict) -> bool:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.inputs_changed(conf, "incremental")

        @task(queue=GPU_QUEUE, pool=GPU_POOL)
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
        inputs_changed(conf) >> trained
        evaluate_and_promote(conf, trained, stress_test(conf, trained))

    return retrain_incremental()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
