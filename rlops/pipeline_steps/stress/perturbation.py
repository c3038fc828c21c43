"""The perturbed simulations of ``rlops stress``: a copy of the pack with one more simulation
profile, :data:`STRESS_PROFILE`, in which latencies, error rates or the population are made worse
(the policy's perturbations, ``stress.perturbations``), or every action fails at a set rate with
latency jitter over a set range (the harsh simulation the reward checks run in beside the nominal
one, :func:`rlops.pipeline_steps.stress.checks.reward_simulations`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.pack import Pack, apply_calibration
from rlops.sandbox.spec import parse_scenario
from rlops.sandbox.yaml_lines import load_yaml

STRESS_PROFILE = "stress"


def scaled_error_rate(rate: float, k: float) -> float:
    """An error rate ``k`` times as bad: each call fails as often as one of ``k`` calls in a row
    would, ``1 − (1 − rate)^k`` — about ``k · rate`` for a rare error, never a certain one. (``k ·
    rate`` capped at 1 turned five times a flaky API's 0.26 into an API that always fails: a
    world no policy completes an episode in, which tells policies apart only by how they fail.)"""
    return float(1.0 - (1.0 - min(max(rate, 0.0), 1.0)) ** k)


def perturbed_pack(
    pack: Pack,
    base_profile: str | None = None,
    latency: float = 1.0,
    errors: float = 1.0,
    segment: str | None = None,
    action_error_rate: float | None = None,
    jitter_ms: tuple[float, float] | None = None,
) -> Pack:
    """A copy of ``pack`` with a profile :data:`STRESS_PROFILE`: ``base_profile`` with action
    latencies and jitter ×``latency``, error rates ×``errors`` (:func:`scaled_error_rate`), optionally every
    episode in population segment ``segment``, every action's own error rate set to
    ``action_error_rate`` and the jitter range replaced by ``jitter_ms``."""
    doc = load_yaml(pack.path / "scenario.yaml")
    if pack.calibration:
        doc = apply_calibration(doc, pack.calibration)
    doc = copy.deepcopy(doc)
    base = base_profile or pack.scenario.spec.default_profile
    if not doc.get("simulation"):  # no simulation block: the implicit empty "sandbox" profile
        doc["simulation"] = {"profiles": {base: {}}}
    profiles = doc["simulation"]["profiles"]
    if base not in profiles:
        raise ValueError(f"unknown simulation profile {base!r} (profiles of {pack.name}: {sorted(profiles)})")
    for a in doc["actions"]:
        lat = a.get("latency_ms")
        if isinstance(lat, dict):
            for k in ("mean", "std"):
                if k in lat:
                    lat[k] = float(lat[k]) * latency
        elif lat is not None:
            a["latency_ms"] = float(lat) * latency
        rate = float(a.get("error_rate", 0.0)) if action_error_rate is None else action_error_rate
        a["error_rate"] = rate if action_error_rate is not None else scaled_error_rate(rate, errors)
    prof = copy.deepcopy(profiles[base])
    jit = prof.get("latency_jitter_ms") or {"min": 0.0, "max": 0.0}
    lo, hi = jitter_ms if jitter_ms is not None else (float(jit["min"]) * latency, float(jit["max"]) * latency)
    prof["latency_jitter_ms"] = {"min": lo, "max": hi}
    prof["action_latency_ms"] = {
        name: {k: float(v) * latency for k, v in own.items()}
        for name, own in (prof.get("action_latency_ms") or {}).items()
    }
    rates = prof.get("error_rates") or {}
    prof["error_rates"] = {api: scaled_error_rate(float(r), errors) for api, r in rates.items()}
    if segment is not None:
        shift = _find_shift(profiles, segment)
        if shift is None:
            raise ValueError(f"unknown population segment {segment!r}: no profile of {pack.name} declares it")
        shift = copy.deepcopy(shift)
        shift["probability"] = 1.0
        prof["population"] = [shift]
    profiles[STRESS_PROFILE] = prof
    scn = CompiledScenario(parse_scenario(doc, pack.scenario.file))
    return Pack(pack.path, scn, pack.rules, pack.reward_fns, pack.params, pack.calibration)


def _find_shift(profiles: Mapping[str, Any], name: str) -> Any:
    for p in profiles.values():
        for s in (p or {}).get("population") or []:
            if s.get("name") == name:
                return s
    return None
