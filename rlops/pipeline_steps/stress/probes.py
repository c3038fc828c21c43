"""Gaming probes of ``rlops stress``: can a degenerate policy out-earn an honest one?

State-blind degenerate policies — *repeat action X whenever it is legal* (first legal action
otherwise), *stall* (a legal action that changes nothing; else a masked action, which the
environment executes as a no-op; else the least-effect legal action) and *always escalate* (a
human-takeover action whenever legal) — are run on the same seeded episodes as the honest
baselines (the rule engine, and the pack's oracle when it has one). A probe fails when its
paired mean-return advantage over the best baseline is significantly above ``margin`` (the lower
end of a 95% interval).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack
from rlops.sandbox.policies import evaluate_policy, load_oracle, rule_policy
from rlops.sandbox.reward import RewardFunction

Tensor = torch.Tensor
ActFn = Callable[[BatchedEnv], Tensor]


@dataclass(frozen=True)
class ProbeResult:
    name: str
    mean_return: float
    baseline: str
    baseline_return: float
    advantage: float
    advantage_low: float
    advantage_high: float
    beats_rules: bool
    passed: bool


def _first_legal(masks: Tensor) -> Tensor:
    return masks.float().argmax(dim=1)


def repeat_policy(a: int) -> ActFn:
    def act(env: BatchedEnv) -> Tensor:
        m = env.action_masks()
        return torch.where(m[:, a], torch.full((m.shape[0],), a, device=m.device), _first_legal(m))

    return act


def prefer_policy(actions: Sequence[int]) -> ActFn:
    def act(env: BatchedEnv) -> Tensor:
        m = env.action_masks()
        choice = _first_legal(m)
        for a in reversed(list(actions)):
            choice = torch.where(m[:, a], torch.full_like(choice, a), choice)
        return choice

    return act


def stall_policy(pack: Pack) -> ActFn:
    """Do nothing useful: a legal action without effects that does not end the episode; else a
    masked action (executed as a no-op); else the legal action with the fewest effects."""
    specs = pack.scenario.spec.actions
    n_assign = torch.tensor([sum(len(e.set) for e in a.effects) for a in specs], dtype=torch.float32)
    quiet = torch.tensor([not a.effects and a.terminal is False for a in specs])

    def act(env: BatchedEnv) -> Tensor:
        m = env.action_masks()
        legal_quiet = m & quiet.to(m.device)
        least = torch.where(m, -n_assign.to(m.device), torch.full_like(m, -1e9, dtype=torch.float32)).argmax(dim=1)
        masked = (~m).float().argmax(dim=1)
        choice = torch.where((~m).any(dim=1), masked, least)
        return torch.where(legal_quiet.any(dim=1), legal_quiet.float().argmax(dim=1), choice)

    return act


def gaming_probes(pack: Pack) -> dict[str, ActFn]:
    probes = {f"repeat:{name}": repeat_policy(a) for a, name in enumerate(pack.scenario.action_names)}
    probes["stall"] = stall_policy(pack)
    takeover = [a for a, spec in enumerate(pack.scenario.spec.actions) if spec.human_takeover]
    if takeover:
        probes["always_escalate"] = prefer_policy(takeover)
    return probes


def honest_baselines(pack: Pack, names: Sequence[str]) -> dict[str, ActFn]:
    out: dict[str, ActFn] = {}
    for name in names:
        if name == "rules":
            out["rules"] = rule_policy
        elif name == "oracle":
            oracle = load_oracle(pack)
            if oracle is not None:
                out["oracle"] = oracle
        else:
            raise ValueError(f"unknown stress baseline {name!r}; expected 'rules' or 'oracle'")
    if not out:
        raise ValueError("stress.baselines names no usable honest policy; expected 'rules' (and 'oracle')")
    return out


def run_gaming_probes(
    pack: Pack,
    fn: RewardFunction,
    episodes: int,
    seed: int,
    margin: float,
    baselines: Sequence[str],
) -> tuple[list[ProbeResult], dict[str, float]]:
    """Each probe against the best honest baseline on the same seeded episodes."""

    def returns(act: ActFn) -> Tensor:
        env = BatchedEnv(pack.scenario, fn, num_envs=episodes, illegal_action="noop")
        return evaluate_policy(pack, act, episodes, seed=seed, env=env).returns

    base = {name: returns(act) for name, act in honest_baselines(pack, baselines).items()}
    base_means = {k: float(v.mean()) for k, v in base.items()}
    best = max(base_means, key=base_means.__getitem__)
    out = []
    for name, act in gaming_probes(pack).items():
        r = returns(act)
        diff = r - base[best]
        se = float(diff.std()) / math.sqrt(max(episodes, 1)) if episodes > 1 else 0.0
        mean = float(diff.mean())
        beats_rules = (
            "rules" in base
            and float((r - base["rules"]).mean())
            - 1.96 * float((r - base["rules"]).std()) / math.sqrt(max(episodes, 1))
            > margin
        )
        out.append(
            ProbeResult(
                name,
                float(r.mean()),
                best,
                base_means[best],
                mean,
                mean - 1.96 * se,
                mean + 1.96 * se,
                bool(beats_rules),
                bool(mean - 1.96 * se <= margin),
            )
        )
    return out, base_means
