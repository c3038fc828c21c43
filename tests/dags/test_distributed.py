"""The distributed deployment, for real: Airflow 3 with the CeleryExecutor on the local PostgreSQL
and Redis, a scheduler, a dag-processor, an API server and three Celery workers — two on the
``default`` queue, one on ``gpu`` — and two runs on that one cluster:

* ``drift_monitor__credit_approval`` with ``drift.slice_hours``: one mapped ``summarise_slice`` task
  per hour of a 4-hour window, run by the default queue's workers; its verdicts are those of one
  task reading the window whole;
* ``retrain_full__credit_approval`` end to end with tiny budgets: ``train_policy`` on the gpu
  queue's worker, every other task on the default queue's, and MLflow holds the new policy version.

Skipped when Postgres (127.0.0.1:5432, user postgres, trust auth) or Redis (127.0.0.1:6379) is not
reachable; ``.ci/run`` starts both when they are installed.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT, deep_merge

if str(Path(__file__).resolve().parent) not in sys.path:  # pytest's default import mode adds it too
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from distributed_cluster import AirflowCluster, ClusterError, services_unavailable  # noqa: E402

pytestmark = [pytest.mark.distributed, pytest.mark.slow]  # about two minutes: `make test-slow` (and CI) run it

# one set of DAGs per pack; the full retrain (an incremental one waits for a champion to fine-tune)
DAG_ID = "retrain_full__credit_approval"
CONF = {"scenario": "credit_approval", "reward_fn": "v1", "timesteps": 4000, "dry_run": False}
# Small enough for 2 CPU cores and a few minutes in all; every step still does its real work.
TINY: dict[str, Any] = {
    "train": {"num_envs": 256, "eval_episodes": 200},
    "evaluate": {"episodes": 800, "bootstrap_samples": 300, "latency_samples": 30},
    "stress": {"edge_states": 1000, "gaming_episodes": 300, "policy_episodes": 200},
    "reward_model": {"pairs": 400, "epochs": 5},
}
RUN_TIMEOUT_S = 480


def _project_env(root: Path, tracking_uri: str, extra: dict[str, Any] | None = None) -> dict[str, str]:
    """rlops settings for every cluster process: its own params file, storage, MLflow, queue DB."""
    params = deep_merge(deep_merge(yaml.safe_load((REPO_ROOT / "params.yaml").read_text()), TINY), extra or {})
    root.mkdir(parents=True, exist_ok=True)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return {
        "RLOPS_PARAMS": str(root / "params.yaml"),
        "RLOPS_HOME": str(root),
        "RLOPS_STORAGE_ROOT": f"file://{root / 'data'}",
        "RLOPS_QUEUE_DB": f"sqlite:///{root / 'queue.db'}",
        "MLFLOW_TRACKING_URI": tracking_uri,
        "RLOPS_ARTIFACT_ROOT": os.environ["RLOPS_ARTIFACT_ROOT"],
    }


DRIFT_DAG_ID = "drift_monitor__credit_approval"
# A 4-hour window summarised one hour per mapped task; the run at 08:00 owns [07:00, 08:00).
DRIFT = {"drift": {"window_hours": 4, "slice_hours": 1, "baseline_episodes": 200}}
DRIFT_KEY, DRIFT_LOGICAL_DATE = "20261130T0700", "2026-11-30T08:00:00Z"


def _write_live_window(hours: int) -> None:
    """The rule engine's traffic (what the sandbox baseline serves: no drift) in each hour of the window."""
    from datetime import UTC, datetime, timedelta

    from rlops.pipeline_steps.drift.check import comparable_rows
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces
    from rlops.trace_store.store import join_uri, partition_path

    ctx = StepContext.create("credit_approval", DRIFT_KEY)
    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    for h in range(hours):
        t = ctx.key.end - timedelta(hours=hours - h)
        live = comparable_rows(pack, rollout_traces(pack, rule_policy, 100, seed=100 + h, episode_prefix=f"live-{h}"))
        live["ts"] = datetime(t.year, t.month, t.day, t.hour, 5, tzinfo=UTC).isoformat()
        part = partition_path(scenario=ctx.scenario, date=f"{t:%Y-%m-%d}", hour=t.hour)
        ctx.storage.write_parquet(join_uri(ctx.traces.trace_uri, part, "part-0.parquet"), live)


