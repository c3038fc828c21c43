"""
### trace_capture — every 15 minutes, one DAG per pack (`trace_capture__<pack>`)

Compacts the JSON-lines trace files that live agents wrote to the landing zone into the trace
store (parquet partitioned by scenario/date/hour), validating every row against the data
contract: rows that break it go to the quarantine partition with their reason
(rows in = accepted + quarantined). With `simulate: true` in the conf (no live agent yet, demos)
it samples the `champion` running in the pack's `live` simulation profile instead, and says so
(`source: simulation:live`); `simulate: false` reads the landing zone only. By default (`null`, a
scheduled run) it reads the landing zone and, when the interval has no files there, simulates only
if the pack's params say `capture.simulate_when_empty: true`. Re-running an interval overwrites
its partition. A run that quarantines more than `capture.max_quarantine_share` of its rows fails
(no retries) naming the top reasons, its rows written; an interval that accepted no row ends its
`capture` task as skipped, the log saying where the newest landing files are.

Then `capture_outcomes` stores the late outcomes agents landed in the interval (`Tracer.outcome`
lines under `<landing>/_outcomes`, docs/outcomes.md) in the outcome store, where every read of the
trace store joins them: an interval with none ends the task as skipped; one none of whose records
was accepted (unknown episodes, too late, bad records) fails it with the reasons, the records kept
in the outcome quarantine.
"""

from airflow.sdk import dag, task

from rlops.pipeline_steps.orchestration.settings import PackDagConfig, dag_id, dag_settings, pack_dag_configs, pack_doc

KIND = "trace_capture"


def build(pack: PackDagConfig):
    # The capture request's simulate Param is null, not false, by default: a scheduled run passes no
    # conf, and only null lets the params' capture.simulate_when_empty decide what an interval
    # without landing files stores.
    @dag(tags=pack.tags("data"), doc_md=pack_doc(__doc__, KIND, pack), **dag_settings(pack, KIND))
    def trace_capture():
        @task
        def validate_conf(**context) -> dict:
            from rlops.pipeline_steps.orchestration import run_conf

            return run_conf.validate_conf(context["params"], context, interval_minutes=pack.interval_minutes(KIND))

        @task
        def capture(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.capture(conf)

        @task(trigger_rule="none_failed")  # after a capture that found no traffic too
        def capture_outcomes(conf: dict) -> dict:
            from rlops.pipeline_steps.orchestration import tasks

            return tasks.capture_outcomes(conf)

        conf = validate_conf()
        capture(conf) >> capture_outcomes(conf)

    return trace_capture()


for _pack in pack_dag_configs():
    globals()[dag_id(KIND, _pack.scenario)] = build(_pack)
