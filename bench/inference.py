"""Serving latency of the policy network on CPU: one decision at batch 1 (eager ``act`` and the
``torch.export`` program) and throughput at batch 1024.

The network has the credit-approval pack's observation layout and the training default width.
Bar: p99 of one eager decision < 1 ms. The last line of output is one JSON object.

Usage: python bench/inference.py [--threads 1] [--iters 5000]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.model.policy import PolicyConfig, PolicyNetwork  # noqa: E402
from rlops.model.policy_io import export_policy, load_exported  # noqa: E402
from rlops.sandbox.pack import load_pack  # noqa: E402

PACK = Path(__file__).resolve().parent.parent / "scenarios" / "credit_approval"


def _latencies(fn: Callable[[], object], iters: int) -> list[float]:
    for _ in range(min(200, iters)):
        fn()
    out = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return sorted(out)


def _pct(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1, help="torch threads (a serving worker usually has one)")
    p.add_argument("--iters", type=int, default=5000)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    pack = load_pack(PACK)
    env = pack.make_env(num_envs=1024, reward_fn="v1", profile="sandbox", seed=0)
    obs_batch = env.observe()
    torch.manual_seed(0)
    policy = PolicyNetwork(PolicyConfig.from_layout(env.layout)).eval()
    with tempfile.TemporaryDirectory() as d:
        export_policy(policy, Path(d) / "policy.pt2")
        exported = load_exported(Path(d) / "policy.pt2")
    one = obs_batch[0]
    one_b = obs_batch[:1]
    assert torch.equal(exported(one_b)[0], policy.act(one_b, deterministic=True).action)

    with torch.inference_mode():
        eager = _latencies(lambda: policy.act(one, deterministic=True), args.iters)
        exp = _latencies(lambda: exported(one_b), args.iters)
        n_batches = max(args.iters // 50, 20)
        t = time.perf_counter()
        for _ in range(n_batches):
            policy.act(obs_batch, deterministic=True)
        per_s = n_batches * obs_batch.shape[0] / (time.perf_counter() - t)

    res = {
        "p50_ms": round(_pct(eager, 0.50), 4),
        "p99_ms": round(_pct(eager, 0.99), 4),
        "exported_p50_ms": round(_pct(exp, 0.50), 4),
        "exported_p99_ms": round(_pct(exp, 0.99), 4),
        "batch1024_per_s": round(per_s),
        "mean_ms": round(statistics.fmean(eager), 4),
        "parameters": policy.num_parameters(),
        "threads": args.threads,
    }
    print(f"policy: {policy.num_parameters()} parameters, obs dim {env.layout.dim}, {args.threads} torch thread(s)")
    print(f"{'':22}{'p50 ms':>10}{'p99 ms':>10}")
    print(f"{'eager act, batch 1':22}{res['p50_ms']:>10.3f}{res['p99_ms']:>10.3f}")
    print(f"{'torch.export, batch 1':22}{res['exported_p50_ms']:>10.3f}{res['exported_p99_ms']:>10.3f}")
    print(f"batch 1024 (eager): {per_s:,.0f} decisions/s;  p99 < 1 ms: {'yes' if res['p99_ms'] < 1.0 else 'NO'}")
    res.update(load_average_start=load_start, load_average_end=report_load("end"))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
