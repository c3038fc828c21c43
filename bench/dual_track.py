"""Does the dual track matter? One JSON line on ``scenarios/credit_approval_cx``.

The pack's true objective is its scripted reward plus a hidden customer-satisfaction outcome
(``satisfaction.py``: retired applicants want a human underwriter) that the scripted reward does
not see. Simulated labellers judge by the true objective: the label of a state is the action of
the pack's oracle (``oracle.py``), the best policy for the true objective.

1. ``scripted``: masked PPO on the scripted reward; its greedy traffic is "captured" (traces with
   the policy's entropy per step).
2. Label efficiency (``label_savings``): the reward model is trained from N labels chosen either by
   the label queue (:func:`pipeline_steps.labels.select.select_uncertain`: the top-k most
   uncertain state clusters of the policy) or uniformly at random among the captured steps; its
   accuracy is the share of (labeller's action, other legal action) pairs it orders right on the
   held-out states where the labeller disagrees with the scripted policy. ``label_savings`` = labels random selection needs / labels active
   selection needs for the accuracy active reaches with ``--labels`` labels (linear
   interpolation on the label grid), averaged over ``--seeds`` seeds.
3. ``blend``: the reward model trained from ``--labels`` queue-chosen labels relabels the traffic,
   the policy is warm-started by behaviour cloning from the high-score steps and trained with PPO
   on ``scripted + λ · model`` (:mod:`model.reward_source`; the model's score centred over the
   actions of the state, :class:`CenteredRewardModel`), the same budget as ``scripted``. The
   behaviour-cloning warm start is off unless ``--bc``: the captured traffic is the scripted
   policy's own, so cloning it only reproduces that policy.
4. True-objective mean returns of scripted, blend, the rule engine and the oracle on the same
   held-out seeded episodes; ``gap_closed = (blend − scripted) / (oracle − scripted)``.

Run: ``python -m bench.dual_track`` (``--timesteps``, ``--labels``, ``--seeds``, ``--lam``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "scenarios" / "credit_approval_cx"
EVAL_SEED = 5_000_000


def _load_satisfaction(pack: Any) -> Callable[[Any], torch.Tensor]:
    spec = importlib.util.spec_from_file_location("rlops_cx_satisfaction", pack.path / "satisfaction.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.satisfaction


def true_return(pack: Any, act: Callable[[Any], torch.Tensor], episodes: int, satisfaction: Any) -> float:
    """Mean true-objective return (scripted + satisfaction) on the held-out seeded episodes."""
    from sandbox.env import BatchedEnv
    from sandbox.policies import evaluate_policy
    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=episodes, illegal_action="noop")
    env.add_reward_hook("satisfaction", satisfaction)
    return float(evaluate_policy(pack, act, episodes, seed=EVAL_SEED, env=env).summary()["mean_return"])


class CenteredRewardModel(torch.nn.Module):
    """``r(s, a) − mean over actions r(s, ·)``: what the reward model prefers *in* a state, without
    the per-state offset a Bradley–Terry model is free to pick (which PPO would chase)."""

    def __init__(self, model: Any):
        super().__init__()
        self.model = model
        self.n_features, self.n_actions, self.n_outcome = model.n_features, model.n_actions, model.n_outcome

    def forward(self, states: torch.Tensor, actions: torch.Tensor, outcomes: torch.Tensor | None = None) -> torch.Tensor:
        all_a = torch.stack([self.model(states, torch.full_like(actions, a), outcomes)
                             for a in range(self.n_actions)], dim=1)
        return self.model(states, actions, outcomes) - all_a.mean(dim=1)


def greedy(policy: Any) -> Callable[[Any], torch.Tensor]:
    return lambda env: policy.act(env.observe(), deterministic=True).action


def ppo(pack: Any, timesteps: int, seed: int, num_envs: int, source: Any = None, model: Any = None,
        init: Any = None) -> Any:
    from model.ppo import train
    from model.ppo_config import PPOConfig
    from model.reward_source import apply_reward_source
    cfg = PPOConfig.from_params({"total_timesteps": timesteps, "device": "cpu", "seed": seed, "progress": False,
                                 "mode": "incremental" if init is not None else "full", "ewc_lambda": 0.0})
    env = pack.make_env(num_envs, seed=seed)
    if source is not None:
        apply_reward_source(env, source, model)
    return train(cfg, env, init_from=init).policy.eval()


# --------------------------------------------------------------------------- captured traffic
def capture(pack: Any, policy: Any, oracle: Any, episodes: int, seed: int) -> pd.DataFrame:
    """Greedy traffic of ``policy`` as trace rows (with its entropy), plus the labeller's answer
    (``oracle_action``) for every row — computed once, batched, as the episodes run."""
    from model.policy import masked_entropy
    from sandbox.traces import rollout_traces
    answers: list[torch.Tensor] = []

    def act(env: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        obs, masks = env.observe(), env.action_masks()
        with torch.no_grad():
            logp, value = policy(obs, masks)
        answers.append(oracle(env).clone())
        action = logp.argmax(dim=1)
        return action, {"entropy": masked_entropy(logp, masks), "logp": logp.gather(1, action[:, None])[:, 0],
                        "value": value}
    df = rollout_traces(pack, act, episodes, seed=seed, policy_version="scripted")
    k = df["step"].to_numpy()
    i = df["episode_id"].str.rsplit("-", n=1).str[1].astype(int).to_numpy() - seed
    table = torch.stack(answers).numpy()
    df["oracle_action"] = table[k, i]
    df["ts"] = pd.Timestamp("2026-11-30T05:00:00Z").isoformat()  # one queue bucket
    return df


def choice_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["action_mask"].str.count("1") >= 2].reset_index(drop=True)


def pairs_of(pack: Any, df: pd.DataFrame) -> Any:
    """Reward-model pairs: the labeller's action preferred over every other legal action."""
    from model.reward_model import PreferencePairs
    from pipeline_steps.infra.trace_states import observations_from_traces
    from pipeline_steps.labels.select import expected_outcomes
    obs, masks = observations_from_traces(pack, df)
    chosen = torch.from_numpy(df["oracle_action"].to_numpy().astype(np.int64))
    others = masks.clone()
    others[torch.arange(len(chosen)), chosen] = False
    row, rej = others.nonzero(as_tuple=True)
    feats = obs[:, :pack.scenario.layout.n_features]
    out = expected_outcomes(pack)
    return PreferencePairs(feats[row], chosen[row], rej, out[chosen[row]], out[rej], n_actions=pack.scenario.n_actions)


