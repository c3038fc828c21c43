"""Benchmark: off-policy evaluation against the truth the sandbox knows.

The production world is the credit pack's ``live`` profile with an outcome event in force
(applicants aged 60 and over default 2.5 times as often — ``rlops.timeline.events``);
the calibrated sandbox is the pack itself, which does not see it. The champion — a network cloned
from the rule engine — serves ``--logged`` live episodes in the production world through an
exploring logger (its greedy action, or with probability ``--explore`` a random legal one), which
records each served action's propensity on the trace row, as a production client does. Each
candidate is judged on its own logged traffic (independent episodes): estimates that shared one log
would err together, and their coverage would count one draw.

Candidates: the champion and copies of it with Gaussian noise on every weight (scales 0.02 … 0.5,
several seeds) — ``--candidates`` policies that decide more and more differently. For each:

* truth — the candidate's mean return over ``--truth-episodes`` episodes rolled in the production
  world itself (greedy, as it would serve), on its own seeds: a truth sample shared by every
  candidate errs the same way for all of them (the candidates are near copies deciding on the same
  applicants), and the coverage count would then rest on one draw of it;
* sandbox-only estimate — the same in the calibrated sandbox (what the sandbox gates see);
* PDIS, WIS and DR (direct method: Q fitted on sandbox rollouts) on the logged traffic, with 95 %
  intervals (normal for PDIS/DR, bootstrap for WIS).

Figures: mean absolute error of each estimate; DR's interval coverage of the truth (bar: ≥ 92 %),
where the truth is itself a sample mean: an interval covers when ``|DR − truth| ≤ z·√(se² +
se_truth²)`` (the raw ``low ≤ truth ≤ high`` is printed beside it; with 20,000 truth episodes and
4,000 logged ones se_truth is about 0.3 se, so a calibrated interval covers a noisy truth ~94 % of
the time); the mean and spread of the standardised errors ``(DR − truth)/√(se² + se_truth²)``
(≈ 0 and 1 for a calibrated interval); the ESS; and the gate's decisions (``ope:dr`` fails when
DR's upper bound is below the logged policy's live return − ``ope.tolerance``): how many true
improvements on the logged policy pass and how many candidates more than the tolerance worse fail.
The LAST line is one JSON object; the load average is printed at start and end.

    python bench/ope.py [--candidates 24] [--logged 4000] [--truth-episodes 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.stats
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.common.config import REPO_ROOT  # noqa: E402
from rlops.model.policy import PolicyConfig, PolicyNetwork  # noqa: E402
from rlops.pipeline_steps.promotion.ope import OPEConfig  # noqa: E402
from rlops.pipeline_steps.promotion.ope_direct import exploring_policy, sandbox_q  # noqa: E402
from rlops.pipeline_steps.promotion.ope_gate import network_target, off_policy_value, ope_gate_row  # noqa: E402
from rlops.sandbox.pack import Pack, load_pack  # noqa: E402
from rlops.sandbox.policies import evaluate_policy, rule_policy  # noqa: E402
from rlops.sandbox.traces import rollout_traces  # noqa: E402
from rlops.timeline.events import parse_events, production_doc  # noqa: E402

OUTCOME_EVENT = {
    "at_hour": 0,
    "kind": "outcome",
    "field": "hidden.default_prob",
    "factor": 2.5,
    "when": "user_profile.age >= 60",
}
TRUTH_SEED = 20_000_000  # candidate i: its own block; the logged seeds end below 11,000,000
SCALES = (0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5)


def production_world(pack_dir: Path, root: Path) -> Pack:
    doc = production_doc(yaml.safe_load((pack_dir / "scenario.yaml").read_text()), parse_events([OUTCOME_EVENT]))
    folder = root / "production"
    shutil.copytree(pack_dir, folder)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_pack(folder, check_liveness=False)


def cloned_rules(pack: Pack, seed: int = 0, steps: int = 400) -> PolicyNetwork:
    """A network trained to imitate the rule engine on sandbox states (the champion)."""
    torch.manual_seed(seed)
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout))
    env = pack.make_env(2048, illegal_action="noop")
    obs, masks, labels = [], [], []
    env.reset(seed)
    for _ in range(pack.scenario.spec.horizon):
        a = rule_policy(env)
        obs.append(env.observe().clone()), masks.append(env.action_masks().clone()), labels.append(a)
        env.step(a)
    x, m, y = torch.cat(obs), torch.cat(masks), torch.cat(labels)
    net.update_obs_stats(x)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        logp, _ = net(x, m)
        loss = torch.nn.functional.nll_loss(logp, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()


def noisy(net: PolicyNetwork, scale: float, seed: int) -> PolicyNetwork:
    out = PolicyNetwork(net.config)
    out.load_state_dict(net.state_dict())
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g) * (p.std() if p.numel() > 1 else 1.0))
    return out.eval()


def greedy_returns(pack: Pack, net: PolicyNetwork, episodes: int, seed: int) -> np.ndarray:
    """The candidate's episode returns, greedy as it would serve."""
    target = network_target(net, greedy=True)
    act = lambda env: torch.as_tensor(target(env.observe(), env.action_masks())).argmax(1)  # noqa: E731
    res = evaluate_policy(pack, act, episodes=episodes, seed=seed, profile="live", reward_fn="v1")
    out: np.ndarray = res.returns.numpy()
    return out


