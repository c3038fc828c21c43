"""The drift defaults of params.yaml catch shifts a business cares about and stay quiet on noise.

Caught: with ``min_effect: 0.05`` a 5% mixture of near-certain fraud scores (KS D ≈ 0.050,
p ≈ 1e-215) and a widened tail of claim amounts (D ≈ 0.039) at 200k rows each were reported as
not drifted. The floor is now 0.02: at these sizes sampling noise stays under D ≈ 0.006.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlops.common.config import load_params
from rlops.pipeline_steps.drift.stats import detect_drift

N = 200_000


def _detect(baseline: pd.DataFrame, target: pd.DataFrame):
    cfg = load_params()["drift"]
    return detect_drift(
        baseline, target, threshold=float(cfg["threshold"]), min_effect=float(cfg["min_effect"]), bh=bool(cfg["bh"])
    )


def _worlds(seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "state.fraud_score": rng.beta(2, 8, N),
            "state.claim_amount": rng.lognormal(8.0, 0.6, N),
            "state.age": rng.normal(45, 12, N).round(),
            "state.channel": rng.choice(["app", "web", "branch"], N),
        }
    )


def test_business_shifts_are_caught_by_default() -> None:
    base = _worlds(0)
    live = _worlds(1)
    rng = np.random.default_rng(2)
    mix = rng.random(N) < 0.05
    live["state.fraud_score"] = np.where(mix, rng.uniform(0.985, 1.0, N), live["state.fraud_score"])
    tail = rng.random(N) < 0.10
    live["state.claim_amount"] = np.where(
        tail, rng.lognormal(8.0, 0.6, N) * rng.uniform(1.0, 4.0, N), live["state.claim_amount"]
    )
    rep = _detect(base, live)
    effects = {f.field: f.effect for f in rep.tested}
    assert 0.045 < effects["state.fraud_score"] < 0.055 and 0.03 < effects["state.claim_amount"] < 0.05, effects
    assert set(rep.drifted_fields) == {"state.fraud_score", "state.claim_amount"}, rep.drifted_fields


def test_stable_windows_stay_quiet_by_default() -> None:
    alarms = [_detect(_worlds(10 + k), _worlds(20 + k)).drifted_fields for k in range(5)]
    assert alarms == [[]] * 5, alarms
