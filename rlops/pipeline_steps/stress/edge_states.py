"""The edge states ``rlops stress`` steps every action on.

A pool of reachable states (random and rule-engine rollouts) is overwritten field by field with
edge values: every range boundary, one step inside it, the midpoint, zero when in range, ±6σ (or
±1e6) on an unbounded side, every enum value, both bools, every ``episode.*`` extreme. The first
rows change one field at a time, two rows are all-minimum and all-maximum corners, the rest mix
edges at random. The reward checks that step them are :mod:`rlops.pipeline_steps.stress.checks`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.env import BatchedEnv, NoLegalActionError
from rlops.sandbox.pack import Pack
from rlops.sandbox.policies import random_policy, rule_policy
from rlops.sandbox.reward import RewardFunction
from rlops.sandbox.reward_runtime import RewardError
from rlops.sandbox.spec import FieldSpec

Tensor = torch.Tensor


def field_edges(f: FieldSpec) -> list[float]:
    """Edge values of one field (enum codes, bools as 0/1)."""
    if f.type == "enum":
        return [float(i) for i in range(len(f.values))]
    if f.type == "bool":
        return [0.0, 1.0]
    lo, hi = f.min, f.max
    step = 1.0 if f.type == "int" else None
    out: list[float] = []
    if lo is not None and hi is not None:
        d = step if step is not None and hi - lo >= 2 else (hi - lo) * 1e-3
        out += [lo, lo + d, (lo + hi) / 2, hi - d, hi]
    spread = _init_spread(f)
    if lo is None:
        out += [spread[0], -1e6]
    else:
        out.append(lo)
    if hi is None:
        out += [spread[1], 1e6]
    else:
        out.append(hi)
    if (lo is None or lo < 0) and (hi is None or hi > 0):
        out.append(0.0)
    if f.type == "int":
        out = [float(math.floor(v)) for v in out]
    return sorted(set(out))


def _init_spread(f: FieldSpec) -> tuple[float, float]:
    p = f.init.params
    if f.init.dist == "normal" and all(isinstance(p.get(k), (int, float)) for k in ("mean", "std")):
        return float(p["mean"]) - 6 * float(p["std"]), float(p["mean"]) + 6 * float(p["std"])
    if f.init.dist == "lognormal" and all(isinstance(p.get(k), (int, float)) for k in ("mean", "sigma")):
        return math.exp(float(p["mean"]) - 6 * float(p["sigma"])), math.exp(float(p["mean"]) + 6 * float(p["sigma"]))
    return -1e3, 1e3


def episode_edges(scn: CompiledScenario) -> dict[str, list[float]]:
    h, a = scn.spec.horizon, scn.n_actions
    n_seg = max((len(p.population) for p in scn.spec.profiles.values()), default=0)
    return {
        "episode.step": [0.0, 1.0, h - 1.0],
        "episode.elapsed_ms": [0.0, 1e3, 1e6],
        "episode.last_action": [float(i) for i in range(a + 1)],
        "episode.repeat_count": [0.0, 1.0, 2.0, float(h)],
        "episode.error": [0.0, 1.0],
        "episode.errors": [0.0, float(h)],
        "episode.latency_ms": [0.0, 1e4],
        "episode.segment": [float(i) for i in range(n_seg + 1)],
    }


def reachable_states(pack: Pack, fn: RewardFunction, n: int, seed: int) -> Tensor:
    """States visited by random and rule-engine rollouts (every stage of an episode)."""
    snaps = []
    for k, policy in enumerate((random_policy(seed), rule_policy)):
        env = BatchedEnv(pack.scenario, fn, num_envs=max(n // 2, 64), illegal_action="noop")
        env.reset(seed + k * 1_000_003)
        for _ in range(pack.scenario.spec.horizon):
            snaps.append(env.S.clone())
            try:
                env.step(policy(env))
            except (RewardError, NoLegalActionError):
                break  # a broken reward is reported by the edge checks themselves
    return torch.cat(snaps)


def edge_states(
    pack: Pack, fn: RewardFunction, n: int = 2048, seed: int = 0, mix_prob: float = 0.3
) -> tuple[Tensor, dict[str, int]]:
    """``n`` edge states ``S[n, C]`` and how many rows set each field to one of its edges."""
    scn = pack.scenario
    gen = torch.Generator().manual_seed(seed)
    pool = reachable_states(pack, fn, n, seed)
    S = pool[torch.randint(pool.shape[0], (n,), generator=gen)].clone()
    edges = {f.path: field_edges(f) for f in scn.spec.fields}
    edges.update(episode_edges(scn))
    singles = [(scn.columns[p], v) for p, vals in edges.items() for v in vals]
    if len(singles) + 2 > n:
        raise ValueError(
            f"stress.edge_states={n} is too small: the one-at-a-time edge rows alone need {len(singles) + 2}"
        )
    for i, (col, v) in enumerate(singles):
        S[i, col] = v
    row_min, row_max = len(singles), len(singles) + 1
    for p, vals in edges.items():
        if p.startswith("episode."):
            continue
        S[row_min, scn.columns[p]], S[row_max, scn.columns[p]] = vals[0], vals[-1]
    start = len(singles) + 2
    for p, vals in edges.items():
        col = scn.columns[p]
        pick = torch.rand(n - start, generator=gen) < mix_prob
        vals_t = torch.tensor(vals, dtype=torch.float32)
        choice = vals_t[torch.randint(len(vals), (n - start,), generator=gen)]
        S[start:, col] = torch.where(pick, choice, S[start:, col])
    S = scn.clamp(S)
    counts = {
        p: int(torch.isin(S[:, scn.columns[p]], torch.tensor(vals, dtype=torch.float32)).sum())
        for p, vals in edges.items()
    }
    return S, counts


def describe_state(pack: Pack, row: Tensor) -> dict[str, Any]:
    """One state row as ``{field: value}`` with enum names and bools decoded."""
    out: dict[str, Any] = {}
    for path, col in pack.scenario.columns.items():
        v = float(row[col])
        f = pack.scenario.fields.get(path)
        if f is not None and f.type == "enum":
            out[path] = f.values[int(v)] if 0 <= int(v) < len(f.values) else v
        elif (f is not None and f.type == "bool") or path == "episode.error":
            out[path] = v > 0.5
        else:
            out[path] = round(v, 6)
    return out
