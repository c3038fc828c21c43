"""The shipped training path against the PPO bench: env-steps/s of each, in one process, same pack and budget.

(a) shipped: the ``train_policy`` task of the ``retrain_full__<pack>`` DAG — the task function the
    DAG file defines (parsed by Airflow's ``DagBag``), given the conf the DAG's first task makes of
    its Param defaults (``run_conf.validate_conf``) — in a temporary project home with an embedded
    SQLite MLflow. Everything the task does is timed: settings (``train.threads`` resolved as in a
    task process), reward-function registration, per-iteration metrics, checkpoints, the held-out
    evaluation and the policy's registration. Its figure: steps trained / wall time of the call.
(b) bench: the library call of bench/ppo_vs_sb3.py (``derive_defaults`` → ``pack.make_env`` →
    ``train``) with the same budget, seed, reward function, profile and thread count as (a), without
    that bench's per-iteration held-out evaluation (which it does not time either). Its figure:
    steps / wall time of ``train``.

``--threads auto`` resolves as in a task process (:mod:`rlops.common.threads`): run with
``AIRFLOW__CORE__PARALLELISM=4`` exported (what the one-machine stack gives its LocalExecutor) to
time what that worker would run; the bench sets no Airflow variable itself.

Both are timed ``--runs`` times, alternating which goes first (the load of a shared machine
drifts), after one untimed warm-up of each (imports, MLflow's schema, first allocations — a fresh
task process pays these too: the warm-up's time is printed); the medians are compared. Each
shipped run gets its own run key, so none is answered by an earlier registered version.

Usage: python bench/train_shipped.py [--pack credit_approval] [--timesteps N] [--runs 3]
       [--threads auto|N] [--num-envs N] [--eval-episodes N]
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.loadavg import report as report_load  # noqa: E402
from bench.ppo_vs_sb3 import PROFILE, REWARD  # noqa: E402

FIRST_KEY = datetime(2026, 1, 1, tzinfo=UTC)


def project_home(home: Path, args: argparse.Namespace) -> None:
    """A project home in ``home`` (params, storage, SQLite MLflow, an Airflow home for parsing);
    set before rlops or Airflow read their settings."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["storage"]["root"] = f"file://{home / 'data'}"
    params["tracking"]["uri"] = f"sqlite:///{home / 'mlflow' / 'mlflow.db'}"
    params["label_queue"]["db_url"] = f"sqlite:///{home / 'queue.db'}"
    params["local_dir"] = str(home / "local")
    params["train"].update(profile=PROFILE, threads=args.threads, eval_episodes=args.eval_episodes)
    if args.num_envs:
        params["train"]["num_envs"] = args.num_envs
    if args.timesteps:
        params["train"]["total_timesteps"] = args.timesteps
    (home / "mlflow").mkdir(parents=True)
    (home / "params.yaml").write_text(yaml.safe_dump(params))
    os.environ.update(
        {
            "RLOPS_PARAMS": str(home / "params.yaml"),
            "RLOPS_HOME": str(home),
            "MLFLOW_TRACKING_URI": params["tracking"]["uri"],
            "RLOPS_ARTIFACT_ROOT": str(home / "mlflow" / "artifacts"),
            "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
            "AIRFLOW_HOME": str(home / "airflow"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        }
    )
    for var in ("RLOPS_STORAGE_ROOT", "RLOPS_QUEUE_DB", "MLFLOW_REGISTRY_URI"):
        os.environ.pop(var, None)


def shipped_task(pack: str) -> tuple[Any, dict[str, Any]]:
    """The DAG's ``train_policy`` task function and the conf its ``validate_conf`` task makes."""
    from airflow.dag_processing.dagbag import DagBag
    from airflow.providers.standard.operators.python import PythonOperator

    from rlops.pipeline_steps.orchestration import run_conf

    dag_id = f"retrain_full__{pack}"
    bag = DagBag(dag_folder=str(REPO / "dags" / "retrain_full.py"))
    if dag_id not in bag.dags:
        raise SystemExit(f"no DAG {dag_id}: {bag.import_errors or 'no such pack under scenarios/'}")
    dag = bag.dags[dag_id]
    conf = run_conf.validate_conf({**dag.params.dump(), "reward_fn": REWARD}, {}, interval_minutes=60)
    op = dag.get_task("train_policy")
    if not isinstance(op, PythonOperator):
        raise SystemExit(f"{dag_id}.train_policy is a {type(op).__name__}, not a Python task")
    return op.python_callable, conf


def run_shipped(task: Any, conf: dict[str, Any], key: int) -> dict[str, Any]:
    run_key = (FIRST_KEY + timedelta(hours=key)).strftime("%Y%m%dT%H%M")
    t0 = time.perf_counter()
    out = task({**conf, "run_key": run_key}, {}, {})  # no reward model trained: the scripted reward
    wall = time.perf_counter() - t0
    if out.get("reused"):
        raise RuntimeError(f"run key {run_key} was answered by a registered version: nothing was trained")
    return {
        "sps": out["timesteps"] / wall,
        "sps_in_train": out["timesteps"] / out["train_seconds"],
        "steps": out["timesteps"],
        "iterations": out["iterations"],
        "wall_s": wall,
        "train_s": out["train_seconds"],
        "threads": out["threads"],
        "num_envs": out["num_envs"],
    }


def run_bench(pack: Any, timesteps: int, num_envs: int | None, threads: int, seed: int) -> dict[str, Any]:
    """What bench/ppo_vs_sb3.py's ``run_rlops`` calls, without its held-out evaluation."""
    from rlops.model.pack_defaults import derive_defaults
    from rlops.model.ppo import train

    plan = derive_defaults(pack, device="cpu", seed=seed, total_timesteps=timesteps, torch_threads=threads)
    env = pack.make_env(num_envs=num_envs or plan.num_envs, reward_fn=REWARD, profile=PROFILE, device="cpu", seed=seed)
    t0 = time.perf_counter()
    result = train(plan.config, env)
    wall = time.perf_counter() - t0
    return {
        "sps": result.global_step / wall,
        "steps": result.global_step,
        "iterations": result.iterations,
        "wall_s": wall,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pack", default="credit_approval", help="a pack under scenarios/")
    p.add_argument(
        "--timesteps", type=int, default=None, help="budget of both (default: the DAG's, train.total_timesteps)"
    )
    p.add_argument("--runs", type=int, default=3, help="timed runs of each; medians are compared")
    p.add_argument(
        "--threads", default="auto", help="train.threads of the shipped run (auto or N); the bench uses the same count"
    )
    p.add_argument("--num-envs", type=int, default=None, help="envs of both (default: derived from the pack)")
    p.add_argument("--eval-episodes", type=int, default=1000, help="train.eval_episodes of the shipped run")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.timesteps is not None and args.timesteps < 1000:
        p.error("--timesteps must be at least 1000 (the DAG's conf check refuses less)")
    if args.threads != "auto" and not (args.threads.isdigit() and int(args.threads) >= 1):
        p.error(f"--threads {args.threads!r}: expected auto or an integer >= 1")
    if args.threads != "auto":
        args.threads = int(args.threads)
    if not (REPO / "scenarios" / args.pack / "scenario.yaml").is_file():
        p.error(f"--pack {args.pack!r}: no pack under {REPO / 'scenarios'}")
    load_start = report_load("start")
    with tempfile.TemporaryDirectory(prefix="rlops-train-shipped-") as tmp:
        project_home(Path(tmp), args)
        from rlops.sandbox.pack import load_pack

        task, conf = shipped_task(args.pack)
        pack = load_pack(REPO / "scenarios" / args.pack)
        from rlops.pipeline_steps.infra.context import StepContext

        seed = int(StepContext.create(args.pack).config.ppo.seed)  # the shipped run's (its envs' too)
        t0 = time.perf_counter()
        warm = run_shipped(task, {**conf, "timesteps": 1000}, key=0)
        print(f"warm-up: shipped task with a 1,000-step budget {time.perf_counter() - t0:.1f} s", flush=True)
        threads = int(warm["threads"])
        run_bench(pack, 1000, args.num_envs, threads, seed)
        shipped: list[dict[str, Any]] = []
        bench: list[dict[str, Any]] = []
        for i in range(args.runs):
            for which in ("shipped", "bench") if i % 2 == 0 else ("bench", "shipped"):
                if which == "shipped":
                    shipped.append(run_shipped(task, conf, key=i + 1))
                    row = shipped[-1]
                else:
                    bench.append(run_bench(pack, int(conf["timesteps"]), args.num_envs, threads, seed))
                    row = bench[-1]
                print(
                    f"  run {i + 1} {which:8}{row['sps']:>10,.0f} env-steps/s  {row['steps']:>9,} steps  "
                    f"{row['iterations']:>4} iterations  {row['wall_s']:7.1f} s  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
    sps_a = statistics.median(r["sps"] for r in shipped)
    sps_b = statistics.median(r["sps"] for r in bench)
    in_train = statistics.median(r["sps_in_train"] for r in shipped)
    print(
        f"\n{args.pack}, budget {int(conf['timesteps']):,} steps, {threads} torch threads (median of {args.runs}):\n"
        f"  shipped task  {sps_a:>10,.0f} env-steps/s over the whole call ({in_train:,.0f} inside train)\n"
        f"  bench PPO     {sps_b:>10,.0f} env-steps/s\n  ratio         {sps_a / sps_b:>10.2f}  (target >= 0.5)",
        flush=True,
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "pack": args.pack,
                "shipped_env_steps_per_s": round(sps_a, 1),
                "bench_env_steps_per_s": round(sps_b, 1),
                "ratio": round(sps_a / sps_b, 3),
                "threads": threads,
                "load_start": load_start,
                "load_end": load_end,
                "shipped_env_steps_per_s_in_train": round(in_train, 1),
                "timesteps_budget": int(conf["timesteps"]),
                "runs": args.runs,
                "shipped": shipped,
                "bench": bench,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
