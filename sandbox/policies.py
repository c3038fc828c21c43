"""Reference policies and paired evaluation.

A policy here is any ``act(env) -> actions`` callable over a :class:`BatchedEnv` (it may read
``env.observe()``, ``env.action_masks()`` or, for the pack's oracle, the hidden state).
:func:`evaluate_policy` runs exactly one episode per seed, so two policies evaluated with the same
``seed`` face the same applicants, latencies and random events: a paired comparison.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from sandbox.env import BatchedEnv
from sandbox.pack import Pack

Tensor = torch.Tensor
ActFn = Callable[[BatchedEnv], Tensor]


def random_policy(seed: int = 0) -> ActFn:
    """Uniform over legal actions."""
    gen: dict[str, torch.Generator] = {}

    def act(env: BatchedEnv) -> Tensor:
        g = gen.setdefault("g", torch.Generator(device=env.device).manual_seed(seed))
        noise = torch.rand(env.action_masks().shape, generator=g, device=env.device)
        return torch.where(env.action_masks(), noise + 1.0, torch.zeros_like(noise)).argmax(dim=1)
    return act


def rule_policy(env: BatchedEnv) -> Tensor:
    """The pack's rule engine (``rule_policy:`` in scenario.yaml): what the live agent falls back to."""
    return env.scenario.rule_actions(env.S, env.action_masks())


def load_oracle(pack: Pack) -> ActFn | None:
    """The pack's oracle (``oracle.py`` with ``make_oracle(pack)``), or None when it has none."""
    path = pack.path / "oracle.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"rlops_oracle_{pack.name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_oracle(pack)


@dataclass
class EvalResult:
    """Per-episode outcomes of one policy on a fixed set of seeded episodes."""

    returns: Tensor
    lengths: Tensor
    completed: Tensor
    human_takeover: Tensor
    illegal_actions: Tensor
    handling_ms: Tensor
    segments: Tensor
    segment_names: list[str]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def mean_return(self) -> float:
        return float(self.returns.mean())

    def summary(self) -> dict[str, float]:
        n = self.returns.numel()
        return {
            "episodes": n,
            "mean_return": self.mean_return,
            "std_return": float(self.returns.std()) if n > 1 else 0.0,
            "completion_rate": float(self.completed.float().mean()),
            "human_takeover_rate": float(self.human_takeover.float().mean()),
            "illegal_action_rate": float(self.illegal_actions.sum()) / max(float(self.lengths.sum()), 1.0),
            "illegal_actions": int(self.illegal_actions.sum()),
            "mean_handling_ms": float(self.handling_ms.mean()),
        }


def evaluate_policy(pack: Pack, act: ActFn, episodes: int = 10_000, seed: int = 1_000_000,
                    reward_version: str | None = None, profile: str | None = None,
                    device: str | torch.device = "cpu", env: BatchedEnv | None = None) -> EvalResult:
    """Run one episode for each seed ``seed .. seed + episodes - 1`` and collect its outcome.

    Illegal actions are not executed (the episode's state is left as it was) and are counted.
    """
    env = env or BatchedEnv(pack.scenario, pack.reward_fn(reward_version), num_envs=episodes, profile=profile,
                            device=device, illegal_action="noop")
    env.reset(seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool, device=env.device)
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    completed = torch.zeros(n, dtype=torch.bool, device=env.device)
    takeover = torch.zeros(n, dtype=torch.bool, device=env.device)
    illegal = torch.zeros(n, device=env.device)
    handling = torch.zeros(n, device=env.device)
    segments = env.S[:, env.scenario.columns["episode.segment"]].clone()
    c_elapsed = env.scenario.columns["episode.elapsed_ms"]
    for _ in range(env.horizon):
        elapsed_before = env.S[:, c_elapsed].clone()
        actions = act(env)
        _, reward, terminated, truncated, info = env.step(actions)
        returns += torch.where(live, reward, torch.zeros_like(reward))
        illegal += (live & info.illegal).float()
        takeover |= live & info.human_takeover
        done = live & (terminated | truncated)
        lengths = torch.where(done, info.episode_length, lengths)
        handling = torch.where(done, elapsed_before + info.latency_ms * (~info.illegal).float(), handling)
        completed |= done & terminated & ~info.human_takeover
        live = live & ~done
        if not bool(live.any()):
            break
    names = ["base"] + [p.name for p in env.scenario.spec.profiles[env.profile].population]
    return EvalResult(returns.cpu(), lengths.cpu(), completed.cpu(), takeover.cpu(), illegal.cpu(), handling.cpu(),
                      segments.cpu(), names)
