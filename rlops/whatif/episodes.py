"""One policy on the seeded held-out episodes of a what-if: per episode its return under each
reward, the built-in KPIs, the pack's KPIs on the final state, and the states it decided in.

A greedy policy meets the same applicants, latencies and random events under any reward (the
rewards do not touch the state), so the same episodes are played once per reward and only the
returns differ; every other figure is read from the first play.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.kpis import Kpi, evaluate_kpis
from rlops.sandbox.pack import Pack
from rlops.sandbox.reward import RewardFunction

ActFn = Callable[[BatchedEnv], torch.Tensor]


@dataclass(frozen=True)
class Played:
    """Per-episode outcomes of one policy (arrays of one entry per episode, in seed order)."""

    returns: dict[str, np.ndarray]
    """Return per reward, by the name the caller gave it (``current``, ``changed``)."""
    kpis: dict[str, tuple[np.ndarray, np.ndarray]]
    """Built-in and pack KPIs: ``(values, counted)``; an episode counts where the KPI's ``when`` holds."""
    states: np.ndarray
    """``[M, C]`` raw states the policy decided in (live steps of every episode)."""
    observations: np.ndarray
    """``[M, D]`` the observations of those states, as the policy saw them."""
    actions: np.ndarray
    """``[M]`` the action taken in each of those states."""


def _one_play(
    pack: Pack, act: ActFn, fn: RewardFunction, profile: str, episodes: int, seed: int, kpis: tuple[Kpi, ...] | None
) -> tuple[np.ndarray, dict[str, tuple[np.ndarray, np.ndarray]], tuple[np.ndarray, ...] | None]:
    """One greedy play: per-episode returns and, with ``kpis``, the KPIs and the visited states."""
    env = BatchedEnv(pack.scenario, fn, num_envs=episodes, profile=profile, illegal_action="noop")
    env.keep_final_state = kpis is not None
    env.reset(seed)
    n = env.num_envs
    live = torch.ones(n, dtype=torch.bool)
    returns = torch.zeros(n)
    lengths = torch.zeros(n)
    completed = torch.zeros(n, dtype=torch.bool)
    takeover = torch.zeros(n, dtype=torch.bool)
    handling = torch.zeros(n)
    final = env.S.clone()
    c_elapsed = pack.scenario.columns["episode.elapsed_ms"]
    seen_s: list[torch.Tensor] = []
    seen_o: list[torch.Tensor] = []
    seen_a: list[torch.Tensor] = []
    for _ in range(env.horizon):
        before, obs = env.S.clone(), env.observe()
        actions = act(env)
        if kpis is not None:
            seen_s.append(before[live])
            seen_o.append(obs[live])
            seen_a.append(actions[live].float())
        _, reward, terminated, truncated, info = env.step(actions)
        returns += torch.where(live, reward, torch.zeros_like(reward))
        takeover |= live & info.human_takeover
        done = live & (terminated | truncated)
        lengths = torch.where(done, info.episode_length, lengths)
        handling = torch.where(done, before[:, c_elapsed] + info.latency_ms * (~info.illegal).float(), handling)
        completed |= done & terminated & ~info.human_takeover
        if env.final_state is not None:
            final = torch.where(done.unsqueeze(1), env.final_state, final)
        live = live & ~done
        if not bool(live.any()):
            break
    if kpis is None:
        return returns.numpy(), {}, None
    everyone = np.ones(n, dtype=bool)
    out = {
        "completion_rate": (completed.float().numpy(), everyone),
        "human_takeover_rate": (takeover.float().numpy(), everyone),
        "handling_steps": (lengths.numpy(), everyone),
        "handling_ms": (handling.numpy(), everyone),
    }
    for name, (values, counted) in evaluate_kpis(kpis, final).items():
        out[name] = (values.numpy(), counted.numpy())
    visited = (torch.cat(seen_s).numpy(), torch.cat(seen_o).numpy(), torch.cat(seen_a).numpy().astype(np.int64))
    return returns.numpy(), out, visited


def play(
    pack: Pack,
    act: ActFn,
    rewards: dict[str, RewardFunction],
    kpis: tuple[Kpi, ...],
    profile: str,
    episodes: int,
    seed: int,
) -> Played:
    """Play ``act`` greedily on episodes ``seed .. seed + episodes - 1`` of ``profile`` once per
    reward of ``rewards`` (the first play also measures the KPIs and records the states)."""
    returns: dict[str, np.ndarray] = {}
    measured: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    visited: tuple[np.ndarray, ...] | None = None
    for i, (name, fn) in enumerate(rewards.items()):
        r, k, v = _one_play(pack, act, fn, profile, episodes, seed, kpis if i == 0 else None)
        returns[name] = r
        if i == 0:
            measured, visited = k, v
    assert visited is not None  # the first play records them
    states, observations, actions = visited
    return Played(returns, measured, states, observations, actions)


__all__ = ["ActFn", "Played", "play"]
