"""Pipeline wall time: ``retrain_full`` and ``retrain_incremental`` through ``dag.test()`` on the
embedded default (SQLite Airflow and MLflow, local folders) with the demo budgets.

Bars on 2 CPU cores: incremental < 3 min (its schedule is every 15 min); full < 5 min. The data
the retrains need (captured live traffic, a calibration) is prepared first and not timed.
Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.loadavg import report as report_load  # noqa: E402


def prepare(home: Path) -> None:
    """An Airflow home and an rlops home in ``home``; env vars set before airflow is imported."""
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow' / 'airflow.db'}",
            "RLOPS_HOME": str(home),
            "RLOPS_STORAGE_ROOT": f"file://{home / 'data'}",
            "MLFLOW_TRACKING_URI": f"sqlite:///{home / 'mlflow.db'}",
            "RLOPS_QUEUE_DB": f"sqlite:///{home / 'queue.db'}",
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
            "PYTHONPATH": str(REPO),
        }
    )
    (home / "airflow").mkdir(parents=True, exist_ok=True)
    for cmd in (["db", "migrate"], ["pools", "set", "gpu", "1", "GPU training slots"]):
        subprocess.run([sys.executable, "-m", "airflow", *cmd], check=True, capture_output=True)


def run_dag(dag_id: str, when: datetime, conf: dict) -> tuple[str, float]:
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags" / f"{dag_id}.py")).dags[dag_id]
    t0 = time.perf_counter()
    run = dag.test(logical_date=when, run_conf=conf)
    secs = time.perf_counter() - t0
    for ti in run.get_task_instances():  # what each task did, so the timing can be trusted
        out = ti.xcom_pull(task_ids=ti.task_id) if ti.state == "success" else None
        keys = (
            "rows_in",
            "drifted_fields",
            "retrain",
            "model_version",
            "heldout_pairwise_accuracy",
            "mean_return",
            "timesteps",
            "note",
            "verdict",
            "promoted",
            "reason",
        )
        brief = {k: out[k] for k in keys if isinstance(out, dict) and k in out}
        print(f"  {dag_id}.{ti.task_id}: {ti.state} {json.dumps(brief, default=str)[:300]}", flush=True)
    return str(run.state), secs


def main() -> None:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--full-timesteps", type=int, default=None, help="default: params demo.timesteps")
    ap.add_argument(
        "--incremental-timesteps", type=int, default=None, help="default: params train.incremental_timesteps"
    )
    args = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from rlops.common.config import load_params

    params = load_params(REPO / "params.yaml")
    full_steps = args.full_timesteps or int(params["demo"]["timesteps"])
    inc_steps = args.incremental_timesteps or int(params["train"]["incremental_timesteps"])
    home = Path(tempfile.mkdtemp(prefix="rlops-bench-pipeline-"))
    prepare(home)
    import logging

    logging.disable(logging.INFO)
    when = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    base = {"scenario": params["scenario"], "reward_fn": params["reward_fn"], "dry_run": False}
    for dag_id in ("trace_capture", "drift_monitor"):  # data for the retrains; not timed
        state, secs = run_dag(dag_id, when, base)
        print(f"prepared {dag_id}: {state} in {secs:.0f}s", flush=True)
    full_state, full_s = run_dag("retrain_full", when, {**base, "mode": "full", "timesteps": full_steps})
    print(f"retrain_full        {full_state:<8} {full_s:7.1f}s  ({full_steps:,} PPO steps; bar: < 300 s)", flush=True)
    inc_state, inc_s = run_dag("retrain_incremental", when, {**base, "mode": "incremental", "timesteps": inc_steps})
    print(f"retrain_incremental {inc_state:<8} {inc_s:7.1f}s  ({inc_steps:,} PPO steps; bar: < 180 s)", flush=True)
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "incremental_s": round(inc_s, 1),
                "full_s": round(full_s, 1),
                "incremental_state": inc_state,
                "full_state": full_state,
                "full_timesteps": full_steps,
                "incremental_timesteps": inc_steps,
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )


if __name__ == "__main__":
    main()
