"""Learning quality with default settings only: every built-in pack, the same defaults.

For each pack under ``scenarios/`` that ships an oracle, trains masked PPO with the settings
``rlops.model.pack_defaults.derive_defaults(pack)`` gives (nothing tuned per pack), then scores on
10,000 held-out episodes (seeds disjoint from training and from the early-stopping batch):

* ``oracle``, ``rules``, ``random``, ``policy``: mean return (reward v1, the pack's default profile);
* ``gap_closed = (policy − rules) / (oracle − rules)``;
* ``pct_of_oracle = policy / oracle`` (a bar only where the oracle's return is positive);
* illegal actions of the greedy policy, CPU seconds of training (process time, all threads).

Bars per pack: ``gap_closed`` ≥ 0.9, ``policy`` ≥ 95% of the oracle where returns are positive,
0 illegal actions, ≤ 300 CPU-seconds of training. With ``--runs 3`` (the default) each pack is
trained with three seeds and the median run is the pack's figure. The machine's load average is
printed at start and end; the last line is one JSON object.

Usage: python bench/learning_quality.py [--packs credit_approval,complaint_handling] [--runs 3]
       [--threads 1] [--episodes 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rlops.model.pack_defaults import derive_defaults  # noqa: E402
from rlops.model.policy import as_act_fn  # noqa: E402
from rlops.model.ppo import train  # noqa: E402
from rlops.sandbox.pack import load_pack  # noqa: E402
from rlops.sandbox.policies import evaluate_policy, load_oracle, random_policy, rule_policy  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT_SEED = 7_000_000  # training uses instance seeds from 0, early stopping 9,000,000 on
REWARD = "v1"
CPU_BUDGET_S = 300.0


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def built_in_packs() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "scenarios").glob("*/oracle.py"))


def baselines(pack: Any, episodes: int) -> dict[str, float]:
    kw = dict(episodes=episodes, seed=HELD_OUT_SEED, reward_fn=REWARD)
    return {
        "oracle": evaluate_policy(pack, load_oracle(pack), **kw).mean_return,
        "rules": evaluate_policy(pack, rule_policy, **kw).mean_return,
        "random": evaluate_policy(pack, random_policy(0), **kw).mean_return,
    }


def one_run(pack: Any, seed: int, base: dict[str, float], episodes: int) -> dict[str, Any]:
    plan = derive_defaults(pack, device="cpu", seed=seed)
    env = pack.make_env(plan.num_envs, reward_fn=REWARD, seed=0)
    cpu0, wall0 = time.process_time(), time.perf_counter()
    result = train(plan.config, env)
    cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
    ev = evaluate_policy(pack, as_act_fn(result.policy), episodes=episodes, seed=HELD_OUT_SEED, reward_fn=REWARD)
    policy = ev.mean_return
    return {
        "seed": seed,
        "policy": policy,
        "gap_closed": (policy - base["rules"]) / (base["oracle"] - base["rules"]),
        "pct_of_oracle": policy / base["oracle"],
        "illegal_actions": int(ev.illegal_actions.sum()),
        "train_cpu_s": cpu_s,
        "train_wall_s": wall_s,
        "steps": result.global_step,
        "stopped_early": result.stopped_early,
        "num_envs": plan.num_envs,
        "num_steps": plan.config.num_steps,
        "gamma": plan.config.gamma,
    }


def bars(r: dict[str, Any], oracle: float) -> dict[str, bool]:
    return {
        "gap_closed>=0.9": r["gap_closed"] >= 0.9,
        "policy>=0.95*oracle": r["pct_of_oracle"] >= 0.95 if oracle > 0 else True,
        "illegal==0": r["illegal_actions"] == 0,
        "cpu<=300s": r["train_cpu_s"] <= CPU_BUDGET_S,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--packs", default=",".join(built_in_packs()))
    ap.add_argument("--runs", type=int, default=3, help="training seeds per pack; the median run is reported")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads; one is the most CPU-efficient for these small tensors and does not spin "
        "when other processes hold the cores",
    )
    ap.add_argument("--episodes", type=int, default=10_000)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = load_average()
    print(f"load average at start: {load_start}; {args.threads} torch threads; {os.cpu_count()} CPUs", flush=True)
    report: dict[str, Any] = {}
    for name in args.packs.split(","):
        pack = load_pack(ROOT / "scenarios" / name)
        base = baselines(pack, args.episodes)
        runs = []
        for seed in range(1, args.runs + 1):
            r = one_run(pack, seed, base, args.episodes)
            runs.append(r)
            print(
                f"{name:20} seed {seed}: policy {r['policy']:.4f}  gap_closed {r['gap_closed']:.3f}  "
                f"{r['pct_of_oracle']:.1%} of oracle  illegal {r['illegal_actions']}  "
                f"{r['steps']:,} steps  {r['train_cpu_s']:.0f} CPU-s ({r['train_wall_s']:.0f} s wall)"
                f"{'  early stop' if r['stopped_early'] else ''}",
                flush=True,
            )
        median = sorted(runs, key=lambda r: r["policy"])[len(runs) // 2]
        ok = bars(median, base["oracle"])
        every_run_ok = all(all(bars(r, base["oracle"]).values()) for r in runs)
        print(
            f"{name:20} oracle {base['oracle']:.4f}  rules {base['rules']:.4f}  random {base['random']:.4f}  "
            f"policy {median['policy']:.4f} (median of {len(runs)})  gap_closed {median['gap_closed']:.3f}  "
            f"{median['pct_of_oracle']:.1%} of oracle  illegal {median['illegal_actions']}  "
            f"CPU {statistics.median(r['train_cpu_s'] for r in runs):.0f} s  "
            f"bars {'PASS' if all(ok.values()) else 'FAIL ' + str([k for k, v in ok.items() if not v])}",
            flush=True,
        )
        report[name] = {
            **{k: round(v, 4) for k, v in base.items()},
            "policy": round(median["policy"], 4),
            "gap_closed": round(median["gap_closed"], 4),
            "pct_of_oracle": round(median["pct_of_oracle"], 4),
            "illegal_actions": median["illegal_actions"],
            "train_cpu_s": round(statistics.median(r["train_cpu_s"] for r in runs), 1),
            "runs": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()} for r in runs],
            "bars": ok,
            "every_run_passes": every_run_ok,
        }
    load_end = load_average()
    print(f"load average at end: {load_end}", flush=True)
    passed = all(all(r["bars"].values()) for r in report.values())
    print(
        json.dumps(
            {
                "packs": report,
                "pass": passed,
                "episodes": args.episodes,
                "threads": args.threads,
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