def covers(value: float, se: float, truth: float, truth_se: float, z: float) -> bool:
    """The interval ``value ± z·se`` covers a truth that is itself a mean with standard error ``truth_se``."""
    return abs(value - truth) <= z * math.hypot(se, truth_se)


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--candidates", type=int, default=24)
    ap.add_argument("--logged", type=int, default=4000, help="logged live episodes")
    ap.add_argument("--explore", type=float, default=0.2, help="the logger's share of random legal actions")
    ap.add_argument("--truth-episodes", type=int, default=20000)
    ap.add_argument("--dm-episodes", type=int, default=1000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    pack_dir = REPO_ROOT / "scenarios" / "credit_approval"
    sandbox = load_pack(pack_dir)
    with tempfile.TemporaryDirectory(prefix="rlops-bench-ope-") as tmp:
        prod = production_world(pack_dir, Path(tmp))
        champion = cloned_rules(sandbox)
        cfg = OPEConfig(min_episodes=1, min_ess=1)
        z = float(scipy.stats.norm.ppf(0.5 + cfg.confidence / 2))
        rows = []
        for i in range(args.candidates):
            # Each candidate is judged on its own logged traffic (another hour of it): estimates that
            # shared one log would err together, and coverage over them would count one draw.
            logger = exploring_policy(network_target(champion, greedy=True), args.explore, seed=1 + i)
            logged = rollout_traces(
                prod,
                logger,
                args.logged,
                seed=50_000 + 100_000 * i,
                profile="live",
                reward_fn="v1",
                source="live",
                episode_prefix=f"live-{i}",
            )
            scale = SCALES[i % len(SCALES)]
            net = champion if scale == 0 and i == 0 else noisy(champion, scale or 0.01, seed=100 + i)
            target = network_target(net, greedy=True)
            true_returns = greedy_returns(prod, net, args.truth_episodes, seed=TRUTH_SEED + i * args.truth_episodes)
            truth, truth_se = float(true_returns.mean()), float(true_returns.std(ddof=1) / math.sqrt(true_returns.size))
            sim = float(greedy_returns(sandbox, net, args.truth_episodes // 4, seed=3_000_000).mean())
            q = sandbox_q(
                sandbox,
                target,
                episodes=args.dm_episodes,
                explore=0.3,
                ridge=1.0,
                profile="live",
                reward_label="v1",
                seed=i,
            )
            res = off_policy_value(sandbox, logged, target, cfg, q)
            est = res.estimates
            rows.append(
                {
                    "candidate": i,
                    "scale": scale,
                    "truth": truth,
                    "truth_se": truth_se,
                    "sandbox": sim,
                    **{k: e.value for k, e in est.items()},
                    "dr_low": est["dr"].low,
                    "dr_high": est["dr"].high,
                    "dr_covers": covers(est["dr"].value, est["dr"].se, truth, truth_se, z),
                    "dr_raw_covers": est["dr"].covers(truth),
                    "dr_z": (est["dr"].value - truth) / math.hypot(est["dr"].se, truth_se),
                    "logged_return": res.logged_return,
                    "gate": ope_gate_row(res, cfg).status,
                    "pdis_covers": est["pdis"].covers(truth),
                    "wis_covers": est["wis"].covers(truth),
                    "ess": res.ess,
                    "agreement": res.agreement,
                }
            )
            r = rows[-1]
            print(
                f"#{i:02d} noise {scale:<4g} truth {truth:+.3f} sandbox {sim:+.3f} DR {r['dr']:+.3f} "
                f"[{r['dr_low']:+.3f}, {r['dr_high']:+.3f}] {'covers' if r['dr_covers'] else 'MISSES'} "
                f"PDIS {r['pdis']:+.3f} WIS {r['wis']:+.3f} ESS {res.ess:.0f} agree {res.agreement:.0%}",
                flush=True,
            )
    truths = np.array([r["truth"] for r in rows])
    err = {k: float(np.mean(np.abs(np.array([r[k] for r in rows]) - truths))) for k in ("sandbox", "pdis", "wis", "dr")}
    coverage = {k: float(np.mean([r[f"{k}_covers"] for r in rows])) for k in ("dr", "dr_raw", "pdis", "wis")}
    dr_z = np.array([r["dr_z"] for r in rows])
    logged = np.array([r["logged_return"] for r in rows])
    better, worse = truths > logged, truths < logged - OPEConfig().tolerance
    gates = np.array([r["gate"] for r in rows])
    gate = {
        "true_improvements": int(better.sum()),
        "true_improvements_passed": int((better & (gates == "pass")).sum()),
        "worse_than_tolerance": int(worse.sum()),
        "worse_than_tolerance_failed": int((worse & (gates == "fail")).sum()),
    }
    print(
        f"mean |error|: sandbox-only {err['sandbox']:.4f}, PDIS {err['pdis']:.4f}, WIS {err['wis']:.4f}, "
        f"DR {err['dr']:.4f}; 95% coverage DR {coverage['dr']:.1%} (bar ≥ 92%; raw low ≤ truth ≤ high "
        f"{coverage['dr_raw']:.1%}); standardised DR errors mean {dr_z.mean():+.2f} sd {dr_z.std(ddof=1):.2f}; "
        f"gate: {gate['true_improvements_passed']}/{gate['true_improvements']} true improvements pass, "
        f"{gate['worse_than_tolerance_failed']}/{gate['worse_than_tolerance']} worse candidates fail"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "candidates": len(rows),
                "logged_episodes": args.logged,
                "explore": args.explore,
                "mean_abs_error": {k: round(v, 4) for k, v in err.items()},
                "coverage_95": {k: round(v, 3) for k, v in coverage.items()},
                "dr_coverage_bar": 0.92,
                "passed": coverage["dr"] >= 0.92,
                "dr_standardised_error": {
                    "mean": round(float(dr_z.mean()), 3),
                    "sd": round(float(dr_z.std(ddof=1)), 3),
                },
                "gate": gate,
                "median_ess": round(float(np.median([r["ess"] for r in rows])), 1),
                "wall_s": round(time.monotonic() - t0, 1),
                "loadavg_start": load_start,
                "loadavg_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
