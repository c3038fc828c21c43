"""DAG files: they import, carry the required settings, and import nothing heavy at parse time."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlops.common.config import REPO_ROOT

REPO = REPO_ROOT
KINDS = {
    "trace_capture": "*/15 * * * *",
    "drift_monitor": "@hourly",
    "label_queue": "@hourly",
    "retrain_incremental": "*/15 * * * *",
    "retrain_full": "@hourly",
    "rollout": "*/15 * * * *",
    "promote": None,
}
PACKS = sorted(p.name for p in (REPO / "scenarios").iterdir() if (p / "scenario.yaml").exists())
DAG_IDS = {f"{kind}__{pack}": schedule for kind, schedule in KINDS.items() for pack in PACKS}
HEAVY = ("torch", "mlflow", "great_expectations", "boto3", "pandas", "sandbox", "model")


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


def test_every_dag_imports_without_errors(dagbag) -> None:
    assert dagbag.import_errors == {}
    assert set(dagbag.dag_ids) == set(DAG_IDS)


@pytest.mark.parametrize("dag_id", sorted(DAG_IDS))
def test_dag_settings(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    assert dag.tags and "rlops" in dag.tags and f"pack:{dag_id.split('__')[1]}" in dag.tags
    assert dag.doc_md and dag_id in dag.doc_md
    assert dag.max_active_runs == 1
    assert dag.catchup is False
    assert dag.schedule == DAG_IDS[dag_id]
    for task in dag.tasks:
        assert task.retries >= 1, f"{dag_id}.{task.task_id} has no retries"
    for name in ("scenario", "reward_fn", "timesteps", "mode", "dry_run"):
        assert name in dag.params, f"{dag_id} lacks the {name} param"
    assert dag.params["scenario"] == dag_id.split("__")[1]


@pytest.mark.parametrize("dag_id", ["retrain_incremental__credit_approval", "retrain_full__loan_desk"])
def test_training_runs_on_the_gpu_queue_and_nothing_else_does(dagbag, dag_id: str) -> None:
    dag = dagbag.dags[dag_id]
    for task in dag.tasks:
        if task.task_id == "train_policy":
            assert (task.queue, task.pool) == ("gpu", "gpu")
        else:
            assert task.queue != "gpu"


def test_drift_triggers_an_emergency_full_retrain(dagbag) -> None:
    dag = dagbag.dags["drift_monitor__complaint_handling"]
    trigger = dag.get_task("trigger_emergency_retrain")
    assert trigger.trigger_dag_id == "retrain_full__complaint_handling"
    assert "needs_retrain" in trigger.upstream_task_ids or any(
        "needs_retrain" in dag.get_task(t).upstream_task_ids for t in trigger.upstream_task_ids
    )


def test_dag_files_import_nothing_heavy() -> None:
    """Parse the DAG folder in a fresh interpreter and list the heavy modules it pulled in (what keeps
    a parse fast; its time is a figure for a bench, not a bound for a test on a shared machine)."""
    code = f"""
import json, sys, time
t = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
import_s = time.perf_counter() - t
t = time.perf_counter()
bag = DagBag(dag_folder={str(REPO / "dags")!r})
parse_s = time.perf_counter() - t
heavy = sorted(m for m in {HEAVY!r} if m in sys.modules)
print(json.dumps({{"parse_s": parse_s, "heavy": heavy, "errors": list(bag.import_errors)}}))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["errors"] == []
    assert res["heavy"] == [], f"DAG parsing ({res['parse_s']:.2f} s) imported heavy modules: {res['heavy']}"


@pytest.mark.parametrize(
    "key,value",
    [
        ("timesteps", -5),
        ("mode", "sideways"),
        ("reward_fn", "latest"),
        ("scenario", "no_such_pack"),
        ("dry_run", "yes"),
    ],
)
def test_bad_conf_is_rejected_by_the_typed_params(dagbag, key: str, value: object) -> None:
    import copy

    from airflow.sdk.definitions.param import ParamValidationError

    params = copy.deepcopy(dagbag.dags["retrain_full__credit_approval"].params)
    params.validate()  # the defaults are valid
    with pytest.raises(ParamValidationError):
        params[key] = value
        params.validate()


def test_conf_that_passes_types_but_not_the_project_fails_the_first_task() -> None:
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.task_runtime import ConfError

    good = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": True}
    assert validate_conf(good)["run_key"]
    with pytest.raises(ConfError, match="reward_fn|no reward function 'v9'"):
        validate_conf({**good, "reward_fn": "v9"})
    with pytest.raises(ConfError, match="no pack"):
        validate_conf({**good, "scenario": "no_such_pack"})
