"""The champion return anomaly: has the live return fallen, beyond what noise and the sandbox's
own error explain?

The drift check compares the live mean episode return of the hour with the calibrated sandbox's
prediction for the champion. The sandbox's absolute level is only as good as its calibration, and
a calibration fitted on an hour of traffic moves it: on the credit pack the champion's predicted
return went 0.70 → 0.78 → 0.66 over three hourly recalibrations of one unchanged world, while
the live return held at 0.63–0.76 (an oracle's own hourly return on 1,000 episodes moves by
±0.05). A drop against the sandbox alone is therefore not evidence that the world changed. The
anomaly needs both:

* **against the sandbox**: ``sandbox − live > max(anomaly_drop, z·se)``, and
* **against the champion's own live return at the previous check** of the same serving policy:
  ``previous − live > z·se`` (``se`` of the difference of the two means),

with ``z = drift.anomaly_z`` (3 by default). The sandbox is rarely within ``anomaly_drop`` of a
live return, so in a stable world the second reference decides, and it is a one-sided test of two
independent hourly means: it trips in about the normal tail beyond ``z`` (0.13% at 3, 0.003% at 4)
— once per check, every hour, so the tail is a rate of false alarms per pack-hour. Episodes
are independent draws, so the hourly means spread as their standard errors say (2,000 stable hours
of 1,000 oracle episodes: the means' spread 0.0297 against their mean se 0.0296 on the credit pack,
0.0375 against 0.0374 on the complaint pack; at ``z = 3`` 0 and 2 of 1,999 checks tripped, at 2.5
5 and 14; 0–4 at 3 on the four built-in packs; ``bench/anomaly_false_alarms.py`` measures it on
any pack). Most of an hour's spread is
the outcomes' own chance (a loan repaid or not), not the mix of requests: the applicants' first
observed fields explain 2.5% of the credit pack's return variance. An hour 2–3 standard errors
below the one before is therefore ordinary, and the oracle's return on the same episodes falls as
far: the twelve-hour timeline's hour 11 is such an hour (the oracle falls 2.5 standard errors, one
champion 3.3), and at z = 3 it raised an alarm in one of four runs. A real change whose only trace
is the return looks the same for one hour: the 48-hour timeline's reward-rule change fell 3.4
standard errors, seen at 3, unseen at 4. Each false alarm costs a recalibration and an emergency
retrain that the promotion gates then judge; a missed change costs the served policy its fit. The
default stays 3; telling a chance hour from a lasting fall needs more than one hour (the next
check against the level before the fall), which this check does not do yet.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ReturnSummary:
    """One window's live episode returns, as the next check needs them."""

    mean: float
    var: float
    episodes: int
    policy_version: str | None
    run_key: str

    @classmethod
    def of(cls, returns: np.ndarray, policy_version: str | None, run_key: str) -> ReturnSummary:
        r = np.asarray(returns, dtype=np.float64)
        return cls(
            float(r.mean()) if r.size else math.nan,
            float(r.var(ddof=1)) if r.size > 1 else math.nan,
            int(r.size),
            policy_version,
            run_key,
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReturnSummary:
        return cls(float(d["mean"]), float(d["var"]), int(d["episodes"]), d.get("policy_version"), str(d["run_key"]))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _se(a: ReturnSummary, b: ReturnSummary) -> float:
    if a.episodes < 2 or b.episodes < 2 or not (math.isfinite(a.var) and math.isfinite(b.var)):
        return 0.0
    return math.sqrt(a.var / a.episodes + b.var / b.episodes)


def return_anomaly(
    live: ReturnSummary,
    sandbox: ReturnSummary,
    previous: ReturnSummary | None,
    min_drop: float,
    z: float,
) -> dict[str, Any]:
    """The verdict (pure): ``anomaly``, the two drops and their thresholds, and which references
    were used (see the module docstring)."""
    if live.episodes == 0 or sandbox.episodes == 0:
        return {"anomaly": False, "drop": 0.0, "threshold": min_drop, "reference": "none"}
    drop = sandbox.mean - live.mean
    threshold = max(min_drop, z * _se(live, sandbox))
    out: dict[str, Any] = {"anomaly": False, "drop": drop, "threshold": threshold}
    if (
        previous is None
        or previous.episodes < 2
        or previous.policy_version != live.policy_version
        or previous.run_key == live.run_key
    ):
        out["reference"] = f"none: no earlier check of {live.policy_version or 'this policy'} to compare with"
        return out
    prev_drop = previous.mean - live.mean
    prev_threshold = z * _se(live, previous)
    out.update(
        anomaly=bool(drop > threshold and prev_drop > prev_threshold),
        previous_drop=prev_drop,
        previous_threshold=prev_threshold,
        previous_run_key=previous.run_key,
        reference="sandbox and previous check",
    )
    return out


def check_return_anomaly(
    ctx: Any, live_returns: np.ndarray, sandbox_returns: np.ndarray, policy_version: str | None
) -> dict[str, Any]:
    """The drift check's call: the verdict against the sandbox and the previous check's live
    summary (read from, then replaced in, the drift state; nothing is written on a dry run)."""
    live = ReturnSummary.of(live_returns, policy_version, ctx.run_key)
    sandbox = ReturnSummary.of(sandbox_returns, policy_version, ctx.run_key)
    state_uri = ctx.uri("drift_state", ctx.scenario, "live_return.json")
    previous = ReturnSummary.from_dict(ctx.storage.read_json(state_uri)) if ctx.storage.exists(state_uri) else None
    cfg = ctx.config.drift
    verdict = return_anomaly(live, sandbox, previous, float(cfg.anomaly_drop), float(cfg.anomaly_z))
    if not ctx.dry_run and live.episodes > 1:
        ctx.storage.write_json(state_uri, live.to_dict())
    return verdict


__all__ = ["ReturnSummary", "return_anomaly", "check_return_anomaly"]
