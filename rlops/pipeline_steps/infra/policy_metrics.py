"""One set of metric keys for every run that judges a policy, so MLflow's compare view lines
training and evaluation runs of all policy versions up on the same columns and charts.

Keys (all under ``policy/``): ``mean_return``, ``completion_rate``, ``human_takeover_rate``,
``illegal_action_rate``, ``mean_handling_ms``, ``latency_p99_ms`` and
``mean_return/segment/<segment>`` per population or expression segment. A training run logs
them at its last environment step, after its per-iteration learning curve (``episodic_return``,
``entropy``… at every step); an evaluation run logs them for the candidate at step 0.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

    from rlops.model.policy import PolicyNetwork

PREFIX = "policy/"
SUMMARY_KEYS = ("mean_return", "completion_rate", "human_takeover_rate", "illegal_action_rate", "mean_handling_ms")
_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. /]")


def segment_key(name: str) -> str:
    return f"{PREFIX}mean_return/segment/{_UNSAFE.sub('_', name)}"


def policy_metrics(
    summary: Mapping[str, Any], segment_returns: Mapping[str, float] | None = None, latency_ms: float | None = None
) -> dict[str, float]:
    """The comparable metrics of one policy from an evaluation summary (``EvalResult.summary()``),
    mean return per segment and the p99 decision latency; non-finite values are left out."""
    out = {f"{PREFIX}{k}": float(summary[k]) for k in SUMMARY_KEYS if k in summary}
    out.update({segment_key(n): float(v) for n, v in (segment_returns or {}).items()})
    if latency_ms is not None:
        out[f"{PREFIX}latency_p99_ms"] = float(latency_ms)
    return {k: v for k, v in out.items() if math.isfinite(v)}


def segment_returns(returns: np.ndarray, masks: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Mean return of each segment that has at least one episode."""
    r = np.asarray(returns, dtype=float)
    return {n: float(r[m].mean()) for n, m in masks.items() if np.asarray(m).any()}


def population_masks(segment_codes: Any, names: list[str]) -> dict[str, np.ndarray]:
    """Population segments of a profile as boolean masks (none when the profile has one)."""
    if len(names) <= 1:
        return {}
    codes = np.asarray(segment_codes.cpu() if hasattr(segment_codes, "cpu") else segment_codes)
    return {n: codes == i for i, n in enumerate(names)}


def latency_p99_ms(policy: PolicyNetwork, obs: torch.Tensor, samples: int = 300) -> float:
    """p99 of the wall time of one ``act`` call on a single observation (batch 1), in ms."""
    n = obs.shape[0]
    for i in range(min(10, n)):  # warm-up: first calls pay for allocator and dispatch caches
        policy.act(obs[i : i + 1], deterministic=True)
    times = np.empty(samples)
    for i in range(samples):
        row = obs[i % n : i % n + 1]
        t0 = time.perf_counter()
        policy.act(row, deterministic=True)
        times[i] = (time.perf_counter() - t0) * 1000.0
    return float(np.percentile(times, 99))
