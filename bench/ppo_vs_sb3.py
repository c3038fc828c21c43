"""rlops masked PPO on the batched sandbox vs sb3-contrib MaskablePPO on the Gymnasium adapter.

Both learn each pack (credit approval and complaint handling by default; reward v1, sandbox
profile) with the same network width (actor and critic 64-64 tanh) on the same device and torch
thread count; rlops uses its default settings for the pack (``derive_defaults``), nothing tuned.
Reported per peer:

* env-steps/s over its training (evaluation time excluded; rlops trains until it has reached the
  target and done ``--rlops-min-steps``, SB3 until the target or its cap);
* wall time until its greedy policy reaches 95% of the oracle's mean return on held-out episodes
  (checked after every update — each rlops iteration, each SB3 rollout + update — evaluation
  time excluded).

A peer still short of the target at its time cap reports ``null``; the time ratio is then a lower
bound (cap / rlops time), flagged in the JSON. Each pack is run ``--runs`` times (seeds 1, 2, …)
and the median of each ratio is the pack's figure. The machine's load average is printed at the
start and the end.
``--device cuda`` runs rlops with many thousands of envs on the GPU (SB3 stays on the CPU, where it
is fastest for this network); without CUDA it prints a skip line and exits 0.

Usage: python bench/ppo_vs_sb3.py [--packs credit_approval,complaint_handling] [--runs 3]
       [--device cpu|cuda] [--threads 2] [--sb3-cap-s 330]
The last line of output is one JSON object.
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
from rlops.model.ppo import PPOConfig, train  # noqa: E402
from rlops.sandbox.pack import load_pack  # noqa: E402
from rlops.sandbox.policies import evaluate_policy, load_oracle  # noqa: E402

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
EVAL_SEED = 3_000_000  # held out: training uses instance seeds from 0
REWARD, PROFILE = "v1", "sandbox"
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = CLOCKS["wall"]  # set by --clock; ``cpu`` counts this process's CPU seconds, steady under load


def _eval(pack: Any, act: Any, episodes: int, device: str = "cpu") -> float:
    return evaluate_policy(
        pack, act, episodes=episodes, seed=EVAL_SEED, reward_fn=REWARD, profile=PROFILE, device=device
    ).mean_return


def run_rlops(pack: Any, target: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    plan = derive_defaults(pack, device=args.device, seed=seed, total_timesteps=args.rlops_timesteps)
    num_envs = args.num_envs or plan.num_envs
    env = pack.make_env(num_envs=num_envs, reward_fn=REWARD, profile=PROFILE, device=args.device, seed=0)
    cfg = plan.config
    state: dict[str, Any] = {"eval_s": 0.0, "t0": clock(), "hit": None, "ret": None}

    def on_iteration(it: int, policy: Any, m: dict[str, float]) -> bool:
        train_s = clock() - state["t0"] - state["eval_s"]
        t = clock()
        ret = _eval(pack, as_act_fn(policy), args.eval_episodes, args.device)
        state["eval_s"] += clock() - t
        state["ret"] = ret
        if state["hit"] is None and ret >= target:
            state["hit"] = {"s": train_s, "steps": int(m["global_step"]), "return": ret}
        enough = state["hit"] is not None and m["global_step"] >= args.rlops_min_steps
        return enough or train_s > args.rlops_cap_s

    result = train(cfg, env, on_iteration=on_iteration)
    train_s = clock() - state["t0"] - state["eval_s"]
    hit = state["hit"]
    return {
        "sps": result.global_step / train_s,
        "steps": result.global_step,
        "train_s": train_s,
        "s_to_target": hit["s"] if hit else None,
        "steps_to_target": hit["steps"] if hit else None,
        "final_return": state["ret"],
        "num_envs": num_envs,
    }


def run_sb3(pack: Any, target: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.callbacks import BaseCallback

    from rlops.sandbox.gym_adapter import ScenarioGymEnv

    env = ScenarioGymEnv(pack, reward_fn=REWARD, profile=PROFILE, seed=0)
    model = MaskablePPO(
        "MlpPolicy",
        env,
        seed=seed,
        device="cpu",
        verbose=0,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
    )

    def act(benv: Any) -> torch.Tensor:
        a, _ = model.predict(
            benv.observe().cpu().numpy(), action_masks=benv.action_masks().cpu().numpy(), deterministic=True
        )
        return torch.as_tensor(a, dtype=torch.long)

    class Probe(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.t0 = clock()
            self.eval_s, self.hit, self.ret, self.stop = 0.0, None, None, False

        def train_s(self) -> float:
            return clock() - self.t0 - self.eval_s

        def _on_step(self) -> bool:
            return not self.stop and self.train_s() < args.sb3_cap_s

        def _on_rollout_start(self) -> None:
            # Called after every update: the policy evaluated is the one training has produced so far.
            s = self.train_s()
            t = clock()
            self.ret = _eval(pack, act, args.eval_episodes)
            self.eval_s += clock() - t
            if self.ret >= target:
                self.hit = {"s": s, "steps": self.num_timesteps, "return": self.ret}
                self.stop = True

    probe = Probe()
    model.learn(total_timesteps=50_000_000, callback=probe)
    train_s = probe.train_s()
    hit = probe.hit
    return {
        "sps": model.num_timesteps / train_s,
        "steps": model.num_timesteps,
        "train_s": train_s,
        "s_to_target": hit["s"] if hit else None,
        "steps_to_target": hit["steps"] if hit else None,
        "final_return": probe.ret,
    }


def warm_up(pack: Any, args: argparse.Namespace) -> None:
    """One tiny run of each peer before timing, so neither pays one-off costs (lazy imports,
    thread-pool start, first-kernel allocations) inside its measured time."""
    from sb3_contrib import MaskablePPO

    from rlops.sandbox.gym_adapter import ScenarioGymEnv

    env = pack.make_env(num_envs=64, reward_fn=REWARD, profile=PROFILE, device=args.device, seed=10**7)
    train(PPOConfig(device=args.device, total_timesteps=64 * 8 * 2, seed=0), env)
    genv = ScenarioGymEnv(pack, reward_fn=REWARD, profile=PROFILE, seed=10**7)
    MaskablePPO(
        "MlpPolicy",
        genv,
        n_steps=64,
        batch_size=32,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
    ).learn(128)


def fmt(x: Any, spec: str) -> str:
    width = int(spec.split(".")[0].rstrip(",d")) if spec[0].isdigit() else 0
    return f"{'n/a':>{width}}" if x is None else format(x, spec)


def one_pair(pack: Any, target: float, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    rl = run_rlops(pack, target, args, seed)
    print(f"  rlops  ({args.device}, {rl['num_envs']} envs, seed {seed}): {rl}", flush=True)
    sb = run_sb3(pack, target, args, seed)
    print(f"  sb3    (cpu, 1 env, seed {seed}): {sb}", flush=True)
    lower_bound = sb["s_to_target"] is None
    time_ratio = None
    if rl["s_to_target"] is not None:
        time_ratio = (args.sb3_cap_s if lower_bound else sb["s_to_target"]) / rl["s_to_target"]
    return {
        "rl": rl,
        "sb": sb,
        "sps_ratio": rl["sps"] / sb["sps"],
        "time_ratio": time_ratio,
        "lower_bound": lower_bound,
    }


def median_or_none(xs: list[Any]) -> Any:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def bench_pack(name: str, args: argparse.Namespace) -> dict[str, Any]:
    pack = load_pack(SCENARIOS / name)
    oracle = _eval(pack, load_oracle(pack), args.eval_episodes)
    target = 0.95 * oracle
    print(
        f"{name}: oracle return {oracle:.4f} on {args.eval_episodes} held-out episodes; target {target:.4f}", flush=True
    )
    warm_up(pack, args)
    pairs = [one_pair(pack, target, args, seed) for seed in range(1, args.runs + 1)]
    med = {
        k: median_or_none([p["rl"][k] for p in pairs])
        for k in ("sps", "s_to_target", "steps_to_target", "final_return")
    }
    med_sb = {
        k: median_or_none([p["sb"][k] for p in pairs])
        for k in ("sps", "s_to_target", "steps_to_target", "final_return")
    }
    sps_ratio = statistics.median(p["sps_ratio"] for p in pairs)
    time_ratio = median_or_none([p["time_ratio"] for p in pairs])
    lower_bound = any(p["lower_bound"] for p in pairs)
    print(f"\n{name} (median of {len(pairs)} runs){'':6}{'rlops':>14}{'sb3':>14}{'ratio':>12}")
    print(f"{'env-steps/s':40}{med['sps']:>14,.0f}{med_sb['sps']:>14,.0f}{sps_ratio:>11.1f}x")
    print(
        f"{'s to 95% of oracle':40}{fmt(med['s_to_target'], '14.2f')}{fmt(med_sb['s_to_target'], '14.2f')}"
        f"{('>' if lower_bound else ' ') + fmt(time_ratio, '.1f') + 'x':>12}"
    )
    print(
        f"{'steps to target':40}{fmt(med['steps_to_target'], '14,.0f')}{fmt(med_sb['steps_to_target'], '14,.0f')}"
        f"{'(lower bound)' if lower_bound else '':>14}"
    )
    print(
        f"{'final greedy return':40}{fmt(med['final_return'], '14.4f')}{fmt(med_sb['final_return'], '14.4f')}\n",
        flush=True,
    )
    return {
        "rlops_sps": round(med["sps"], 1),
        "sb3_sps": round(med_sb["sps"], 1),
        "sps_ratio": round(sps_ratio, 1),
        "rlops_s_to_target": None if med["s_to_target"] is None else round(med["s_to_target"], 2),
        "sb3_s_to_target": None if med_sb["s_to_target"] is None else round(med_sb["s_to_target"], 2),
        "time_ratio": None if time_ratio is None else round(time_ratio, 1),
        "time_ratio_is_lower_bound": lower_bound,
        "oracle_return": round(oracle, 4),
        "rlops_steps_to_target": med["steps_to_target"],
        "sb3_steps_to_target": med_sb["steps_to_target"],
        "runs": [
            {
                "sps_ratio": round(p["sps_ratio"], 1),
                "time_ratio": None if p["time_ratio"] is None else round(p["time_ratio"], 1),
                "rlops_s_to_target": p["rl"]["s_to_target"],
                "sb3_s_to_target": p["sb"]["s_to_target"],
                "rlops_sps": round(p["rl"]["sps"], 1),
                "sb3_sps": round(p["sb"]["sps"], 1),
            }
            for p in pairs
        ],
        "bars": {"sps_ratio>=200": sps_ratio >= 200, "time_ratio>=100": time_ratio is not None and time_ratio >= 100},
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--packs", default="credit_approval,complaint_handling")
    p.add_argument("--runs", type=int, default=3, help="runs per pack (seeds 1..runs); medians are reported")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--num-envs", type=int, default=None, help="rlops envs (default: derived from the pack)")
    p.add_argument("--rlops-timesteps", type=int, default=1_000_000, help="PPOConfig.total_timesteps (LR schedule)")
    p.add_argument(
        "--rlops-min-steps",
        type=int,
        default=300_000,
        help="rlops keeps training after the target until this many steps (for its steps/s)",
    )
    p.add_argument("--rlops-cap-s", type=float, default=150.0)
    p.add_argument("--sb3-cap-s", type=float, default=330.0)
    p.add_argument("--eval-episodes", type=int, default=4096)
    p.add_argument(
        "--clock",
        default="wall",
        choices=sorted(CLOCKS),
        help="what 's to target' and the caps count: wall seconds, or CPU seconds of this process "
        "(a fair measure on a loaded machine; use --threads 1 with it)",
    )
    args = p.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.device == "cuda" and not torch.cuda.is_available():
        print("skipped: --device cuda but no CUDA device is present")
        print(json.dumps({"skipped": True, "reason": "no CUDA device", "device": "cuda"}))
        return 0
    torch.set_num_threads(args.threads)
    load_start = load_average()
    print(
        f"load average at start: {load_start}; {args.threads} torch threads; {os.cpu_count()} CPUs; {args.clock} clock",
        flush=True,
    )
    packs = {name: bench_pack(name, args) for name in args.packs.split(",")}
    load_end = load_average()
    print(f"load average at end: {load_end}", flush=True)
    print(
        json.dumps(
            {
                "packs": packs,
                "sb3_cap_s": args.sb3_cap_s,
                "device": args.device,
                "threads": args.threads,
                "clock": args.clock,
                "runs": args.runs,
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
