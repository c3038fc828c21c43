"""
### rollout — every 15 minutes by default, one DAG per pack (`rollout__<pack>`)

Moves a staged challenger on its live A/B gates — 5 → 15 → 100 % of traffic
(`evaluate.rollout_stages`), each stage serving at least `rollout.min_stage_minutes` — and
finishes it (challenger → champion, old champion → previous), or withdraws it when a live gate
fails. Without a challenger, rolls back a champion whose live return has fallen below the previous
champion's by more than the gate's margin (`evaluate.segment_tolerance`), walking back through
the champion history. Every move is recorded in MLflow (a `rollout` step run, tag
`rlops.rollout.action`, with its reason). Conf: `dry_run`, and `min_stage_minutes` /
`regression_window_hours` over the pack's `rollout:` params (as `rlops model rollout` takes them).
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_id, dag_settings, pack_dag_configs, pack_doc

KIND = "rollout"


def build(pack: PackDagConfig):
    @dag(tags=pack.tags("promotion", "rollout"), doc_md=pack_doc(__doc__, KIND, pack), **dag_settings(pack, KIND))
    def rollout():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(context["params"], context, interval_minutes=pack.interval_minutes(KIND))

        @task
        def advance_or_roll_back(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.rollout(conf)

        advance_or_roll_back(validate_conf())

    return rollout()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
