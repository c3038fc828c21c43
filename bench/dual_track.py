"""Does the dual track matter? One JSON line on ``scenarios/credit_approval_cx``.

The pack's true objective is its scripted reward plus a hidden customer-satisfaction outcome
(``satisfaction.py``: retired applicants want a human underwriter) that the scripted reward does
not see. Simulated labellers judge by the true objective: the label of a state is the action of
the pack's oracle (``oracle.py``), the best policy for the true objective.

1. ``scripted``: masked PPO on the scripted reward; its greedy traffic is "captured" (traces with
   the policy's entropy per step).
2. Label efficiency (``label_savings``): the reward model is trained from N labels chosen either by
   the label queue or uniformly at random among the captured steps, the same training for both.
   The queue is the product's, run after run as ``rlops labels run`` does with ``selection: auto``
   (:func:`queue_pick`): the first run, before any label, takes the top-k most uncertain state
   clusters of the policy (:func:`rlops.pipeline_steps.labels.select.select_uncertain`); every later
   run fits a bootstrap reward ensemble on the labels so far and takes the states its members
   disagree on (:func:`rlops.pipeline_steps.labels.disagreement.select_disagreeing`), each run at most
   doubling the labelled set. Accuracy is the share of (labeller's action, other legal action)
   pairs the model orders right on the held-out states where the labeller disagrees with the
   scripted policy. ``label_savings`` = labels random selection needs / labels active selection
   needs for the accuracy active reaches with ``--labels`` labels (linear interpolation on the
   label grid; when random never reaches it, the grid's largest budget stands in, a lower
   bound), averaged over ``--seeds`` seeds.
3. ``blend``: the reward model trained from the queue's first ``--labels`` labels (seed 0)
   relabels the traffic, and the policy is trained with PPO on ``scripted + λ · model``
   (:mod:`rlops.model.reward_source`, the model's score centred over the legal actions of the state as
   the product does), the same budget as ``scripted``. The behaviour-cloning warm start is off
   unless ``--bc``: the captured traffic is the scripted policy's own, so cloning it only
   reproduces that policy.
4. True-objective mean returns of scripted, blend, the rule engine and the oracle on the same
   held-out seeded episodes; ``gap_closed = (blend − scripted) / (oracle − scripted)``.

Run: ``python -m bench.dual_track`` (``--timesteps``, ``--labels``, ``--seeds``, ``--lam``,
``--sample-fraction``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    from rlops.sandbox.env import BatchedEnv
    from rlops.sandbox.policies import evaluate_policy

    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=episodes, illegal_action="noop")
    env.add_reward_hook("satisfaction", satisfaction)
    return float(evaluate_policy(pack, act, episodes, seed=EVAL_SEED, env=env).summary()["mean_return"])


def greedy(policy: Any) -> Callable[[Any], torch.Tensor]:
    return lambda env: policy.act(env.observe(), deterministic=True).action


def ppo(
    pack: Any, timesteps: int, seed: int, num_envs: int, source: Any = None, model: Any = None, init: Any = None
) -> Any:
    from rlops.common.ppo_config import PPOConfig
    from rlops.model.ppo import train
    from rlops.model.reward_source import apply_reward_source

    cfg = PPOConfig.from_params(
        {
            "total_timesteps": timesteps,
            "device": "cpu",
            "seed": seed,
            "progress": False,
            "mode": "incremental" if init is not None else "full",
            "ewc_lambda": 0.0,
        }
    )
    env = pack.make_env(num_envs, seed=seed)
    if source is not None:
        apply_reward_source(env, source, model)
    return train(cfg, env, init_from=init).policy.eval()


# --------------------------------------------------------------------------- captured traffic
def capture(pack: Any, policy: Any, oracle: Any, episodes: int, seed: int) -> pd.DataFrame:
    """Greedy traffic of ``policy`` as trace rows (with its entropy), plus the labeller's answer
    (``oracle_action``) for every row — computed once, batched, as the episodes run."""
    from rlops.model.masked_distributions import masked_entropy
    from rlops.sandbox.traces import rollout_traces

    answers: list[torch.Tensor] = []

    def act(env: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        obs, masks = env.observe(), env.action_masks()
        with torch.no_grad():
            logp, value = policy(obs, masks)
        answers.append(oracle(env).clone())
        action = logp.argmax(dim=1)
        return action, {
            "entropy": masked_entropy(logp, masks),
            "logp": logp.gather(1, action[:, None])[:, 0],
            "value": value,
        }

    df = rollout_traces(pack, act, episodes, seed=seed, policy_version="scripted")
    k = df["step"].to_numpy()
    i = df["episode_id"].str.rsplit("-", n=1).str[1].astype(int).to_numpy() - seed
    table = torch.stack(answers).numpy()
    df["oracle_action"] = table[k, i]
    df["ts"] = pd.Timestamp("2026-11-30T05:00:00Z").isoformat()  # one queue bucket
    return df


def choice_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["action_mask"].str.count("1") >= 2].reset_index(drop=True)


def labelled_states(pack: Any, df: pd.DataFrame) -> Any:
    """Captured rows with the labeller's answer, as the label queue's reward ensemble takes them."""
    from rlops.pipeline_steps.labels.disagreement import LabelledStates
    from rlops.trace_store.states import observations_from_traces

    obs, masks = observations_from_traces(pack, df)
    return LabelledStates(obs, masks, torch.from_numpy(df["oracle_action"].to_numpy().astype(np.int64)))


def pairs_of(pack: Any, df: pd.DataFrame) -> Any:
    """Reward-model pairs: the labeller's action preferred over every other legal action."""
    from rlops.pipeline_steps.labels.select import choice_pairs

    states = labelled_states(pack, df)
    return choice_pairs(pack, states.obs, states.masks, states.chosen)[0]


