"""How often the champion return anomaly alarms in a world that does not change.

The drift check's return anomaly (:mod:`rlops.pipeline_steps.drift.anomaly`) makes an hour a
*suspect* when its live mean episode return falls ``drift.anomaly_z`` standard errors below the
calibrated sandbox's and below the level before (the same policy's last checks pooled), and raises
the alarm only when the next check confirms the fall (``drift.anomaly_confirm``). This bench runs a
fixed policy (the pack's oracle, or its rule engine) for ``--hours`` independent hours of
``--episodes`` episodes in the pack's production stand-in (its ``live`` profile, where it has one),
rolls the sandbox baseline once (``drift.baseline_episodes`` episodes of its sandbox profile), and
feeds the hours in order through the product's stateful verdict, ``return_anomaly``, carrying its
state from check to check as the drift monitor does, at each ``--z`` — with the confirmation of
``params.yaml`` and, side by side, without it (``anomaly_confirm: none``). Nothing changes between
the hours, so every alarm is a false one. Reported per row: the alarms, the suspects, the alarms'
share of the checks with a 95% Clopper–Pearson upper bound, and the hours between false alarms
that share means. Consecutive checks share hours, so the bound is approximate. Also: the spread of
the hourly means against their mean standard error (≈ 1 when episodes are independent draws, as
the test assumes).

Usage: python bench/anomaly_false_alarms.py [--pack credit_approval] [--policy oracle|rules]
       [--hours 400] [--episodes 1000] [--z 2.5,3]
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import scipy.stats

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.common.config import load_params  # noqa: E402
from rlops.pipeline_steps.drift.anomaly import AnomalyRule, AnomalyState, ReturnSummary, return_anomaly  # noqa: E402
from rlops.sandbox.pack import load_pack  # noqa: E402
from rlops.sandbox.policies import evaluate_policy, load_oracle, rule_policy  # noqa: E402
from rlops.sandbox.profiles import default_profile  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HOUR_SEED = 10**7  # hour h uses instance seeds HOUR_SEED + h·episodes …; the baseline's are disjoint
BASELINE_SEED = 10**9
POLICY = "fixed-policy"


def hourly_returns(
    pack: Any, act: Any, hours: int, episodes: int, profile: str, reward: str, block: int = 20
) -> list[np.ndarray]:
    """Each hour's episode returns, from disjoint seeds: independent hours of one unchanged world.
    Episode ``j`` of hour ``h`` has seed ``HOUR_SEED + h·episodes + j`` however the hours are
    batched; ``block`` hours are rolled in one batch (a wider batch runs faster per episode)."""
    out: list[np.ndarray] = []
    for h0 in range(0, hours, block):
        n = min(block, hours - h0)
        r = evaluate_policy(
            pack, act, episodes=n * episodes, seed=HOUR_SEED + h0 * episodes, reward_fn=reward, profile=profile
        ).returns.numpy()
        out.extend(np.split(r, n))
    return out


def summarise(hours: list[np.ndarray]) -> list[ReturnSummary]:
    """Each hour's returns as the drift check keeps them (one run key per hour)."""
    return [ReturnSummary.of(r, POLICY, f"hour-{i}") for i, r in enumerate(hours)]


