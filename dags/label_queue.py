"""
### label_queue — hourly

Scores the window's traces by the champion's masked policy entropy per state cluster; clusters
that stay uncertain (mean normalised entropy over 0.8) enqueue their latest 100 states for human
labelling, exported as Label Studio tasks. Finished annotations are imported back and feed the
reward model at the next `retrain_full`.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import dag_settings


@dag(
    dag_id="label_queue",
    schedule="@hourly",
    tags=["rlops", "labelling"],
    doc_md=__doc__,
    **dag_settings(),
)
def label_queue():
    @task
    def validate_conf(**context) -> dict:
        from rlops.pipeline_steps.orchestration import tasks
        return tasks.validate_conf(context["params"], context, interval_minutes=60)

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


label_queue()
