"""
### promote — gated promotion of one policy version, on request; one DAG per pack (`promote__<pack>`)

Started by the rlops webhook receiver (`rlops model webhook serve --mode airflow`) when someone
sets the alias `challenger` on a policy version in the MLflow UI, or by hand with
`{"candidate": "<version>"}`. Evaluates the version against the `champion` and promotes it only
when every gate passes (staged 5 → 15 → 100% when the conf's `staged` says so, else params
`promotion.staged`, then moved on by `rollout__<pack>`); a champion set by hand outside rlops is
handled first. The outcome is written back on the version (tags `rlops.promotion.*` and the gate
summary in its description).
Conf: `candidate`, `requested_by`, `staged`, `reward_fn`, `dry_run`.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_id, dag_settings, pack_dag_configs, pack_doc

KIND = "promote"


def build(pack: PackDagConfig):
    @dag(tags=pack.tags("promotion"), doc_md=pack_doc(__doc__, KIND, pack), **dag_settings(pack, KIND))
    def promote():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_promotion_conf(context["params"], context)

        @task
        def evaluate_and_promote(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.promote_requested(conf)

        evaluate_and_promote(validate_conf())

    return promote()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
