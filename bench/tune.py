"""`rlops train tune` on every built-in pack: does the search find a config at least as good as the
defaults within its budget, and by how much?

For each pack (``scenarios/*/oracle.py``) runs :func:`rlops.pipeline_steps.training.tune.tune` — an
Optuna study whose trial 0 is the pack's defaults, every trial trained for ``--timesteps`` steps
and scored by its greedy mean return on the same ``--eval-episodes`` held-out seeded episodes —
until ``--budget-s`` seconds have passed (a trial under way finishes). Prints per pack: the
defaults' held-out return, the best trial's, trials run, pruned, the wall time used, and whether
best ≥ defaults. The study's MLflow runs go to a throw-away store; the pack's params.yaml is never
written. The machine's load average is printed at start and end; the last line is one JSON object.

Usage: nice -n 10 python bench/tune.py [--packs credit_approval,complaint_handling] [--budget-s 150]
       [--timesteps 200000] [--eval-episodes 2000] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as load_report  # noqa: E402
from rlops.common.config import load_params  # noqa: E402
from rlops.pipeline_steps.infra.context import StepContext  # noqa: E402
from rlops.pipeline_steps.training.request import TuneRequest  # noqa: E402
from rlops.pipeline_steps.training.tune import tune  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EVAL_SEED = 3_000_000  # held-out episodes: disjoint from training (from 7) and early stopping (9,000,000)
MAX_TRIALS = 1000  # the budget, not the count, ends a study


def built_in_packs() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "scenarios").glob("*/oracle.py"))


def tune_pack(name: str, home: Path, budget_s: float, timesteps: int, eval_episodes: int) -> dict[str, Any]:
    """One study on pack ``name`` with its MLflow runs under ``home``."""
    params = load_params(
        overrides={
            "storage": {"root": f"file://{home / 'data'}"},
            "local_dir": str(home / "local"),
            "tracking": {"uri": f"sqlite:///{home / 'mlflow.db'}", "artifact_root": str(home / "mlartifacts")},
        }
    )
    ctx = StepContext.create(name, run_key="20260101T0000", params=params)
    t0 = time.perf_counter()
    request = TuneRequest(
        trials=MAX_TRIALS,
        budget_s=budget_s,
        timesteps=timesteps,
        eval_episodes=eval_episodes,
        eval_seed=EVAL_SEED,
        device="cpu",
        write=False,
    )
    res = tune(ctx, request)
    wall = time.perf_counter() - t0
    pruned = sum(1 for t in res.trials if t["pruned"])
    best = next(t for t in res.trials if not t["pruned"] and t["value"] == res.best_value)
    return {
        "defaults_heldout_return": round(res.default_value, 4),
        "best_heldout_return": round(res.best_value, 4),
        "gain": round(res.best_value - res.default_value, 4),
        "best_trial": best["number"],
        "best_is_at_least_defaults": res.best_value >= res.default_value,
        "trials_run": len(res.trials),
        "trials_pruned": pruned,
        "budget_s": budget_s,
        "wall_s": round(wall, 1),
        "timesteps_per_trial": timesteps,
        "eval_episodes": eval_episodes,
        "defaults": res.default_params,
        "best": res.best_params,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packs", default=",".join(built_in_packs()))
    ap.add_argument("--budget-s", type=float, default=150.0, help="seconds per pack (default 150)")
    ap.add_argument("--timesteps", type=int, default=200_000, help="environment steps per trial (default 200000)")
    ap.add_argument("--eval-episodes", type=int, default=2000, help="held-out episodes scoring every trial")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (one does not spin on a shared machine)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
    import logging

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    load_start = load_report("start")
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rlops-bench-tune-") as tmp:
        for name in args.packs.split(","):
            r = tune_pack(name, Path(tmp) / name, args.budget_s, args.timesteps, args.eval_episodes)
            report[name] = r
            print(
                f"{name:20} defaults {r['defaults_heldout_return']:.4f}  best {r['best_heldout_return']:.4f} "
                f"(trial {r['best_trial']}, {r['gain']:+.4f})  trials {r['trials_run']} ({r['trials_pruned']} "
                f"pruned)  {r['wall_s']:.0f} s of {r['budget_s']:.0f} s  "
                f"best >= defaults: {'yes' if r['best_is_at_least_defaults'] else 'NO'}",
                flush=True,
            )
            print(f"{'':20} best config {r['best']}", flush=True)
    load_end = load_report("end")
    print(
        json.dumps(
            {
                "packs": report,
                "pass": all(r["best_is_at_least_defaults"] for r in report.values()),
                "threads": args.threads,
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
