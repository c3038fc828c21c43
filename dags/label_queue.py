"""
### label_queue — hourly by default, one DAG per pack (`label_queue__<pack>`)

Scores the window's traces by the champion's masked policy entropy per state cluster; clusters
that stay uncertain (mean normalised entropy over 0.8) enqueue their latest 100 states for human
labelling, exported as Label Studio tasks. Finished annotations are imported back and feed the
reward model at the next `retrain_full__<pack>`.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_id, dag_settings, pack_dag_configs, pack_doc

KIND = "label_queue"


def build(pack: PackDagConfig):
    @dag(tags=pack.tags("labelling"), doc_md=pack_doc(__doc__, KIND, pack), **dag_settings(pack, KIND))
    def label_queue():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(context["params"], context, interval_minutes=pack.interval_minutes(KIND))

        @task
        def enqueue_uncertain_states(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.label_queue(conf)

        @task
        def ingest_labels(conf: dict, queued: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.ingest_labels(conf)

        conf = validate_conf()
        ingest_labels(conf, enqueue_uncertain_states(conf))

    return label_queue()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
