"""
### promote — gated promotion of one policy version, on request

Started by the rlops webhook receiver (`rlops model webhook serve --mode airflow`) when someone
sets the alias `challenger` on a policy version in the MLflow UI, or by hand with
`{"candidate": "<version>"}`. Evaluates the version against the `champion` and promotes it only
when every gate passes (staged 5 → 15 → 100% when `promotion.staged`); a champion set by hand
outside rlops is handled first. The outcome is written back on the version (tags
`rlops.promotion.*` and the gate summary in its description).
Conf: `scenario`, `candidate`, `reward_fn`, `dry_run`.
"""

from airflow.sdk import Param, dag, task

from rlops.pipeline_steps.orchestration.settings import dag_settings

_settings = dag_settings()
_settings["params"] = {
    **_settings["params"],
    "candidate": Param("1", type="string", pattern=r"^\d+$", description="policy version to judge and promote"),
    "requested_by": Param("airflow", type="string", description="who asked: mlflow-ui-alias, manual-champion, airflow"),
}


@dag(dag_id="promote", schedule=None, tags=["rlops", "promotion"], doc_md=__doc__, **_settings)
def promote():
    @task
    def validate_conf(**context) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.validate_promotion_conf(context["params"], context)

    @task
    def evaluate_and_promote(conf: dict) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.promote_requested(conf)

    evaluate_and_promote(validate_conf())


promote()