def false_alarms(hours: list[ReturnSummary], sandbox: ReturnSummary, rule: AnomalyRule) -> dict[str, Any]:
    """The product's verdicts on the hours in order (the state carried from check to check), counted."""
    alarms = suspects = 0
    state = AnomalyState()
    for live in hours:
        verdict, state = return_anomaly(live, sandbox, state, rule)
        alarms += verdict.anomaly
        suspects += verdict.suspect
    checks = len(hours) - 1  # the first hour has nothing to compare with
    rate = alarms / checks
    upper = float(scipy.stats.beta.ppf(0.975, alarms + 1, checks - alarms)) if alarms < checks else 1.0
    return {
        "z": rule.z,
        "confirm": rule.confirm,
        "confirm_z": rule.confirm_z if rule.confirm != "none" else None,
        "level_hours": rule.level_hours,
        "checks": checks,
        "alarms": alarms,
        "suspects": suspects,
        "rate": rate,
        "rate_upper_95": upper,
        "hours_between_alarms": None if alarms == 0 else checks / alarms,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", default="credit_approval", help="a pack under scenarios/, or a pack directory")
    ap.add_argument(
        "--policy", default=None, choices=["oracle", "rules"], help="default: the oracle if the pack has one"
    )
    ap.add_argument("--hours", type=int, default=400)
    ap.add_argument("--episodes", type=int, default=1000, help="live episodes per hour")
    ap.add_argument("--z", default=None, help="comma-separated drift.anomaly_z values (default: params.yaml's, 3)")
    ap.add_argument("--reward", default="v1")
    args = ap.parse_args(argv)
    if args.hours < 2 or args.episodes < 2:
        ap.error("--hours and --episodes must each be at least 2 (a check compares two hours of episodes)")
    load_start = report_load("start")
    drift = load_params(REPO / "params.yaml")["drift"]
    pack_dir = Path(args.pack) if Path(args.pack).is_dir() else REPO / "scenarios" / args.pack
    pack = load_pack(pack_dir)
    oracle = load_oracle(pack)
    policy = args.policy or ("oracle" if oracle is not None else "rules")
    if policy == "oracle" and oracle is None:
        ap.error(f"pack {pack.name} has no oracle.py: use --policy rules")
    act = oracle if policy == "oracle" and oracle is not None else rule_policy
    live_profile, sandbox_profile = default_profile(pack, "production"), default_profile(pack, "sandbox")
    t0 = time.perf_counter()
    base = evaluate_policy(
        pack,
        act,
        episodes=int(drift["baseline_episodes"]),
        seed=BASELINE_SEED,
        reward_fn=args.reward,
        profile=sandbox_profile,
    ).returns.numpy()
    hours = hourly_returns(pack, act, args.hours, args.episodes, live_profile, args.reward)
    rollout_s = time.perf_counter() - t0
    summaries = summarise(hours)
    means = np.array([h.mean for h in summaries])
    ses = np.array([math.sqrt(h.var / h.episodes) for h in summaries])
    spread = float(means.std(ddof=1))
    sandbox = ReturnSummary.of(base, POLICY, "baseline")
    configured = AnomalyRule.of(SimpleNamespace(**drift))
    zs = [float(z) for z in args.z.split(",")] if args.z else sorted({configured.z, 3.0})
    rules = [replace(configured, z=z, confirm=c) for z in zs for c in dict.fromkeys((configured.confirm, "none"))]
    rows = [false_alarms(summaries, sandbox, rule) for rule in rules]
    print(
        f"{pack.name}, {policy} policy: {args.hours} stable hours of {args.episodes} episodes ({live_profile} "
        f"profile) against a {len(base)}-episode {sandbox_profile} baseline; rollouts {rollout_s:.1f} s"
    )
    print(
        f"live mean return {means.mean():.4f}, sandbox {base.mean():.4f}; spread of the hourly means "
        f"{spread:.4f} against their mean standard error {ses.mean():.4f} (ratio {spread / ses.mean():.2f})"
    )
    print(f"\n{'z':>5}{'confirm':>11}{'suspects':>10}{'alarms':>8}{'rate':>10}{'95% upper':>11}{'hours between':>15}")
    for r in rows:
        between = "none" if r["hours_between_alarms"] is None else f"{r['hours_between_alarms']:.0f}"
        print(
            f"{r['z']:>5}{r['confirm']:>11}{r['suspects']:>10}{r['alarms']:>8}{r['rate']:>10.3%}"
            f"{r['rate_upper_95']:>11.3%}{between:>15}"
        )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "pack": pack.name,
                "policy": policy,
                "hours": args.hours,
                "episodes_per_hour": args.episodes,
                "live_profile": live_profile,
                "sandbox_profile": sandbox_profile,
                "live_mean_return": round(float(means.mean()), 4),
                "sandbox_mean_return": round(float(base.mean()), 4),
                "hourly_mean_spread": round(spread, 4),
                "mean_standard_error": round(float(ses.mean()), 4),
                "default_rule": asdict(configured),
                "default_alarms": next(
                    (r["alarms"] for r, rule in zip(rows, rules, strict=True) if rule == configured), None
                ),
                "by_rule": rows,
                "rollout_s": round(rollout_s, 1),
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