def fit_reward_model(pack: Any, labelled: pd.DataFrame, seed: int) -> Any:
    """A reward model from the labelled states (None when they hold fewer than 2 pairs)."""
    from rlops.model.reward_model import RewardModelConfig, train_reward_model

    pairs = pairs_of(pack, labelled)
    if len(pairs) < 2:
        return None
    cfg = RewardModelConfig(hidden_sizes=(64, 64), epochs=60, batch_size=128, holdout_fraction=0.0, seed=seed)
    return train_reward_model(cfg, pairs)[0]


def accuracy(model: Any, test: Any) -> float:
    from rlops.model.reward_model import pairwise_accuracy

    return 0.5 if model is None else pairwise_accuracy(model, test)


def queue_config(seed: int, budget: int, sample_fraction: float) -> Any:
    """The label queue's settings for one run of ``budget`` items over the captured traffic."""
    from rlops.pipeline_steps.labels.step import QueueConfig

    return QueueConfig(
        clusters=32,
        top_k=8,
        threshold=1.01,
        states_per_cluster=budget,
        min_cluster_states=5,
        min_bucket_states=1,
        max_items=budget,
        sample_fraction=sample_fraction,
        seed=seed,
    )


def queue_pick(pack: Any, traffic: pd.DataFrame, stops: list[int], seed: int, sample_fraction: float) -> pd.DataFrame:
    """States labelled through the label queue run after run, as ``rlops labels run`` does
    (``selection: auto``), in the order they were labelled: the first run (``stops[0]`` items, no
    labels yet) by policy entropy (:func:`select_uncertain`), every later one by the disagreement of
    the reward ensemble fitted on the labels so far (:func:`select_disagreeing`). Each run at most
    doubles the labelled set and ends at the next of ``stops``, so the first ``stops[i]`` rows are
    what the queue had labelled at that budget."""
    from rlops.pipeline_steps.labels.disagreement import select_disagreeing
    from rlops.pipeline_steps.labels.select import select_uncertain

    stops = sorted(stops)
    shuffled = traffic.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    labelled = select_uncertain(pack, shuffled, queue_config(seed, stops[0], sample_fraction))[0]
    while len(labelled) < stops[-1]:
        target = next(n for n in stops if n > len(labelled))
        budget = min(target - len(labelled), max(stops[0], len(labelled)))
        done = shuffled.set_index(["episode_id", "step"]).index.isin(
            pd.MultiIndex.from_frame(labelled[["episode_id", "step"]])
        )
        batch, _ = select_disagreeing(
            pack,
            shuffled[~done].reset_index(drop=True),
            labelled_states(pack, labelled),
            queue_config(seed + len(labelled), budget, sample_fraction),
        )
        if batch.empty:
            break
        labelled = pd.concat([labelled, batch], ignore_index=True)
    return labelled.reset_index(drop=True)


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


def label_efficiency(
    pack: Any, traffic: pd.DataFrame, test: Any, grid: list[int], n_ref: int, seeds: int, sample_fraction: float
) -> dict[str, Any]:
    per_seed, queued_at = [], {}
    for s in range(seeds):
        queued = queue_pick(pack, traffic, grid, s, sample_fraction)
        queued_at[s] = queued
        active = [accuracy(fit_reward_model(pack, queued.head(n), s), test) for n in grid]
        rand = [accuracy(fit_reward_model(pack, random_pick(traffic, n, 1000 + s), s), test) for n in grid]
        target = active[grid.index(n_ref)]
        need_rand = labels_needed(grid, rand, target)
        need_active = labels_needed(grid, active, target)
        per_seed.append(
            {
                "seed": s,
                "active": [round(a, 4) for a in active],
                "random": [round(a, 4) for a in rand],
                "target_accuracy": round(target, 4),
                "labels_random": need_rand,
                "labels_active": need_active,
                "savings": (need_rand if np.isfinite(need_rand) else float(grid[-1])) / need_active,
            }
        )
    return {
        "grid": grid,
        "per_seed": per_seed,
        "label_savings": float(np.mean([p["savings"] for p in per_seed])),
        "savings_lower_bound": any(not np.isfinite(p["labels_random"]) for p in per_seed),
        "queued": queued_at,
    }


