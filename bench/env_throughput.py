"""Environment throughput: the batched sandbox at 1, 64 and 4096 episodes vs the same pack
stepped one episode at a time through the Gymnasium adapter, in one run.

Both sides take uniformly random legal actions. Bars: >= 1,000,000 steps/s at 4096 envs on 2 CPU
cores, >= 100x the one-at-a-time path, peak RSS < 500 MB at 4096 envs. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.sandbox.gym_adapter import ScenarioGymEnv  # noqa: E402
from rlops.sandbox.pack import load_pack  # noqa: E402


def batched_steps_per_s(pack, n: int, seconds: float, device: str) -> float:
    env = pack.make_env(n, device=device, seed=0)
    gen = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        masks = env.action_masks()
        noise = torch.rand(masks.shape, generator=gen, device=device)
        env.step(torch.where(masks, noise + 1.0, torch.zeros_like(noise)).argmax(dim=1))

    for _ in range(20):  # warm-up
        step()
    # The median of one-second windows: a 2-core machine has neighbours, and one burst of theirs
    # should not decide the figure either way.
    rates = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(rates) < 3:
        steps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 1.0:
            for _ in range(10):
                step()
            steps += 10 * n
        if device == "cuda":
            torch.cuda.synchronize()
        rates.append(steps / (time.perf_counter() - t0))
    return float(np.median(rates))


def gym_steps_per_s(pack, seconds: float) -> float:
    env = ScenarioGymEnv(pack, seed=0)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    steps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        legal = np.flatnonzero(env.action_masks())
        _, _, term, trunc, _ = env.step(int(rng.choice(legal)))
        if term or trunc:
            env.reset()
        steps += 1
    return steps / (time.perf_counter() - t0)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def main() -> None:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pack", default="scenarios/credit_approval")
    ap.add_argument("--seconds", type=float, default=5.0, help="measuring time per configuration")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--sizes", default="1,64,4096")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; the env is op-overhead bound, one thread avoids the "
        "parallel-region cost and leaves the second core to the learner",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    pack = load_pack(args.pack)
    sizes = [int(s) for s in args.sizes.split(",")]
    sps = {}
    for n in sizes:
        sps[str(n)] = batched_steps_per_s(pack, n, args.seconds, args.device)
        print(f"batched  {n:>6} envs: {sps[str(n)]:>14,.0f} steps/s", flush=True)
    rss = peak_rss_mb()
    gym_sps = gym_steps_per_s(pack, args.seconds)
    print(f"gym      1 env at a time: {gym_sps:>8,.0f} steps/s", flush=True)
    largest = str(max(sizes))
    ratio = sps[largest] / gym_sps
    print(
        f"ratio at {largest} envs: {ratio:,.1f}x  (bar: >= 100x, >= 1,000,000 steps/s); peak RSS {rss:.0f} MB "
        f"(bar: < 500 MB)  torch threads: {torch.get_num_threads()}"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "steps_per_s": {k: round(v) for k, v in sps.items()},
                "gym_steps_per_s": round(gym_sps),
                "ratio": round(ratio, 1),
                "peak_rss_mb": round(rss, 1),
                "device": args.device,
                "torch_threads": torch.get_num_threads(),
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )


if __name__ == "__main__":
    main()
