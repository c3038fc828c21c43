"""Preference pairs (and regression rows) for the reward model, built from sandbox rollouts.

A pair is two candidate actions in the same sandbox state; the one with the higher *true
expected reward* is preferred. The true expected reward of action ``a`` in state ``s`` is the
expected return-to-go of taking ``a`` and then following a continuation policy (the pack's oracle
when it ships one, else its rule engine), so rewards that settle later (a loan's outcome is paid at notification) count
toward the decision that caused them. The expectation is taken over

* the scenario's *latent draws* — unobserved fields initialised from a constant ``uniform``
  distribution (the credit pack's ``hidden.default_u``), integrated by ``replicas`` stratified
  replicas (midpoints of ``replicas`` equal strata); and
* transition randomness (latency, API errors), by giving each replica its own instance seed.

Pairs whose two values differ by less than ``min_gap`` carry no preference and are dropped.

A handful of replicas cannot see a rare outcome: with 8 strata of a latent uniform, a click drawn
with probability 0.005 never happens, and every offer is worth the same. A pack's oracle may
therefore expose the exact values, ``act.action_values(env) -> [N, A]`` (the expected return-to-go
of each action taken now, followed by the oracle); they replace the replicas' estimate, and since
they carry no quadrature noise only ties are dropped (``min_gap`` is the replicas' noise floor).

Everything runs as batched environment steps; environments are built from ``pack.make_env`` or
``type(env)(...)``, so this module needs no import of the sandbox package.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rlops.model.reward_model import PreferencePairs, RewardDataset

N_OUTCOME = 3
#: Exact values closer than this share of the largest one are a tie (float rounding, not a preference).
EXACT_TIE = 1e-6
ActFn = Callable[[Any], Tensor]


def outcome_features(latency_ms: Tensor, error: Tensor, done: Tensor) -> Tensor:
    """``[latency seconds, error, done]`` per step — what both simulations and traces record."""
    return torch.stack([latency_ms.float() / 1000.0, error.float(), done.float()], dim=-1)


def rule_continuation(env: Any) -> Tensor:
    actions: Tensor = env.scenario.rule_actions(env.S, env.action_masks())
    return actions


def latent_columns(scenario: Any) -> list[tuple[int, float, float]]:
    """``(column, low, high)`` of unobserved fields drawn from a constant uniform distribution."""
    out = []
    for f in scenario.spec.fields:
        init = f.init
        if f.observed or init.dist != "uniform" or f.type != "float":
            continue
        lo, hi = init.params.get("low"), init.params.get("high")
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
            out.append((scenario.columns[f.path], float(lo), float(hi)))
    return out


def _take(sd: dict[str, Tensor], rows: Tensor) -> dict[str, Tensor]:
    return {k: (v if k == "global_step" else v[rows].clone()) for k, v in sd.items()}


def _snapshot(env: Any, rows: Tensor) -> dict[str, Tensor]:
    return _take(env.state_dict(), rows)


def _sub_env(env: Any, sd: dict[str, Tensor], n: int) -> Any:
    sim = type(env)(
        env.scenario, env.reward_fn, num_envs=n, profile=env.profile, device=env.device, illegal_action="noop"
    )
    sim.load_state_dict(sd)
    return sim


def expected_action_values(
    env: Any,
    snapshot: dict[str, Tensor],
    actions: Tensor,
    replicas: int = 8,
    continuation: ActFn | None = None,
    seed: int = 0,
) -> tuple[Tensor, Tensor]:
    """Expected return-to-go of ``actions[m]`` in snapshot row ``m`` → ``(values [M], outcomes [M, 3])``.

    ``snapshot`` is a row subset of ``env.state_dict()``; outcomes are those of the first replica.
    """
    M, K = actions.numel(), replicas
    continuation = continuation or rule_continuation
    sd = {k: (v if k == "global_step" else v.repeat_interleave(K, dim=0)) for k, v in snapshot.items()}
    gen = torch.Generator().manual_seed(seed)
    for col, lo, hi in latent_columns(env.scenario):
        strata = (torch.randperm(K, generator=gen).double() + 0.5) / K
        sd["S"][:, col] = (lo + (hi - lo) * strata).float().to(sd["S"].device).repeat(M)
    replica = torch.arange(K, device=sd["seeds"].device).repeat(M)
    sd["seeds"] = sd["seeds"] * 7919 + replica * 104_729 + seed  # a distinct random stream per replica
    sim = _sub_env(env, sd, M * K)
    _, reward, term, trunc, info = sim.step(actions.to(env.device).repeat_interleave(K))
    done = term | trunc
    outcomes = outcome_features(info.latency_ms, info.error, done).view(M, K, N_OUTCOME)[:, 0]
    ret = reward.clone()
    rows = (~done).nonzero().squeeze(1)  # rows of `ret` still in their episode, in sim order
    if 0 < rows.numel() < M * K:
        sim = _sub_env(env, _take(sim.state_dict(), ~done), rows.numel())
    for _ in range(env.horizon):
        if rows.numel() == 0:
            break
        _, reward, term, trunc, _ = sim.step(continuation(sim))
        ret[rows] += reward
        ended = term | trunc
        if bool(ended.any()):
            # Finished rows leave the simulation, so the continuation (which may be costly,
            # like an oracle's look-ahead) only ever runs on episodes that are still going.
            rows = rows[~ended]
            if rows.numel():
                sim = _sub_env(env, _take(sim.state_dict(), ~ended), rows.numel())
    return ret.view(M, K).mean(dim=1), outcomes


def exact_action_values(continuation: ActFn) -> Callable[[Any], Tensor] | None:
    """The continuation's exact values ``action_values(env) -> [N, A]``, when it exposes them."""
    values = getattr(continuation, "action_values", None)
    return values if callable(values) else None


