"""Roll a policy through the sandbox and record trace rows (the trace record of ARCHITECTURE.md).

Tensors of every step are collected first and turned into columns once at the end; only the
JSON rendering of reward breakdowns touches rows one by one.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd
import torch

from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack
from rlops.sandbox.reward_runtime import RewardError

Tensor = torch.Tensor
#: A policy for tracing returns actions, or actions plus a dict of per-row ``logp``, ``entropy``,
#: ``value`` tensors (and optionally ``fallback``, ``explored``, and ``fallback_reason``: an object
#: array of ``"<code>: <detail>"`` strings, None where the policy decided).
TracePolicy = Callable[[BatchedEnv], "Tensor | tuple[Tensor, dict[str, Tensor]]"]


def observed_fields(pack: Pack) -> list[str]:
    """Fields a production trace carries: every field not marked ``observed: false``."""
    return [f.path for f in pack.scenario.spec.fields if f.observed]


def rollout_traces(
    pack: Pack,
    policy: TracePolicy,
    episodes: int,
    *,
    seed: int = 0,
    profile: str | None = None,
    reward_fn: str | None = None,
    policy_version: str = "rules",
    source: str = "sandbox",
    test_group: str = "control",
    start_ts: datetime | None = None,
    sample_rate: float = 1.0,
    episode_prefix: str | None = None,
) -> pd.DataFrame:
    """One episode per seed ``seed .. seed + episodes - 1``; returns one row per agent step.

    ``episode_prefix`` names the episodes ``<prefix>-<i>`` and their steps ``<episode>-<k>``:
    the same prefix and seed give the same ids (a re-run reproduces its rows), distinct prefixes
    never collide. Without one, episodes are ``<pack>-<seed + i>`` and trace ids carry a random
    run tag.

    ``sample_rate`` keeps that fraction of episodes (chosen by a hash of the episode id), as a
    live sampler would. A field that is not yet visible to the agent is recorded as null.
    """
    env = BatchedEnv(
        pack.scenario, pack.reward_fn(reward_fn), num_envs=episodes, profile=profile, illegal_action="noop"
    )
    env.reset(seed)
    scn = pack.scenario
    fields = observed_fields(pack)
    cols = [scn.columns[f] for f in fields]
    vis = {scn.columns[p]: e for p, e in scn.visible.items() if p in fields}
    t0 = start_ts or datetime.now(UTC)
    live = torch.ones(episodes, dtype=torch.bool)
    steps: list[dict[str, Any]] = []
    for _ in range(env.horizon):
        S, masks = env.S.clone(), env.action_masks().clone()
        out = policy(env)
        actions, extras = out if isinstance(out, tuple) else (out, {})
        elapsed = S[:, scn.columns["episode.elapsed_ms"]]
        _, reward, term, trunc, info = env.step(actions)
        _check_finite_reward(env, reward, info.reward_breakdown)
        state = S[:, cols].clone()
        for j, c in enumerate(cols):
            if c in vis:
                state[:, j] = torch.where(vis[c](S), state[:, j], torch.full_like(state[:, j], float("nan")))
        steps.append(
            {
                "live": live.clone(),
                "S": S,
                "state": state,
                "masks": masks,
                "actions": actions.clone(),
                "reward": reward,
                "breakdown": info.reward_breakdown,
                "done": term | trunc,
                "latency": info.latency_ms,
                "error": info.error,
                "elapsed": elapsed,
                "extras": extras,
                "step": S[:, scn.columns["episode.step"]].clone(),
            }
        )
        live = live & ~(term | trunc)
        if not bool(live.any()):
            break
    return _to_frame(
        pack, env, steps, fields, seed, t0, policy_version, source, test_group, sample_rate, episode_prefix
    )


def _check_finite_reward(env: BatchedEnv, reward: Tensor, breakdown: Tensor) -> None:
    """A NaN or infinite reward must not reach a trace row (or anything trained on it)."""
    if bool(torch.isfinite(reward).all()):
        return
    bad = ~torch.isfinite(breakdown)
    col = int(bad.any(dim=0).nonzero()[0, 0]) if bool(bad.any()) else len(env.reward.names) - 1
    raise RewardError(
        f"{env.reward_fn.path}: reward entry '{env.reward.names[col]}' is not a finite number on "
        "a sandbox step; no trace rows were written"
    )


def _to_frame(
    pack: Pack,
    env: BatchedEnv,
    steps: list[dict[str, Any]],
    fields: list[str],
    seed: int,
    t0: datetime,
    policy_version: str,
    source: str,
    test_group: str,
    sample_rate: float,
    episode_prefix: str | None = None,
) -> pd.DataFrame:
    n = env.num_envs
    scn = pack.scenario
    if episode_prefix:
        ep_ids = np.array([f"{episode_prefix}-{i}" for i in range(n)], dtype=object)
        id_prefix = ""
    else:
        run = uuid.uuid4().hex[:8]
        ep_ids = np.array([f"{pack.name}-{seed + i}" for i in range(n)], dtype=object)
        id_prefix = f"{run}-"
    keep_ep = np.ones(n, dtype=bool)
    if sample_rate < 1.0:
        h = pd.util.hash_array(ep_ids) % 1_000_000
        keep_ep = h < int(sample_rate * 1_000_000)
    names, reasons, refs = env.reward.names, env.reward.reasons, env.reward.rule_refs
    frames = []
    for k, st in enumerate(steps):
        rows = (st["live"].numpy()) & keep_ep
        if not rows.any():
            continue
        idx = np.nonzero(rows)[0]
        masks = st["masks"][idx].numpy()
        bd = st["breakdown"][idx].numpy()
        totals = st["reward"][idx].numpy()
        ts = [t0 + timedelta(milliseconds=float(e)) for e in st["elapsed"][idx].numpy()]
        df = pd.DataFrame(
            {
                "trace_id": [f"{id_prefix}{e}-{k}" for e in ep_ids[idx]],
                "episode_id": ep_ids[idx],
                "step": st["step"][idx].numpy().astype(np.int64),
                "ts": [t.isoformat() for t in ts],
                "scenario": pack.name,
                "source": source,
                "test_group": test_group,
                "policy_version": policy_version,
                "reward_fn_version": env.reward_fn.version,
            }
        )
        state = st["state"][idx].numpy()
        for j, f in enumerate(fields):
            spec = scn.fields[f]
            col = state[:, j]
            if spec.type == "enum":
                values = np.array(spec.values, dtype=object)
                df[f"state.{f}"] = np.where(np.isnan(col), None, values[np.nan_to_num(col).astype(int)])
            elif spec.type == "bool":
                df[f"state.{f}"] = pd.array(np.where(np.isnan(col), None, col > 0.5), dtype="boolean")
            elif spec.type == "int":
                df[f"state.{f}"] = pd.array(np.where(np.isnan(col), None, col), dtype="Int64")
            else:
                df[f"state.{f}"] = col.astype(np.float64)
        actions = st["actions"][idx].numpy()
        df["action"] = np.array(scn.action_names, dtype=object)[actions]
        df["action_mask"] = ["".join("1" if b else "0" for b in m) for m in masks]
        ex = st["extras"]
        for key in ("logp", "entropy", "value"):
            df[key] = ex[key][idx].detach().cpu().numpy().astype(np.float64) if key in ex else 0.0
        df["reward_total"] = totals.astype(np.float64)
        df["reward_breakdown"] = [json.dumps(_breakdown(t, b, names, reasons, refs)) for t, b in zip(totals, bd)]
        if env.reward_fn.signal_weights:  # reward lineage: the signal values its weights followed
            df["reward_signals"] = json.dumps(env.reward_fn.signals_in_force, sort_keys=True)
        df["done"] = st["done"][idx].numpy()
        df["latency_ms"] = st["latency"][idx].numpy().astype(np.float64)
        df["error"] = st["error"][idx].numpy()
        df["fallback"] = ex["fallback"][idx].cpu().numpy() if "fallback" in ex else False
        if "fallback_reason" in ex:
            df["fallback_reason"] = np.asarray(ex["fallback_reason"], dtype=object)[idx]
        if "explored" in ex:
            df["explored"] = ex["explored"][idx].cpu().numpy().astype(bool)
        frames.append(df)
    if not frames:
        return pd.DataFrame()
    return (
        pd.concat(frames, ignore_index=True).sort_values(["episode_id", "step"], kind="stable").reset_index(drop=True)
    )


def _breakdown(
    total: float, scores: np.ndarray, names: list[str], reasons: list[str], refs: list[str | None]
) -> dict[str, Any]:
    items = [
        {"component": n, "score": round(float(s), 6), "reason": r, "rule_ref": ref}
        for n, s, r, ref in zip(names, scores, reasons, refs)
        if abs(float(s)) > 1e-12
    ]
    return {"total": round(float(total), 6), "breakdown": items}
