"""
### retrain_full — hourly by default, and on demand after drift; one DAG per pack (`retrain_full__<pack>`)

Retrains the reward model on the labelled traces, trains a PPO policy from scratch on the sandbox
calibration of the run's interval, stress-tests reward function and policy, then runs the gated
evaluation against the `champion`. A passing candidate becomes a staged challenger
(`rollout.staged`; `rollout__<pack>` moves it on) — or champion at once for an emergency retrain
triggered by `drift_monitor__<pack>` (`rollout.staged_emergency`). A run whose inputs (trace
partitions, calibration, champion, reward function, budget) equal the last one's is skipped
(`dags.skip_unchanged`).

`train_policy` runs on the **gpu** Celery queue (pool `gpu`).
The reward model relabels the window's captured traces before training; with `reward_source`
`model` or `blend` (conf, else params `train.reward_source`) the policy trains on the reward model
just trained, warm-started by behaviour cloning from the relabelled steps.
Conf (all optional; defaults from the pack's params): `reward_fn`, `timesteps`, `dry_run`, `staged`,
`reason`, `reward_source`, `reward_blend_lambda`.
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

KIND = "retrain_full"


def build(pack: PackDagConfig):
    @dag(
        tags=pack.tags("training", "full"),
        doc_md=pack_doc(__doc__, KIND, pack),
        **dag_settings(pack, KIND, mode="full"),
    )
    def retrain_full():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(
                context["params"], context, interval_minutes=pack.interval_minutes(KIND), pools=(GPU_POOL,)
            )

        @task.short_circuit
        def inputs_changed(conf: dict) -> bool:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.inputs_changed(conf, "full")

        @task
        def train_reward_model(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.train_reward_model(conf)

        @task
        def relabel(conf: dict, reward_model: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.relabel(conf, reward_model)

        @task(queue=GPU_QUEUE, pool=GPU_POOL)
        def train_policy(conf: dict, reward_model: dict, relabelled: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.train_policy(conf, mode="full", reward_model=reward_model)

        @task
        def stress_test(conf: dict, trained: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.stress_test(conf, trained)

        @task
        def evaluate_and_promote(conf: dict, trained: dict, stressed: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.evaluate_and_promote(conf, trained, stressed)

        conf = validate_conf()
        reward_model = train_reward_model(conf)
        inputs_changed(conf) >> reward_model
        trained = train_policy(conf, reward_model, relabel(conf, reward_model))
        evaluate_and_promote(conf, trained, stress_test(conf, trained))

    return retrain_full()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
