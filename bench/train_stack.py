"""A full retrain through the real scheduler against the PPO bench, side by side in one run.

(a) shipped: ``retrain_full__<pack>`` triggered over the REST API of a stack started by ``rlops stack
    up`` (LocalExecutor, an MLflow server over HTTP, the task's threads from ``train.threads``); its
    figure is the steps the ``train_policy`` task trained over the task instance's duration as Airflow
    records it (the task process's start-up, registration and evaluation included).
(b) bench: the library call of bench/ppo_vs_sb3.py (``bench/train_shipped.py``'s ``run_bench``) with
    the same pack, budget, seed and the thread count the task used.

They alternate over ``--runs``; the medians are compared (target: shipped >= 0.5 x bench).

    python bench/train_stack.py [--pack credit_approval] [--timesteps N] [--runs 3] [--workdir DIR]

The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from bench.soak_watch import Watcher  # noqa: E402
from bench.stack_soak import soak_params  # noqa: E402
from bench.train_shipped import run_bench  # noqa: E402


def run_shipped(w: Watcher, pack: str, timesteps: int, run_key: str) -> dict[str, Any]:
    dag = f"retrain_full__{pack}"
    out = w.api.request(
        "POST", f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None, "conf": {"timesteps": timesteps, "staged": False,
                                                                                 "run_key": run_key}},
    )  # fmt: skip
    run_id = str(out["dag_run_id"])
    rid = urllib.parse.quote(run_id, safe="")
    while (state := w.api.request("GET", f"/api/v2/dags/{dag}/dagRuns/{rid}")["state"]) not in ("success", "failed"):
        time.sleep(3)
    ti = w.api.request("GET", f"/api/v2/dags/{dag}/dagRuns/{rid}/taskInstances/train_policy")
    if state != "success" or ti["state"] != "success":
        raise RuntimeError(f"{dag} {run_id} ended {state}, train_policy {ti['state']}: see the stack's task logs")
    result = w.xcom(dag, run_id, "train_policy")
    return {
        "sps": result["timesteps"] / float(ti["duration"]),
        "steps": int(result["timesteps"]),
        "iterations": int(result["iterations"]),
        "wall_s": float(ti["duration"]),
        "train_s": float(result["train_seconds"]),
        "threads": int(result["threads"]),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pack", default="credit_approval")
    p.add_argument("--timesteps", type=int, default=None, help="budget (default: the pack's train.total_timesteps)")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)
    if args.runs < 1 or (args.timesteps is not None and args.timesteps < 1000):
        p.error("--runs must be >= 1 and --timesteps >= 1000 (the DAG's conf check refuses less)")
    import yaml

    from rlops.common.config import REPO_ROOT, resolve_params
    from rlops.sandbox.pack import load_pack

    load_start = report_load("start")
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rlops-train-stack-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    params = soak_params(workdir, [args.pack], cadence=5)
    # every run trains: the same inputs would otherwise be skipped as unchanged after the first
    params["dags"] = {
        **params["dags"], "scheduled": False, "skip_unchanged": False, "unpaused": [f"retrain_full__{args.pack}"],
    }  # fmt: skip
    (workdir / "params.yaml").write_text(yaml.safe_dump(params))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "MLFLOW_", "RLOPS_"))}
    env.update(RLOPS_HOME=str(workdir), RLOPS_PARAMS=str(workdir / "params.yaml"))
    resolved = resolve_params(args.pack, params=params).model
    timesteps = int(args.timesteps or resolved.train.total_timesteps)
    seed = int(resolved.ppo.seed)
    pack = load_pack(REPO_ROOT / "scenarios" / args.pack)
    w = Watcher(workdir, env, [args.pack], minutes=0, say=lambda s: print(s, flush=True))
    w.up()
    shipped: list[dict[str, Any]] = []
    bench: list[dict[str, Any]] = []
    try:
        for i in range(args.runs):
            for which in ("shipped", "bench") if i % 2 == 0 else ("bench", "shipped"):
                if which == "shipped":
                    shipped.append(run_shipped(w, args.pack, timesteps, f"2026010{1 + i}T0000"))
                    row = shipped[-1]
                else:
                    threads = shipped[-1]["threads"] if shipped else 1
                    bench.append(run_bench(pack, timesteps, None, threads, seed))
                    row = bench[-1]
                print(f"  run {i + 1} {which:8}{row['sps']:>10,.0f} env-steps/s  {row['steps']:>9,} steps  "
                      f"{row['wall_s']:7.1f} s  load {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    finally:
        w.down()
    a, b = statistics.median(r["sps"] for r in shipped), statistics.median(r["sps"] for r in bench)
    print(
        json.dumps(
            {
                "pack": args.pack,
                "timesteps_budget": timesteps,
                "runs": args.runs,
                "shipped_env_steps_per_s": round(a, 1),
                "shipped_env_steps_per_s_in_train": round(
                    statistics.median(r["steps"] / r["train_s"] for r in shipped), 1
                ),
                "bench_env_steps_per_s": round(b, 1),
                "ratio": round(a / b, 3),
                "threads": shipped[-1]["threads"],
                "load_start": load_start,
                "load_end": report_load("end"),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