def fit_reward_model(pack: Any, labelled: pd.DataFrame, seed: int) -> Any:
    """A reward model from the labelled states (None when they hold fewer than 2 pairs)."""
    from model.reward_model import RewardModelConfig, train_reward_model
    pairs = pairs_of(pack, labelled)
    if len(pairs) < 2:
        return None
    cfg = RewardModelConfig(hidden_sizes=(64, 64), epochs=60, batch_size=128, holdout_fraction=0.0, seed=seed)
    return train_reward_model(cfg, pairs)[0]


def accuracy(model: Any, test: Any) -> float:
    from model.reward_model import pairwise_accuracy
    return 0.5 if model is None else pairwise_accuracy(model, test)


def queue_pick(pack: Any, traffic: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` states chosen by the label queue: the top-k most uncertain clusters, latest states first."""
    from pipeline_steps.labels.select import select_uncertain
    from pipeline_steps.labels.step import QueueConfig
    k = 8
    cfg = QueueConfig(clusters=32, top_k=k, threshold=1.01, states_per_cluster=int(np.ceil(n / k)) * 3,
                      min_cluster_states=5, min_bucket_states=1, seed=seed)
    picked, _ = select_uncertain(pack, traffic.sample(frac=1.0, random_state=seed).reset_index(drop=True), cfg)
    # Round-robin over the chosen clusters so every one gets its share of the budget.
    picked = picked.assign(_r=picked.groupby("cluster_id").cumcount()).sort_values(["_r", "cluster_id"])
    return picked.head(n).drop(columns="_r").reset_index(drop=True)


def random_pick(traffic: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """``n`` captured steps drawn uniformly — what labelling a random sample of traces gets (a
    step with a single legal action teaches nothing; the queue never sends one)."""
    return traffic.sample(n=min(n, len(traffic)), random_state=seed).reset_index(drop=True)


def labels_needed(grid: list[int], curve: list[float], target: float) -> float:
    """Labels at which ``curve`` first reaches ``target`` (linear interpolation; inf if never)."""
    for j, acc in enumerate(curve):
        if acc >= target:
            if j == 0:
                return float(grid[0])
            lo, hi = curve[j - 1], acc
            return grid[j - 1] + (grid[j] - grid[j - 1]) * (target - lo) / max(hi - lo, 1e-9)
    return float("inf")


def label_efficiency(pack: Any, traffic: pd.DataFrame, test: Any, grid: list[int], n_ref: int,
                     seeds: int) -> dict[str, Any]:
    per_seed = []
    for s in range(seeds):
        active = [accuracy(fit_reward_model(pack, queue_pick(pack, traffic, n, s), s), test) for n in grid]
        rand = [accuracy(fit_reward_model(pack, random_pick(traffic, n, 1000 + s), s), test) for n in grid]
        target = active[grid.index(n_ref)]
        need_rand = labels_needed(grid, rand, target)
        need_active = labels_needed(grid, active, target)
        per_seed.append({"seed": s, "active": [round(a, 4) for a in active], "random": [round(a, 4) for a in rand],
                         "target_accuracy": round(target, 4), "labels_random": need_rand,
                         "labels_active": need_active,
                         "savings": need_rand / need_active if np.isfinite(need_rand) else float(grid[-1]) / need_active})
    return {"grid": grid, "per_seed": per_seed,
            "label_savings": float(np.mean([p["savings"] for p in per_seed])),
            "savings_lower_bound": any(not np.isfinite(p["labels_random"]) for p in per_seed)}


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.dual_track")
    ap.add_argument("--timesteps", type=int, default=150_000, help="PPO steps of each policy")
    ap.add_argument("--num-envs", type=int, default=512)
    ap.add_argument("--labels", type=int, default=200, help="queue-chosen labels behind the blend reward model")
    ap.add_argument("--grid", default="25,50,100,200,400,800", help="label budgets of the efficiency curves")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--lam", type=float, default=0.5, help="blend weight of the (centred) reward model")
    ap.add_argument("--episodes", type=int, default=2000, help="held-out episodes per true-return figure")
    ap.add_argument("--traffic", type=int, default=3000, help="captured episodes of the scripted policy")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a shared, loaded machine more threads only wait on each other)")
    ap.add_argument("--bc", action="store_true",
                    help="warm-start blend by behaviour cloning from the high-score captured steps (the captured "
                         "traffic is the scripted policy's, so this clones it and PPO explores less)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start}", file=sys.stderr)
    t0 = time.perf_counter()
    from model.behaviour_cloning import BCConfig, behaviour_clone
    from model.policy import PolicyConfig, PolicyNetwork
    from model.reward_source import RewardSource
    from pipeline_steps.training.relabel import relabel_frame, step_inputs
    from sandbox.pack import load_pack
    from sandbox.policies import load_oracle, rule_policy
    pack = load_pack(PACK)
    sat = _load_satisfaction(pack)
    oracle = load_oracle(pack)
    assert oracle is not None

    scripted = ppo(pack, args.timesteps, 1, args.num_envs)
    t_scripted = time.perf_counter() - t0
    traffic = capture(pack, scripted, oracle, args.traffic, seed=10_000)
    held = choice_rows(capture(pack, scripted, oracle, 1000, seed=20_000))
    # Accuracy where labels carry news: the held-out states where the labeller's action is not the
    # scripted policy's (what the scripted reward got wrong or cannot see).
    test = pairs_of(pack, held[held["oracle_action"] != pd.Categorical(
        held["action"], categories=list(pack.scenario.action_names)).codes].reset_index(drop=True))
    grid = sorted({*(int(x) for x in args.grid.split(",")), args.labels})
    eff = label_efficiency(pack, traffic, test, grid, args.labels, args.seeds)

    # blend: the reward model from the queue's labels, BC warm start from relabelled traffic, PPO
    chosen = queue_pick(pack, traffic, args.labels, 0)
    rm = fit_reward_model(pack, chosen, 0)
    labels = relabel_frame(pack, rm, traffic, "bench")
    bc = None
    init = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout))
    if args.bc:
        obs, masks, actions, _ = step_inputs(pack, traffic)
        bc = behaviour_clone(init, obs, masks, actions, torch.tensor(labels["rm_score"].to_numpy(),
                                                                     dtype=torch.float32), BCConfig(epochs=10))
    blend = ppo(pack, args.timesteps, 1, args.num_envs, RewardSource("blend", args.lam), CenteredRewardModel(rm),
                init=init if bc is not None else None)

    returns = {name: true_return(pack, act, args.episodes, sat) for name, act in
               (("scripted", greedy(scripted)), ("blend", greedy(blend)), ("rules", rule_policy), ("oracle", oracle))}
    gap = (returns["blend"] - returns["scripted"]) / (returns["oracle"] - returns["scripted"])
    load_end = os.getloadavg()
    print(f"load average at end: {load_end}", file=sys.stderr)
    out = {"bench": "dual_track", "pack": pack.name, "true_return": {k: round(v, 4) for k, v in returns.items()},
           "gap_closed": round(gap, 4), "label_savings": round(eff["label_savings"], 3),
           "label_savings_lower_bound": eff["savings_lower_bound"], "labels": args.labels, "blend_lambda": args.lam,
           "timesteps": args.timesteps, "seeds": args.seeds, "label_curves": eff,
           "queue_labels_per_step": {int(k): int(v) for k, v in chosen["step"].value_counts().sort_index().items()},
           "queue_labels_disagreeing": int((chosen["oracle_action"] != pd.Categorical(
               chosen["action"], categories=list(pack.scenario.action_names)).codes).sum()),
           "relabelled_rows": len(labels), "bc_steps": None if bc is None else bc.steps_imitated, "seconds": round(time.perf_counter() - t0, 1),
           "seconds_scripted_ppo": round(t_scripted, 1), "load_avg_start": [round(x, 2) for x in load_start],
           "load_avg_end": [round(x, 2) for x in load_end]}
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
