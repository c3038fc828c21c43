"""
### retrain_full — hourly, and on demand after drift

Retrains the reward model on the labelled traces, trains a PPO policy from scratch on the
freshest sandbox calibration, stress-tests reward function and policy, then runs the gated
evaluation against the `champion` and promotes on success. `drift_monitor` triggers this DAG
as an emergency retrain when live traffic drifts away from the sandbox.

`train_policy` runs on the **gpu** Celery queue (pool `gpu`).
The reward model relabels the window's captured traces before training; with `reward_source`
`model` or `blend` (conf, else params `train.reward_source`) the policy trains on the reward model
just trained, warm-started by behaviour cloning from the relabelled steps.
Conf: `scenario`, `reward_fn`, `timesteps`, `mode`, `dry_run`, `reward_source`,
`reward_blend_lambda`.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import GPU_POOL, GPU_QUEUE, dag_settings


@dag(
    dag_id="retrain_full",
    schedule="@hourly",
    tags=["rlops", "training", "full"],
    doc_md=__doc__,
    **dag_settings(timesteps=300_000, mode="full"),
)
def retrain_full():
    @task
    def validate_conf(**context) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.validate_conf(context["params"], context, interval_minutes=60)

    @task
    def train_reward_model(conf: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.train_reward_model(conf)

    @task
    def relabel(conf: dict, reward_model: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.relabel(conf, reward_model)

    @task(queue=GPU_QUEUE, pool=GPU_POOL, retries=1)
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
    trained = train_policy(conf, reward_model, relabel(conf, reward_model))
    evaluate_and_promote(conf, trained, stress_test(conf, trained))


retrain_full()
