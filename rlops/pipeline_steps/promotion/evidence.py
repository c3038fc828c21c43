"""The rungs of evidence a promotion rests on, and what each one allows.

1. **The sandbox** decides only once it has earned trust: the incumbent (the champion, or the
   rule engine before the first one) played in the world the gates judge in must earn what it
   earned on the logged traffic — its sandbox value within the logged value's interval widened by
   ``ope.gap_threshold`` × the logged value's scale (a share: the same test for clicks and credit
   returns).
   An untrusted sandbox's gates (:data:`SANDBOX_GATES`) are shown but do not decide.
2. **Off-policy evaluation** on the logged traffic (``ope:dr``): ``pass`` allows full traffic,
   ``fail`` refuses, insufficient evidence (shown ``skipped`` with its reason) allows at most the
   canary stage.
3. **Live A/B** of a staged challenger (``ab:*``), the last word: judged and passing, it allows
   the next stage whatever rung 2 said.

:func:`judge` reads the gate rows and says which gates decide and why a candidate may go at most
to the canary stage (``hold``); :mod:`rlops.pipeline_steps.promotion.flow` acts on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlops.common.params_operations import OpeParams
from rlops.pipeline_steps.promotion.gates import Gate
from rlops.pipeline_steps.promotion.ope_gate import INSUFFICIENT
from rlops.pipeline_steps.promotion.ope_value import value_scale

#: Gates judged in the sandbox: shown but not deciding while the sandbox is untrusted.
SANDBOX_GATES = ("mean_return", "completion_rate", "handling_ms", "human_takeover_rate")
SANDBOX_GATE_PREFIX = "segment:"
TRUST_GATE = "sandbox:trust"


def is_sandbox_gate(name: str) -> bool:
    return name in SANDBOX_GATES or name.startswith(SANDBOX_GATE_PREFIX)


def trust_row(
    incumbent_sandbox: float, logged: float, logged_se: float, logged_sd: float, incumbent: str, cfg: OpeParams
) -> Gate:
    """``sandbox:trust``: whether the sandbox reproduces the incumbent's logged value. ``pass``:
    trusted; ``skipped``: untrusted (its gates do not decide) or nothing logged to check it with."""
    threshold = f"|sandbox − logged| ≤ z·se + {cfg.gap_threshold:.0%} of the logged scale"
    if not (math.isfinite(logged) and math.isfinite(incumbent_sandbox)):
        return Gate(
            TRUST_GATE,
            incumbent_sandbox,
            None,
            threshold,
            True,
            f"skipped: no logged return of the {incumbent} to check the sandbox against: its gates decide unchecked",
            skipped=True,
        )
    from scipy.stats import norm

    z = float(norm.ppf(0.5 + cfg.confidence / 2))
    se = logged_se if math.isfinite(logged_se) else 0.0
    slack = z * se + cfg.gap_threshold * value_scale(logged, logged_sd, cfg)
    ratio = incumbent_sandbox / logged if logged else float("inf")
    trusted = abs(incumbent_sandbox - logged) <= slack
    detail = (
        f"the {incumbent} earns {incumbent_sandbox:.4g} in the sandbox and {logged:.4g} ± {z * se:.3g} on logged "
        f"traffic (sim-to-real ratio {ratio:.3g})"
    )
    if trusted:
        return Gate(TRUST_GATE, incumbent_sandbox, logged, threshold, True, f"trusted: {detail}")
    return Gate(
        TRUST_GATE,
        incumbent_sandbox,
        logged,
        threshold,
        True,
        f"skipped: UNTRUSTED: {detail}; the sandbox gates are shown but do not decide, and the candidate needs "
        "off-policy or live A/B evidence",
        skipped=True,
    )


def sandbox_trusted(rows: list[Gate]) -> bool:
    """False only when a ``sandbox:trust`` row says the sandbox is untrusted."""
    row = next((g for g in rows if g.gate == TRUST_GATE), None)
    return row is None or not row.detail.startswith("skipped: UNTRUSTED")


@dataclass(frozen=True)
class Evidence:
    """What the evidence allows a candidate whose deciding gates pass."""

    sandbox_trusted: bool
    ope_state: str
    """``pass``, ``fail``, ``insufficient`` or ``off``."""
    live_ab: str
    """``pass`` (judged and passing), ``fail``, or ``none`` (not judged: no challenger traffic yet)."""
    hold: str | None
    """Why the candidate may go at most to the canary stage (None: full traffic allowed)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def deciding(rows: list[Gate]) -> list[Gate]:
    """The rows whose verdict counts: all of them, less the sandbox gates of an untrusted sandbox."""
    trusted = sandbox_trusted(rows)
    return [g for g in rows if trusted or not is_sandbox_gate(g.gate)]


def judge(rows: list[Gate], required: bool) -> Evidence:
    """The evidence of a gate table (see the module's rungs); ``required`` false (``ope.required``)
    lets a candidate without off-policy evidence go further than the canary stage."""
    trusted = sandbox_trusted(rows)
    ope = next((g for g in rows if g.gate == "ope:dr"), None)
    ope_state = "off" if ope is None else ("insufficient" if ope.skipped else ope.status)
    ab = [g for g in rows if g.gate.startswith("ab:") and not g.skipped]
    live = "none" if not ab else ("pass" if all(g.passed for g in ab) else "fail")
    hold: str | None = None
    if ope_state != "pass" and live != "pass":
        why = (
            "off-policy evaluation is off (ope.enabled)"
            if ope is None
            else ope.detail.removeprefix("skipped: ").removeprefix(INSUFFICIENT)
        )
        if required and (ope_state == "insufficient" or ope is None):
            hold = f"the off-policy evidence is insufficient ({why})"
            if not trusted:
                hold = "the sandbox is untrusted and " + hold
    return Evidence(trusted, ope_state, live, hold)


__all__ = ["SANDBOX_GATES", "TRUST_GATE", "Evidence", "deciding", "is_sandbox_gate", "judge", "trust_row"]
