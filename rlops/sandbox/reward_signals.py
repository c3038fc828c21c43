"""Objective weights that follow a named business signal.

A reward module may let a business signal (a complaint index, a fraud alert level) move the weight
of one objective, within bounds the module declares::

    WEIGHTS = {"compliance": 1.0, "risk": 1.0}
    SIGNAL_WEIGHTS = {
        "compliance": {
            "signal": "complaint_index",   # the signal's name (rlops signal set complaint_index 0.4)
            "range": (0.0, 1.0),           # the values it may take; any other value is refused
            "weights": (1.0, 1.77),        # the objective's weight at the low and the high end
            "baseline": 0.0,               # the value assumed while none is set (default: the low end)
        },
    }

Between the ends the weight is linear in the signal. While no value has been set the weight is
the one at ``baseline``, which must be the ``WEIGHTS`` entry when the module gives one, so a
module behaves as written until the business sets a value. The value in force is bound to the
loaded function (:meth:`rlops.sandbox.reward.RewardFunction.with_signals`); where values come
from and how they are recorded is :mod:`rlops.pipeline_steps.infra.signal_store`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError

SIGNAL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
"""A signal name: lower-case letters, digits and underscores, starting with a letter."""

_KEYS = {"signal", "range", "weights", "baseline"}


@dataclass(frozen=True)
class SignalWeight:
    """One objective whose weight a business signal drives."""

    objective: str
    """The objective (``@component(objective=...)``) whose weight follows the signal."""
    signal: str
    """The business signal's name."""
    low: float
    """The lowest value the signal may take."""
    high: float
    """The highest value the signal may take."""
    weight_low: float
    """The objective's weight when the signal is at ``low``."""
    weight_high: float
    """The objective's weight when the signal is at ``high``."""
    baseline: float
    """The value assumed while no value has been set."""

    def weight(self, value: float) -> float:
        """The objective's weight at ``value`` (linear between the ends)."""
        share = (value - self.low) / (self.high - self.low)
        return self.weight_low + share * (self.weight_high - self.weight_low)

    def refusal(self, value: Any) -> str | None:
        """Why ``value`` cannot be this signal's value (None: it can)."""
        if value is None:
            return "no value (missing)"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"{value!r} is not a number"
        if not math.isfinite(float(value)):
            return f"{value!r} is not a finite number"
        if not self.low <= float(value) <= self.high:
            return f"{value!r} is outside the declared range [{self.low:g}, {self.high:g}]"
        return None


def parse_signal_weights(
    path: Path, module: Any, source: str, objectives: set[str], weights: Mapping[str, float], scheduled: set[str]
) -> tuple[SignalWeight, ...]:
    """The module's ``SIGNAL_WEIGHTS``, checked; a bad declaration is a :class:`PackError` at the line
    that assigns it. ``weights`` are the module's ``WEIGHTS`` as written (before defaults), ``scheduled``
    the objectives ``WEIGHT_SCHEDULE`` moves (a weight cannot follow both a schedule and a signal)."""
    raw = getattr(module, "SIGNAL_WEIGHTS", None)
    if raw is None:
        return ()
    m = re.search(r"^SIGNAL_WEIGHTS\s*[:=]", source, re.M)
    line = None if m is None else source.count("\n", 0, m.start()) + 1

    def bad(msg: str) -> PackError:
        return PackError(str(path), line, "SIGNAL_WEIGHTS", msg)

    if not isinstance(raw, dict):
        raise bad(f"expected a mapping objective → {{signal, range, weights[, baseline]}}, got {raw!r}")
    out = []
    for objective, spec in raw.items():
        where = f"SIGNAL_WEIGHTS[{objective!r}]"
        if objective not in objectives:
            raise bad(f"{where}: unknown objective (objectives: {sorted(objectives)})")
        if objective in scheduled:
            raise bad(f"{where}: WEIGHT_SCHEDULE moves this objective too; a weight follows a schedule or a signal")
        if not isinstance(spec, dict) or not {"signal", "range", "weights"} <= set(spec) <= _KEYS:
            raise bad(
                f"{where}: expected {{'signal': name, 'range': (low, high), 'weights': (at low, at high)"
                f"[, 'baseline': value]}}, got {spec!r}"
            )
        name = spec["signal"]
        if not isinstance(name, str) or not SIGNAL_NAME.match(name):
            raise bad(
                f"{where}: signal name {name!r}: expected lower-case letters, digits and _ (e.g. complaint_index)"
            )
        low, high = _pair(spec["range"], f"{where}['range']", bad)
        if not low < high:
            raise bad(f"{where}['range']: expected low < high, got ({low:g}, {high:g})")
        w_low, w_high = _pair(spec["weights"], f"{where}['weights']", bad)
        baseline = spec.get("baseline", low)
        sw = SignalWeight(objective, name, low, high, w_low, w_high, float(low))
        why = sw.refusal(baseline)
        if why is not None:
            raise bad(f"{where}['baseline']: {why}")
        sw = SignalWeight(objective, name, low, high, w_low, w_high, float(baseline))
        written = weights.get(objective)
        if written is not None and not math.isclose(written, sw.weight(sw.baseline), rel_tol=1e-9, abs_tol=1e-12):
            raise bad(
                f"{where}: WEIGHTS gives {objective} {written:g}, but the signal's weight at its baseline "
                f"{sw.baseline:g} is {sw.weight(sw.baseline):g}; they must agree (the module as written)"
            )
        out.append(sw)
    return tuple(out)


def _pair(value: Any, where: str, bad: Any) -> tuple[float, float]:
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v)) for v in value)
    )
    if not ok:
        raise bad(f"{where}: expected two finite numbers, got {value!r}")
    return float(value[0]), float(value[1])


def bind_values(declared: tuple[SignalWeight, ...], values: Mapping[str, float]) -> tuple[tuple[str, float], ...]:
    """``values`` restricted to the signals ``declared`` names, each checked against every declaration
    of it; a value a declaration refuses is a ``ValueError`` naming the signal."""
    out = {}
    for sw in declared:
        if sw.signal not in values:
            continue
        why = sw.refusal(values[sw.signal])
        if why is not None:
            raise ValueError(f"signal {sw.signal}: {why} (SIGNAL_WEIGHTS[{sw.objective!r}])")
        out[sw.signal] = float(values[sw.signal])
    return tuple(sorted(out.items()))