def _two_legal_actions(masks: Tensor, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    u = torch.rand(masks.shape, generator=gen, device=masks.device)
    first = torch.where(masks, u + 1.0, torch.zeros_like(u)).argmax(dim=1)
    rest = masks.clone()
    rest[torch.arange(masks.shape[0], device=masks.device), first] = False
    u = torch.rand(masks.shape, generator=gen, device=masks.device)
    second = torch.where(rest, u + 1.0, torch.zeros_like(u)).argmax(dim=1)
    return first, second


def _behaviour(env: Any, gen: torch.Generator, explore: float) -> Tensor:
    """The rule engine, replaced by a uniformly random legal action with probability ``explore``."""
    masks = env.action_masks()
    u = torch.rand(masks.shape, generator=gen, device=env.device)
    random_a = torch.where(masks, u + 1.0, torch.zeros_like(u)).argmax(dim=1)
    coin = torch.rand(masks.shape[0], generator=gen, device=env.device) < explore
    return torch.where(coin, random_a, rule_continuation(env))


def resolve_continuation(pack: Any, continuation: ActFn | str | None) -> ActFn:
    """``"auto"``/None: the pack's oracle (``oracle.py``) when it has one, else its rule engine;
    ``"rules"``: the rule engine; a callable ``act(env) -> actions`` is used as given."""
    if callable(continuation):
        return continuation
    if continuation in (None, "auto"):
        if (Path(pack.path) / "oracle.py").exists():
            from rlops.sandbox.policies import load_oracle  # only packs that ship an oracle need it

            oracle = load_oracle(pack)
            if oracle is not None:
                return oracle
        return rule_continuation
    if continuation == "rules":
        return rule_continuation
    raise ValueError(f"continuation must be 'auto', 'rules' or a callable act(env) -> actions, got {continuation!r}")


def build_preference_pairs(
    pack: Any,
    n_pairs: int,
    seed: int = 0,
    reward_fn: str | None = None,
    profile: str | None = None,
    replicas: int = 8,
    min_gap: float = 0.02,
    explore: float = 0.5,
    continuation: ActFn | str | None = "auto",
    device: str = "cpu",
) -> PreferencePairs:
    """``n_pairs`` preference pairs from states visited by a rule/random behaviour mix.

    Only states with at least two legal actions give pairs; states are drawn in proportion to the
    number of action pairs they offer and the two candidates are distinct legal actions drawn
    uniformly. ``continuation`` plays after the candidate action (see :func:`resolve_continuation`):
    with the pack's oracle an action is scored by the best expected return-to-go it leaves open.
    Returns fewer pairs only if 10 rounds of rollouts cannot supply them.
    """
    gen = torch.Generator().manual_seed(seed)
    continuation = resolve_continuation(pack, continuation)
    exact = exact_action_values(continuation)
    chunks: list[PreferencePairs] = []
    have = 0
    for round_ in range(10):
        env = pack.make_env(
            num_envs=max(n_pairs, 256),
            reward_fn=reward_fn,
            profile=profile,
            device=device,
            seed=seed * 1_000_003 + round_ * 100_000_007,
        )
        F = env.layout.n_features
        snaps: list[dict[str, Tensor]] = []
        feats: list[Tensor] = []
        masks: list[Tensor] = []
        for _ in range(env.horizon):
            m = env.action_masks()
            rows = (m.sum(dim=1) >= 2).nonzero().squeeze(1)
            if rows.numel():
                snaps.append(_snapshot(env, rows))
                feats.append(env.observe()[rows, :F].clone())
                masks.append(m[rows].clone())
            env.step(_behaviour(env, gen, explore))
        if not snaps:
            continue
        snap = {k: (snaps[0][k] if k == "global_step" else torch.cat([s[k] for s in snaps])) for k in snaps[0]}
        states, mask = torch.cat(feats), torch.cat(masks)
        # Uniform over candidate (state, action pair) combinations: a state with n legal actions
        # offers n(n-1)/2 pairs, so decision points weigh more than two-way choices.
        n_legal = mask.sum(dim=1).double()
        want = min(2 * (n_pairs - have), states.shape[0])
        pick = torch.multinomial(n_legal * (n_legal - 1) / 2, want, replacement=False, generator=gen)
        snap = {k: (v if k == "global_step" else v[pick]) for k, v in snap.items()}
        a, b = _two_legal_actions(mask[pick], gen)
        both = {k: (v if k == "global_step" else torch.cat([v, v])) for k, v in snap.items()}
        actions = torch.cat([a, b])
        # With exact values the one replica left only records the outcomes (latency, error, done).
        values, outcomes = expected_action_values(
            env, both, actions, 1 if exact is not None else replicas, continuation, seed + round_
        )
        gap = min_gap
        if exact is not None:
            q = exact(_sub_env(env, both, actions.numel()))
            values = q.gather(1, actions.to(q.device).unsqueeze(1)).squeeze(1).to(values)
            gap = EXACT_TIE * max(float(values.abs().max()), 1e-12)
        P = pick.numel()
        va, vb, oa, ob = values[:P], values[P:], outcomes[:P], outcomes[P:]
        keep = (va - vb).abs() >= gap
        a_wins = va > vb

        def sel(x: Tensor, y: Tensor, a_wins: Tensor = a_wins) -> Tensor:
            return torch.where(a_wins.unsqueeze(-1) if x.dim() > 1 else a_wins, x, y)

        chunk = PreferencePairs(
            states=states[pick],
            chosen=sel(a, b),
            rejected=sel(b, a),
            chosen_outcomes=sel(oa, ob),
            rejected_outcomes=sel(ob, oa),
            chosen_value=sel(va, vb),
            rejected_value=sel(vb, va),
            n_actions=env.n_actions,
        )
        chunk = chunk.subset(keep.nonzero().squeeze(1)[: n_pairs - have])
        chunks.append(chunk)
        have += len(chunk)
        if have >= n_pairs:
            break
    if not chunks:
        raise ValueError(
            "no state with two or more legal actions was visited; the scenario offers no choices "
            "to build preference pairs from"
        )
    return PreferencePairs.cat(chunks)


def collect_reward_dataset(
    pack: Any,
    episodes: int,
    seed: int = 0,
    reward_fn: str | None = None,
    profile: str | None = None,
    explore: float = 0.5,
    device: str = "cpu",
) -> RewardDataset:
    """Observed steps with their reward totals from one episode per seed (for ``loss='regression'``)."""
    gen = torch.Generator().manual_seed(seed)
    env = pack.make_env(num_envs=episodes, reward_fn=reward_fn, profile=profile, device=device, seed=seed)
    F = env.layout.n_features
    live = torch.ones(episodes, dtype=torch.bool, device=env.device)
    parts: list[tuple[Tensor, ...]] = []
    for _ in range(env.horizon):
        obs = env.observe()
        actions = _behaviour(env, gen, explore)
        _, reward, term, trunc, info = env.step(actions)
        done = term | trunc
        rows = live.nonzero().squeeze(1)
        parts.append(
            (obs[rows, :F], actions[rows], outcome_features(info.latency_ms, info.error, done)[rows], reward[rows])
        )
        live = live & ~done
        if not bool(live.any()):
            break
    s, a, o, r = (torch.cat([p[i] for p in parts]) for i in range(4))
    return RewardDataset(states=s, actions=a, outcomes=o, rewards=r, n_actions=env.n_actions)


__all__ = [
    "N_OUTCOME",
    "outcome_features",
    "latent_columns",
    "expected_action_values",
    "exact_action_values",
    "build_preference_pairs",
    "collect_reward_dataset",
    "rule_continuation",
    "resolve_continuation",
]
