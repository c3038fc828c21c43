"""Benchmark: the off-policy gate against the truth the production world knows, at the product's
defaults — can it refuse a worse candidate and pass a better one, on a credit return and on a
click rate alike?

The production world is the pack's ``live`` profile (for the credit pack with an outcome event in
force: applicants aged 60 and over default 2.5 times as often — ``rlops.timeline.events``); the
calibrated sandbox is the pack itself, which does not see it. The incumbent — a network cloned
from the rule engine — serves ``--logged`` live episodes through a policy client's decision rule
at the default exploration (``exploration.share`` of its decisions drawn from
``exploration.distribution``), recording each served action's true propensity. Each candidate is
judged on its own logged traffic (another hour of it), so the coverage counts independent draws.

Candidates on both sides of the incumbent: on a share ``f`` of the states (a fixed hash of the
observation), a candidate decides as a *direction* policy — the pack's oracle cloned (better) or a
random policy cloned (worse) — and elsewhere as the incumbent; ``f`` runs from 0.05 to 0.4, the
retrains near the incumbent that off-policy evaluation can judge (one that decides otherwise on
most states has no support in traffic explored at the default share: the canary's case). Each is
judged as it will serve (``ope.target: serving``: its greedy choice plus the same exploration).

For each candidate: the truth — its mean return over ``--truth-episodes`` episodes served in the
production world on its own seeds; PDIS, WIS, DR, SNDR and switch DR with their 95 % intervals;
the ``ope:dr`` gate at the default settings (pass / fail / insufficient). Figures: DR's coverage
of the truth (the truth's own standard error counted, ``|DR − truth| ≤ z·√(se² + se_truth²)``; bar
≥ 92 %), and the gate on the candidates worse than the incumbent by more than twice the tolerance's
margin (bar: ≥ 90 % refused) and on those better than it (bar: ≥ 90 % passed), with how many of
each the evidence held as insufficient. The LAST line is one JSON object; the load average is
printed at start and end.

    python bench/ope.py [--pack credit_approval] [--candidates 100] [--logged 20000] [--truth-episodes 20000]
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.stats
import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.agent_sdk.serving import choose_batch, exploration_probs  # noqa: E402
from rlops.common.config import REPO_ROOT, resolve_params  # noqa: E402
from rlops.model.policy import PolicyConfig, PolicyNetwork  # noqa: E402
from rlops.pipeline_steps.promotion.ope import OPEConfig  # noqa: E402
from rlops.pipeline_steps.promotion.ope_direct import sandbox_q  # noqa: E402
from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row  # noqa: E402
from rlops.pipeline_steps.promotion.ope_value import off_policy_value, value_scale  # noqa: E402
from rlops.sandbox.pack import Pack, load_pack  # noqa: E402
from rlops.sandbox.policies import evaluate_policy, load_oracle, random_policy, rule_policy  # noqa: E402
from rlops.sandbox.traces import rollout_traces  # noqa: E402
from rlops.timeline.events import parse_events, production_doc  # noqa: E402

OUTCOME_EVENTS = {
    "credit_approval": {
        "at_hour": 0,
        "kind": "outcome",
        "field": "hidden.default_prob",
        "factor": 2.5,
        "when": "user_profile.age >= 60",
    }
}
TRUTH_SEED = 20_000_000  # candidate i: its own block; the logged seeds end below 11,000,000
# Retrains near the incumbent, the off-policy gate's case: a candidate deciding otherwise on most
# states has no support in traffic explored at the default share, and is the canary's to judge.
FRACTIONS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4)
Probs = Callable[[torch.Tensor, torch.Tensor], np.ndarray]


def production_world(pack_dir: Path, root: Path) -> Pack:
    event = OUTCOME_EVENTS.get(pack_dir.name)
    if event is None:
        return load_pack(pack_dir, check_liveness=False)
    doc = production_doc(yaml.safe_load((pack_dir / "scenario.yaml").read_text()), parse_events([event]))
    folder = root / "production"
    shutil.copytree(pack_dir, folder)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_pack(folder, check_liveness=False)


def cloned(pack: Pack, act: Callable[[Any], torch.Tensor], seed: int = 0, steps: int = 400) -> PolicyNetwork:
    """A network trained to imitate ``act`` on sandbox states."""
    torch.manual_seed(seed)
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout))
    env = pack.make_env(2048, illegal_action="noop")
    obs, masks, labels = [], [], []
    env.reset(seed)
    for _ in range(pack.scenario.spec.horizon):
        a = act(env)
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


def state_hash(obs: torch.Tensor) -> np.ndarray:
    """A fixed number in [0, 1) per observation row: which states a mixed candidate hands over.
    Rounded first: the observation rebuilt from a trace row may differ from the live one in the
    last bits, and the hand-over must be the same decision in both."""
    w = torch.linspace(0.37, 9.1, obs.shape[1], dtype=torch.float64)
    x = torch.round(obs.double() * 100.0) / 100.0
    return np.asarray(torch.frac(torch.abs(torch.sin(x @ w)) * 43758.5453).numpy())


def mixture(base: PolicyNetwork, direction: PolicyNetwork, f: float) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """``(obs, mask) → (greedy[N], softmax[N, A])`` of a candidate deciding as ``direction`` on the
    share ``f`` of states, as ``base`` elsewhere."""

    def decide(obs: torch.Tensor, mask: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        with torch.no_grad():
            lb, _ = base(obs.float(), mask.bool())
            ld, _ = direction(obs.float(), mask.bool())
        take = torch.as_tensor(state_hash(obs) < f)[:, None]
        logp = torch.where(take, ld, lb).double()
        probs = torch.where(mask.bool(), logp.exp(), torch.zeros_like(logp)).numpy()
        return np.where(mask.numpy(), logp.numpy(), -np.inf).argmax(axis=1), probs

    return decide


def serving_probs(decide: Callable[..., Any], share: float, distribution: str) -> Probs:
    """The candidate as it will serve: ``(1 − ε)·[a = greedy] + ε·explore(a)``."""

    def probs(obs: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        greedy, soft = decide(obs, mask)
        out = np.zeros_like(soft)
        out[np.arange(len(greedy)), greedy] = 1.0
        return (1.0 - share) * out + share * exploration_probs(mask.numpy(), soft, distribution)

    return probs


def served(decide: Callable[..., Any], share: float, distribution: str, seed: int) -> Callable[[Any], Any]:
    """A trace policy deciding as a policy client serves (greedy + exploration), with the true
    propensity of each served action in ``logp``."""
    rng = np.random.default_rng(seed)

    def act(env: Any) -> Any:
        mask = env.action_masks()
        greedy, soft = decide(env.observe(), mask)
        explore = exploration_probs(mask.numpy(), soft, distribution)
        a, p = choose_batch(greedy, explore, share, rng.random((len(greedy), 2)))
        return torch.as_tensor(a, dtype=torch.int64), {"logp": torch.as_tensor(np.log(p), dtype=torch.float32)}

    return act


def truth(pack: Pack, decide: Callable[..., Any], share: float, dist: str, episodes: int, seed: int) -> np.ndarray:
    act = served(decide, share, dist, seed)
    res = evaluate_policy(pack, lambda env: act(env)[0], episodes=episodes, seed=seed, profile="live")
    out: np.ndarray = res.returns.numpy()
    return out


def covers(value: float, se: float, truth: float, truth_se: float, z: float) -> bool:
    """The interval ``value ± z·se`` covers a truth that is itself a mean with standard error ``truth_se``."""
    return abs(value - truth) <= z * math.hypot(se, truth_se)


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pack", default="credit_approval", help="a pack under scenarios/ with an oracle")
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--logged", type=int, default=30000, help="logged live episodes per candidate")
    ap.add_argument("--truth-episodes", type=int, default=20000)
    ap.add_argument("--dm-episodes", type=int, default=2000)
    ap.add_argument(
        "--distribution",
        choices=("policy", "uniform"),
        default=None,
        help="the exploration distribution of the incumbent and the candidates (default: params exploration)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.monotonic()
    pack_dir = REPO_ROOT / "scenarios" / args.pack
    params = resolve_params(args.pack).model  # the project's defaults and the pack's own
    share, dist = params.exploration.share, args.distribution or params.exploration.distribution
    cfg: OPEConfig = params.ope
    reward_fn = params.reward_fn or "v1"
    sandbox = load_pack(pack_dir, check_liveness=False)
    oracle = load_oracle(sandbox)
    if oracle is None:
        raise SystemExit(f"pack {args.pack} has no oracle.py: the bench needs a better direction policy")
    with tempfile.TemporaryDirectory(prefix="rlops-bench-ope-") as tmp:
        prod = production_world(pack_dir, Path(tmp))
        champion = cloned(sandbox, rule_policy)
        better, worse = cloned(sandbox, oracle, seed=1), cloned(sandbox, random_policy(3), seed=2)
        incumbent = mixture(champion, champion, 0.0)
        # The sides are told by the incumbent's own true value, not by one log's noisy mean.
        served_value = float(truth(prod, incumbent, share, dist, 5 * args.truth_episodes, TRUTH_SEED - 10**7).mean())
        z = float(scipy.stats.norm.ppf(0.5 + cfg.confidence / 2))
        rows = []
        for i in range(args.candidates):
            side = "better" if i % 2 == 0 else "worse"
            f = FRACTIONS[(i // 2) % len(FRACTIONS)]
            decide = mixture(champion, better if side == "better" else worse, f)
            logged = rollout_traces(
                prod,
                served(incumbent, share, dist, seed=1 + i),
                args.logged,
                seed=50_000 + 100_000 * i,
                profile="live",
                reward_fn=reward_fn,
                source="live",
                episode_prefix=f"live-{i}",
            )
            target = serving_probs(decide, share, dist)
            true_returns = truth(prod, decide, share, dist, args.truth_episodes, TRUTH_SEED + i * args.truth_episodes)
            value, value_se = float(true_returns.mean()), float(true_returns.std(ddof=1) / math.sqrt(true_returns.size))
            q = sandbox_q(
                sandbox,
                target,
                episodes=args.dm_episodes,
                explore=cfg.dm_explore,
                ridge=cfg.ridge,
                profile="live",
                reward_label=reward_fn,
                seed=i,
            )
            res = off_policy_value(sandbox, logged, target, cfg, q)
            est = res.estimates
            margin = cfg.tolerance * value_scale(res.logged_return, res.logged_return_sd, cfg)
            row: dict[str, Any] = {
                "candidate": i,
                "side": side,
                "fraction": f,
                "truth": value,
                "truth_se": value_se,
                "logged_return": res.logged_return,
                "incumbent": served_value,
                "margin": margin,
                "gate": ope_gate_row(res, cfg).status,
                "reason": res.skipped,
                "ess": res.ess,
                "agreement": res.agreement,
            }
            for name, e in est.items():
                row[name] = e.value
                row[f"{name}_covers"] = covers(e.value, e.se, value, value_se, z)
            if "dr" in est:
                row["dr_low"], row["dr_high"] = est["dr"].low, est["dr"].high
                row["dr_raw_covers"] = est["dr"].covers(value)
            rows.append(row)
            dr = est.get("dr")
            print(
                f"#{i:02d} {side:6s} f {f:<4g} truth {value:+.4f} logged {res.logged_return:+.4f} margin {margin:.4f} "
                + (f"DR {dr.value:+.4f} [{dr.low:+.4f}, {dr.high:+.4f}] " if dr else "DR — ")
                + f"ESS {res.ess:.0f} agree {res.agreement:.0%} gate {row['gate']}"
                + (f" ({res.skipped[:90]})" if res.skipped else ""),
                flush=True,
            )
    judged = [r for r in rows if "dr" in r]
    coverage = {
        k: round(float(np.mean([r[f"{k}_covers"] for r in judged])), 3) if judged else None
        for k in ("dr", "dr_raw", "pdis", "wis", "sndr", "switch_dr")
    }
    worse_rows = [r for r in rows if r["truth"] < r["incumbent"] - 2 * r["margin"]]
    better_rows = [r for r in rows if r["truth"] > r["incumbent"]]
    gate = {
        "worse": len(worse_rows),
        "worse_refused": sum(r["gate"] == "fail" for r in worse_rows),
        "worse_insufficient": sum(r["gate"] == "skipped" for r in worse_rows),
        "better": len(better_rows),
        "better_passed": sum(r["gate"] == "pass" for r in better_rows),
        "better_insufficient": sum(r["gate"] == "skipped" for r in better_rows),
    }
    refused = gate["worse_refused"] / gate["worse"] if gate["worse"] else float("nan")
    passed = gate["better_passed"] / gate["better"] if gate["better"] else float("nan")
    print(
        f"DR 95% coverage {coverage['dr']} of {len(judged)} judged (bar ≥ 0.92); gate refused "
        f"{gate['worse_refused']}/{gate['worse']} worse by > 2× the margin (bar ≥ 90%), passed "
        f"{gate['better_passed']}/{gate['better']} better (bar ≥ 90%); insufficient: "
        f"{gate['worse_insufficient']} worse, {gate['better_insufficient']} better"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "pack": args.pack,
                "candidates": len(rows),
                "logged_episodes": args.logged,
                "truth_episodes": args.truth_episodes,
                "exploration": {"share": share, "distribution": dist},
                "tolerance": cfg.tolerance,
                "coverage_95": coverage,
                "judged": len(judged),
                "gate": gate,
                "bars": {
                    "dr_coverage": coverage["dr"] is not None and coverage["dr"] >= 0.92,
                    "worse_refused": gate["worse"] >= 30 and refused >= 0.9,
                    "better_passed": gate["better"] >= 30 and passed >= 0.9,
                },
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