def test_retrain_and_a_fanned_drift_window_on_celery_workers(
    tmp_path: Path, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cluster, two runs: the drift monitor with ``drift.slice_hours`` (one mapped
    ``summarise_slice`` task per hour of the window, taken by the default queue's workers; the reduce
    reports what one task reading the window does), then the full retrain (training on the gpu
    queue's worker, the rest on the default queue's two workers)."""
    reason = services_unavailable()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("airflow.providers.celery", reason="apache-airflow-providers-celery is not installed")

    env = _project_env(tmp_path / "rlops", tmp_tracking, DRIFT)
    for var in ("RLOPS_PARAMS", "RLOPS_HOME", "RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB"):
        monkeypatch.setenv(var, env[var])
    _write_live_window(4)
    cluster = AirflowCluster(home=tmp_path / "airflow", repo=REPO_ROOT, project_env=env)
    try:
        cluster.prepare()
        cluster.start_services()
        default_nodes = {cluster.start_worker("default", "-a"), cluster.start_worker("default", "-b")}
        gpu_node = cluster.start_worker("gpu")
        cluster.wait_for_api()
        cluster.api("POST", "/api/v2/pools", {"name": "gpu", "slots": 1, "description": "GPU training slots"})
        # the drift run first: with no champion yet its baseline is the rule engine, whose traffic
        # the window holds (no drift, so no recalibration and no emergency retrain to wait for)
        fanned = _fanned_drift_run(cluster, default_nodes)
        _check_fanned_equals_one_task(fanned)
        _retrain_run(cluster, tmp_tracking, default_nodes, gpu_node)
    except ClusterError:
        print(cluster.task_logs(DAG_ID), cluster.task_logs(DRIFT_DAG_ID), sep="\n")
        raise
    finally:
        strays = cluster.close()
        if strays:
            print(f"killed processes that had left their groups: {strays}")


def _check_fanned_equals_one_task(fanned: dict[str, Any]) -> None:
    from rlops.pipeline_steps.drift.check import drift_check
    from rlops.pipeline_steps.infra.context import StepContext

    one = drift_check(StepContext.create("credit_approval", DRIFT_KEY)).as_dict()  # the window read whole, here
    assert fanned["run_key"] == DRIFT_KEY
    for key in ("drifted_fields", "live_mean_return", "policy_version", "retrain", "summary"):
        assert fanned[key] == one[key], key
    assert fanned["retrain"] is False, fanned["summary"]


def _retrain_run(cluster: AirflowCluster, tmp_tracking: str, default_nodes: set[str], gpu_node: str) -> None:
    cluster.wait_for_dag(DAG_ID)
    run_id = cluster.trigger(DAG_ID, CONF)
    state = cluster.wait_for_run(DAG_ID, run_id, timeout=RUN_TIMEOUT_S)
    tis = cluster.task_instances(DAG_ID, run_id)
    placement = {t: (ti["state"], ti["queue"], ti["hostname"]) for t, ti in tis.items()}
    if state != "success":
        print(cluster.task_logs(DAG_ID), cluster.process_logs(), sep="\n")
    assert state == "success", placement

    # Training ran on the gpu queue, on the worker that serves it (and in its pool) ...
    train = tis["train_policy"]
    assert (train["queue"], train["hostname"], train["pool"]) == ("gpu", gpu_node, "gpu"), placement
    # ... and everything else on the default queue's workers.
    for task_id, ti in tis.items():
        if task_id != "train_policy":
            assert ti["queue"] == "default" and ti["hostname"] in default_nodes, placement
    assert set(tis) == {
        "validate_conf",
        "inputs_changed",
        "train_reward_model",
        "relabel",
        "train_policy",
        "stress_test",
        "evaluate_and_promote",
    }
    # The workers' own logs agree: each executed exactly its queue's tasks.
    assert cluster.tasks_received("worker-gpu") == {"train_policy"}
    received = cluster.tasks_received("worker-default-a") | cluster.tasks_received("worker-default-b")
    assert set(tis) - {"train_policy"} <= received and "train_policy" not in received  # (and the drift run's)

    # The candidate is a new registered version of the scenario's policy in MLflow.
    trained = cluster.xcom(DAG_ID, run_id, "train_policy")
    assert trained["model_version"] and trained["worker_host"]
    from mlflow import MlflowClient

    versions = MlflowClient(tracking_uri=tmp_tracking).search_model_versions("name='credit_approval-policy'")
    assert str(trained["model_version"]) in {str(v.version) for v in versions}


def _fanned_drift_run(cluster: AirflowCluster, default_nodes: set[str]) -> dict[str, Any]:
    cluster.wait_for_dag(DRIFT_DAG_ID)
    conf = {"scenario": "credit_approval", "reward_fn": "v1", "dry_run": False}
    run_id = cluster.trigger(DRIFT_DAG_ID, conf, logical_date=DRIFT_LOGICAL_DATE)
    state = cluster.wait_for_run(DRIFT_DAG_ID, run_id, timeout=RUN_TIMEOUT_S)
    if state != "success":
        print(cluster.task_logs(DRIFT_DAG_ID), cluster.process_logs(), sep="\n")
    assert state == "success", cluster.task_instances(DRIFT_DAG_ID, run_id)

    mapped = cluster.mapped_instances(DRIFT_DAG_ID, run_id, "summarise_slice")
    placement = [(ti["map_index"], ti["state"], ti["queue"], ti["hostname"]) for ti in mapped]
    print(f"summarise_slice placement: {placement}")
    assert [ti["map_index"] for ti in mapped] == [0, 1, 2, 3], placement
    assert all(ti["state"] == "success" and ti["hostname"] in default_nodes for ti in mapped), placement
    out: dict[str, Any] = cluster.xcom(DRIFT_DAG_ID, run_id, "detect_drift")
    return out