# --------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(prog="python -m bench.dual_track")
    ap.add_argument("--timesteps", type=int, default=150_000, help="PPO steps of each policy")
    ap.add_argument("--num-envs", type=int, default=512)
    ap.add_argument("--labels", type=int, default=200, help="queue-chosen labels behind the blend reward model")
    ap.add_argument("--grid", default="25,50,100,200,400,800", help="label budgets of the efficiency curves")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument(
        "--sample-fraction",
        type=float,
        default=0.5,
        help="label_queue.sample_fraction: share of each run drawn in proportion to disagreement",
    )
    ap.add_argument("--lam", type=float, default=0.5, help="blend weight of the (centred) reward model")
    ap.add_argument("--episodes", type=int, default=2000, help="held-out episodes per true-return figure")
    ap.add_argument("--traffic", type=int, default=3000, help="captured episodes of the scripted policy")
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads (1: on a shared, loaded machine more threads only wait on each other)",
    )
    ap.add_argument(
        "--bc",
        action="store_true",
        help="warm-start blend by behaviour cloning from the high-score captured steps (the captured "
        "traffic is the scripted policy's, so this clones it and PPO explores less)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    print(f"load average at start: {load_start}", file=sys.stderr)
    t0 = time.perf_counter()
    from rlops.model.behaviour_cloning import BCConfig, behaviour_clone
    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.model.reward_source import RewardSource
    from rlops.pipeline_steps.training.relabel import relabel_frame, step_inputs
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import load_oracle, rule_policy

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
    test = pairs_of(
        pack,
        held[
            held["oracle_action"] != pd.Categorical(held["action"], categories=list(pack.scenario.action_names)).codes
        ].reset_index(drop=True),
    )
    grid = sorted({*(int(x) for x in args.grid.split(",")), args.labels})
    eff = label_efficiency(pack, traffic, test, grid, args.labels, args.seeds, args.sample_fraction)

    # blend: the reward model from the queue's labels, BC warm start from relabelled traffic, PPO
    chosen = eff.pop("queued")[0].head(args.labels)
    rm = fit_reward_model(pack, chosen, 0)
    labels = relabel_frame(pack, rm, traffic, "bench")
    bc = None
    init = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout))
    if args.bc:
        obs, masks, actions, _ = step_inputs(pack, traffic)
        scores = torch.tensor(labels["rm_score"].to_numpy(), dtype=torch.float32)
        bc = behaviour_clone(init, obs, masks, actions, scores, BCConfig(top_fraction=0.5, epochs=10))
    blend = ppo(
        pack,
        args.timesteps,
        1,
        args.num_envs,
        RewardSource("blend", args.lam),
        rm,
        init=init if bc is not None else None,
    )

    returns = {
        name: true_return(pack, act, args.episodes, sat)
        for name, act in (
            ("scripted", greedy(scripted)),
            ("blend", greedy(blend)),
            ("rules", rule_policy),
            ("oracle", oracle),
        )
    }
    gap = (returns["blend"] - returns["scripted"]) / (returns["oracle"] - returns["scripted"])
    load_end = os.getloadavg()
    print(f"load average at end: {load_end}", file=sys.stderr)
    out = {
        "bench": "dual_track",
        "pack": pack.name,
        "true_return": {k: round(v, 4) for k, v in returns.items()},
        "gap_closed": round(gap, 4),
        "label_savings": round(eff["label_savings"], 3),
        "label_savings_lower_bound": eff["savings_lower_bound"],
        "labels": args.labels,
        "blend_lambda": args.lam,
        "label_savings_per_seed": [round(p["savings"], 3) for p in eff["per_seed"]],
        "queue_sample_fraction": args.sample_fraction,
        "timesteps": args.timesteps,
        "seeds": args.seeds,
        "label_curves": eff,
        "queue_labels_per_step": {int(k): int(v) for k, v in chosen["step"].value_counts().sort_index().items()},
        "queue_labels_disagreeing": int(
            (
                chosen["oracle_action"]
                != pd.Categorical(chosen["action"], categories=list(pack.scenario.action_names)).codes
            ).sum()
        ),
        "relabelled_rows": len(labels),
        "bc_steps": None if bc is None else bc.steps_imitated,
        "seconds": round(time.perf_counter() - t0, 1),
        "seconds_scripted_ppo": round(t_scripted, 1),
        "load_avg_start": [round(x, 2) for x in load_start],
        "load_avg_end": [round(x, 2) for x in load_end],
    }
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
