"""How many human labels does the label queue's active selection save?

A simulated labeller (the credit pack's oracle: the decision with the highest expected return
given the applicant's true default probability) labels states chosen two ways from the same pool
of traces, and a reward model (``rlops.model.reward_model``, Bradley–Terry on "labelled action ≻ every
other legal action" pairs from :func:`rlops.pipeline_steps.labels.select.labels_as_pairs`) is trained on
each label set:

* **active** — the label queue's selection: states clustered by k-means, clusters ranked by mean
  normalised policy entropy, each cluster's latest ``states_per_cluster`` states taken in that
  order until the budget is spent;
* **random** — states drawn uniformly from the pool's states with at least two legal actions
  (averaged over ``--random-seeds`` draws).

The pool comes from a policy that was behaviour-cloned on a few oracle episodes (so its entropy
marks the states it has not learned), sampled on ``--episodes`` episodes. Accuracy is measured on
held-out decision states (where an approve/reject decision is legal) from fresh episodes: the
oracle's decision against every other legal decision. The figure of merit is the number of labels
each strategy needs to reach 98% of the accuracy random selection reaches with the largest
budget (and, second, how many active labels match random's accuracy at the largest budget).
The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.loadavg import report as report_load  # noqa: E402
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.reward_model import RewardModelConfig, pairwise_accuracy, train_reward_model
from rlops.pipeline_steps.labels.select import labels_as_pairs, queue_items, select_uncertain
from rlops.pipeline_steps.labels.step import QueueConfig
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import load_oracle
from rlops.sandbox.traces import rollout_traces

REPO = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)


def clone_policy(pack: Pack, oracle: Any, episodes: int, seed: int, steps: int = 300) -> PolicyNetwork:
    """A small policy fitted to the oracle's choices on a few episodes (cross-entropy)."""
    env = pack.make_env(episodes, seed=seed)
    obs, acts = [], []
    for _ in range(env.horizon):
        a = oracle(env)
        obs.append(env.observe().clone())
        acts.append(a.clone())
        env.step(a)
    X, y = torch.cat(obs), torch.cat(acts)
    torch.manual_seed(seed)
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout, hidden_sizes=(64, 64)))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(steps):
        logp, _ = net(X)
        loss = torch.nn.functional.nll_loss(logp, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()


def traced_pool(pack: Pack, net: PolicyNetwork, oracle: Any, episodes: int, seed: int) -> pd.DataFrame:
    """Trace rows of the sampled policy with the oracle's label of every state."""
    labels: list[torch.Tensor] = []
    gen = torch.Generator().manual_seed(seed)

    def act(env: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        labels.append(oracle(env).clone())
        out = net.act(env.observe(), generator=gen)
        return out.action, {"logp": out.logp, "entropy": out.entropy, "value": out.value}

    df = rollout_traces(pack, act, episodes, seed=seed, policy_version="bc", start_ts=T0 - timedelta(hours=1))
    ep = df["episode_id"].str.rsplit("-", n=1).str[1].astype(int).to_numpy() - seed
    lab = torch.stack(labels).numpy()
    df["oracle"] = np.array(pack.scenario.action_names, dtype=object)[lab[df["step"].to_numpy(), ep]]
    df["ts"] = [(T0 - timedelta(seconds=3600.0 * (1 - i / episodes))).isoformat() for i in ep]  # arrivals over 1 h
    return df


def label_frame(pack: Pack, rows: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """``rows`` as the label store returns them, labelled by the oracle."""
    rows = rows.assign(cluster_id=rows.get("cluster_id", 0), cluster_entropy=0.0, norm_entropy=0.0)
    items = pd.DataFrame(queue_items(pack, pack.name, rows, pool))
    items["state"] = items["state"].map(json.dumps)
    items["history"] = items["history"].map(json.dumps)
    items["label"] = rows["oracle"].to_numpy()
    return items


def accuracy(pack: Pack, rows: pd.DataFrame, pool: pd.DataFrame, test: Any, seed: int) -> float:
    pairs = labels_as_pairs(pack, label_frame(pack, rows, pool))
    model, _ = train_reward_model(RewardModelConfig(holdout_fraction=0.0, epochs=80, batch_size=256, seed=seed), pairs)
    return pairwise_accuracy(model, test)


def test_pairs(pack: Pack, pool: pd.DataFrame) -> Any:
    """The oracle's decision against every other legal decision, at decision states."""
    a_approve = pack.scenario.action_names.index("approve")
    deciding = pool[pool["action_mask"].str[a_approve] == "1"].reset_index(drop=True)
    return labels_as_pairs(pack, label_frame(pack, deciding, pool))


def needed(budgets: list[int], acc: list[float], target: float) -> float | None:
    """Labels at which the (linearly interpolated) curve first reaches ``target``."""
    for i, a in enumerate(acc):
        if a >= target:
            if i == 0:
                return float(budgets[0])
            b0, a0 = budgets[i - 1], acc[i - 1]
            return float(b0 + (budgets[i] - b0) * (target - a0) / max(a - a0, 1e-12))
    return None


def main(argv: list[str] | None = None) -> int:
    load_start = report_load("start")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=3000, help="episodes in the trace pool")
    ap.add_argument("--test-episodes", type=int, default=2000)
    ap.add_argument("--budgets", default="25,50,100,200,400")
    ap.add_argument("--random-seeds", type=int, default=3)
    ap.add_argument("--clusters", type=int, default=16)
    ap.add_argument("--bc-steps", type=int, default=300, help="gradient steps of the cloned policy")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    t_start = time.perf_counter()
    budgets = [int(b) for b in args.budgets.split(",")]
    pack = load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)
    oracle = load_oracle(pack)
    net = clone_policy(pack, oracle, episodes=48, seed=args.seed, steps=args.bc_steps)
    pool = traced_pool(pack, net, oracle, args.episodes, seed=1_000)
    test = test_pairs(pack, traced_pool(pack, net, oracle, args.test_episodes, seed=500_000))

    cfg = QueueConfig(clusters=args.clusters, threshold=-1.0, min_cluster_states=1, seed=args.seed)
    ranked, stats = select_uncertain(pack, pool, cfg)  # every cluster's latest states
    order = {s.cluster_id: -s.mean_entropy for s in stats}
    ranked = ranked.assign(_rank=ranked["cluster_id"].map(order)).sort_values(["_rank", "cluster_id"], kind="stable")
    above = sum(s.states for s in stats if s.mean_entropy > 0.8)
    choice = pool[pool["action_mask"].str.count("1") >= 2].reset_index(drop=True)
    active, random_ = [], []
    for b in budgets:
        active.append(accuracy(pack, ranked.head(b).reset_index(drop=True), pool, test, args.seed))
        random_.append(
            float(
                np.mean(
                    [
                        accuracy(pack, choice.sample(b, random_state=s).reset_index(drop=True), pool, test, args.seed)
                        for s in range(args.random_seeds)
                    ]
                )
            )
        )
    target = 0.98 * random_[-1]
    n_active, n_random = needed(budgets, active, target), needed(budgets, random_, target)
    print(
        f"pool: {len(pool)} steps, {len(choice)} with a choice; {len(stats)} clusters, "
        f"{sum(s.mean_entropy > 0.8 for s in stats)} above entropy 0.8 ({above} states); "
        f"test: {len(test)} decision pairs"
    )
    print(f"{'labels':>8}{'active acc':>12}{'random acc':>12}")
    for b, a, r in zip(budgets, active, random_):
        print(f"{b:>8}{a:>12.4f}{r:>12.4f}")
    ratio = (n_random / n_active) if n_active and n_random else None
    n_match = needed(budgets, active, random_[-1])  # active labels for random's accuracy at the largest budget
    r1 = lambda x: None if x is None else round(x, 1)  # noqa: E731
    print(
        f"labels to reach {target:.4f}: active {r1(n_active)}, random {r1(n_random)}"
        + (f", ratio {ratio:.2f}x" if ratio else "")
        + f"; active labels to match random's {random_[-1]:.4f} at {budgets[-1]}: {r1(n_match)}"
    )
    load_end = report_load("end")
    print(
        json.dumps(
            {
                "target_accuracy": round(target, 4),
                "labels_active": r1(n_active),
                "labels_random": r1(n_random),
                "label_ratio_random_over_active": None if ratio is None else round(ratio, 3),
                "labels_active_to_match_random_at_max_budget": r1(n_match),
                "budgets": budgets,
                "active_accuracy": [round(a, 4) for a in active],
                "random_accuracy": [round(r, 4) for r in random_],
                "reward_model": "rlops.model.reward_model",
                "pool_steps": len(pool),
                "test_pairs": len(test),
                "seconds": round(time.perf_counter() - t_start, 1),
                "load_average_start": load_start,
                "load_average_end": load_end,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
