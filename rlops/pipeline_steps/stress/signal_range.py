"""The stress test over a business signal's whole declared range.

A reward weight that follows a signal (:mod:`rlops.sandbox.reward_signals`) is a family of reward
functions, one per value the business may set. The stress test checks the one in force and, here,
the ends of every declared range: the reward checks on the same edge states and the gaming probes,
with the weights each end gives. The weight is linear in the signal, so a check on totals (bounds,
sums, gaming) that holds at both ends of one signal holds in between; with several signals every
corner of their box is checked (up to :data:`MAX_CORNER_SIGNALS` signals, else both all-low and
all-high).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from rlops.pipeline_steps.stress.checks import Finding, check_reward
from rlops.pipeline_steps.stress.probes import ProbeResult, run_gaming_probes

if TYPE_CHECKING:
    from rlops.common.params_promotion import StressConfig
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward import RewardFunction

MAX_CORNER_SIGNALS = 3


def signal_ends(fn: RewardFunction) -> list[dict[str, float]]:
    """The signal values the range check runs at: each end of every declared range (the intersection
    where one signal drives several objectives), as corners of their box."""
    ranges: dict[str, tuple[float, float]] = {}
    for sw in fn.signal_weights:
        lo, hi = ranges.get(sw.signal, (sw.low, sw.high))
        ranges[sw.signal] = (max(lo, sw.low), min(hi, sw.high))
    names = sorted(ranges)
    if len(names) <= MAX_CORNER_SIGNALS:
        return [dict(zip(names, corner)) for corner in itertools.product(*(ranges[n] for n in names))]
    return [{n: ranges[n][k] for n in names} for k in (0, 1)]


def stress_signal_range(
    pack: Pack, fn: RewardFunction, S: torch.Tensor, bound: float, cfg: StressConfig, probes: bool = True
) -> tuple[list[Finding], list[ProbeResult], list[dict[str, Any]]]:
    """``(findings, probe results, one summary row per end)`` of ``fn`` at each of :func:`signal_ends`;
    findings and probes name the end they were found at."""
    findings: list[Finding] = []
    results: list[ProbeResult] = []
    rows = []
    for values in signal_ends(fn):
        at = fn.with_signals(values)
        label = ", ".join(f"{k} {v:g}" for k, v in values.items())
        _, found, _ = check_reward(pack, at, S, bound, cfg.sum_tolerance, sims=[(f"nominal at {label}", pack, None)])
        probed: list[ProbeResult] = []
        baselines: dict[str, float] = {}
        if probes and not any(f.check == "raised" for f in found):
            probed, baselines = run_gaming_probes(
                pack, at, cfg.gaming_episodes, cfg.gaming_seed, cfg.gaming_margin, cfg.baselines
            )
            probed = [replace(p, name=f"{p.name} at {label}") for p in probed]
        findings += found
        results += probed
        rows.append(
            {
                "at": label,
                "signals": values,
                "weights": at.weights_at(0),
                "baselines": baselines,
                "findings": len(found),
                "probes_failed": sum(not p.passed for p in probed),
            }
        )
    return findings, results, rows
