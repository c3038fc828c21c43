"""Promotion-to-agent latency: how long a running ``PolicyClient`` takes to serve a version after its
alias moves in a real MLflow registry (SQLite), beside the peer — picking the promotion up by
restarting the agent's client.

Each trial moves ``champion`` (v1 → v2 → v1 …: promotions, then rollbacks to a version loaded before)
while the client decides a request every ``--request-every-ms``; the latency is from the alias move
to the first decision served by the new version (``PolicyClient.promotion_to_agent_s``, on the
client's monotonic clock). The bar: at most one poll period plus the load. Also the decision
latency while the poller runs. The last line of output is one JSON object.

Usage: python bench/policy_follow.py [--period 5] [--trials 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402

SCENARIO = "credit_approval"
PACK = Path(__file__).resolve().parent.parent / "scenarios" / SCENARIO
STATE = {
    "user_profile": {"age": 30, "income_monthly": 9000.0, "employment": "salaried", "region": "guangdong"},
    "application": {"loan_amount": 30000.0, "purpose": "car", "term_months": 12},
    "system_status": {"fraud_check_done": False, "credit_report_fetched": False},
    "decision": {"approval_result": "pending", "approved_amount": 0.0, "notified": False},
}


def _register(ctx: Any, pack: Any, prefs: dict[str, float]) -> str:
    import torch

    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.pipeline_steps.training.candidate import register_policy

    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout))
    with torch.no_grad():  # a network whose greedy choice follows ``prefs``
        net.actor[-1].weight.zero_()
        net.actor[-1].bias.copy_(torch.tensor([prefs.get(a, 0.0) for a in pack.scenario.action_names]))
    with ctx.tracker.start_run("bench-policy") as run, tempfile.TemporaryDirectory() as tmp:
        return str(register_policy(ctx, run, pack, net.eval(), {"mode": "full"}, Path(tmp)))


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--period", type=float, default=5.0, help="refresh_every_s of the client")
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--request-every-ms", type=float, default=20.0)
    args = p.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="rlops-bench-follow-"))
    os.environ.update(
        {
            "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}",
            "RLOPS_ARTIFACT_ROOT": str(work / "artifacts"),
            "RLOPS_STORAGE_ROOT": f"file://{work / 'storage'}",
        }
    )
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import load_pack

    ctx = StepContext.create(SCENARIO, run_key="20260105T1000")
    pack = load_pack(PACK, check_liveness=False)
    name = f"{SCENARIO}-policy"
    v1 = _register(ctx, pack, {"fetch_credit_report": 3, "initiate_fraud_check": 2})
    v2 = _register(ctx, pack, {"initiate_fraud_check": 3, "fetch_credit_report": 2})
    ctx.tracker.set_alias(name, "champion", v1)
    uri = os.environ["MLFLOW_TRACKING_URI"]

    latencies: list[float] = []
    decide_ms: list[float] = []
    with PolicyClient(uri, SCENARIO, PACK, timeout_ms=1000, refresh_every_s=args.period) as client:
        current = v1
        for trial in range(args.trials):
            time.sleep(args.period * (0.25 + 0.5 * (trial % 3) / 2))  # the move lands anywhere in a period
            target = v2 if current == v1 else v1
            moved_at = time.monotonic()
            ctx.tracker.set_alias(name, "champion", target)
            deadline = moved_at + args.period * 3 + 60
            while True:
                t = time.perf_counter()
                d = client.decide(STATE, key="bench")
                decide_ms.append((time.perf_counter() - t) * 1e3)
                if d.policy_version == f"{name}/{target}":
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"trial {trial}: v{target} never served")
                time.sleep(args.request_every_ms / 1000.0)
            lat = client.promotion_to_agent_s(target, moved_at)
            assert lat is not None
            latencies.append(lat)
            print(f"trial {trial}: champion → v{target}: first served {lat:.2f} s after the move", flush=True)
            current = target
        fallbacks = client.fallback_count

    restarts: list[float] = []  # the peer: a new client (an agent restart) serving its first decision
    for _ in range(3):
        t0 = time.monotonic()
        with PolicyClient(uri, SCENARIO, PACK, timeout_ms=1000, refresh_every_s=None) as fresh:
            fresh.decide(STATE, key="bench")
        restarts.append(time.monotonic() - t0)
    load_end = report_load("end")
    out = {
        "bench": "policy_follow",
        "period_s": args.period,
        "trials": args.trials,
        "promotion_to_agent_s_max": round(max(latencies), 3),
        "promotion_to_agent_s_median": round(statistics.median(latencies), 3),
        "promotion_to_agent_s": [round(x, 3) for x in latencies],
        "bar_s": args.period + 5.0,
        "bar_met": max(latencies) <= args.period + 5.0,
        "restart_s_median": round(statistics.median(restarts), 3),
        "decide_ms_p50": round(_pct(decide_ms, 0.5), 3),
        "decide_ms_p99": round(_pct(decide_ms, 0.99), 3),
        "decisions": len(decide_ms),
        "fallbacks": fallbacks,
        "load_average_start": load_start,
        "load_average_end": load_end,
    }
    print(json.dumps(out))
    return 0 if out["bar_met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
