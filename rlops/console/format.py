"""How the console writes numbers: rounded for a person, with their unit, never a raw float.

``number(11029.00390625, "EUR")`` → ``11,029 EUR``; ``number(0.0123)`` → ``0.0123``;
``percent(0.953)`` → ``95.3%``. Every template reads numbers through these (Jinja filters
``num``, ``pct``, ``signed``), so one page cannot print ``11029.00390625`` while another rounds.
"""

from __future__ import annotations

import math
from typing import Any

from jinja2 import Undefined

MISSING = "—"
# Gate-table rows whose values carry a unit (the rest are rates, shares or plain numbers).
GATE_UNITS = {"latency_p99_ratio": "ms"}  # the latency gate's values are the two p99 times
GATE_PERCENT = ("finite_returns",)  # a share of returns; every ``*_rate`` is a percentage too


def _float(v: Any) -> float | None:
    if v is None or isinstance(v, (bool, Undefined)):
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def number(v: Any, unit: str | None = None) -> str:
    """A number rounded to what a person reads (4 significant digits, thousands separated),
    followed by ``unit``; text passes through; None, NaN and inf read ``—``."""
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, Undefined):
        return MISSING
    f = _float(v)
    if f is None:
        return MISSING if v is None or isinstance(v, (int, float)) else str(v)
    a = abs(f)
    if f == int(f) and a < 1e15:
        text = f"{int(f):,}"
    elif a >= 1000:
        text = f"{f:,.0f}"
    elif a >= 1:
        text = f"{f:.4g}" if a < 100 else f"{f:.1f}"
    else:
        text = f"{f:.3g}"
    if not unit:
        return text
    return f"{text}{unit}" if unit in ("%", "‰") else f"{text} {unit}"


def signed(v: Any, unit: str | None = None) -> str:
    """:func:`number` with an explicit sign (reward components)."""
    f = _float(v)
    if f is None:
        return number(v, unit)
    return ("+" if f > 0 else "") + number(f, unit)


def percent(v: Any, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage (``0.953`` → ``95.3%``)."""
    f = _float(v)
    return MISSING if f is None else f"{100 * f:.{digits}f}%"


def gate_value(v: Any, name: str) -> str:
    """A gate's or summary metric's value in its own unit: rates and shares as percentages,
    ``*_ms`` (and the latency gate, whose values are p99 times) in ms, anything else rounded."""
    if isinstance(v, str):
        return v
    base = name.split(":", 1)[1] if name.startswith("ab:") else name
    if base in GATE_PERCENT or base.endswith("_rate"):
        return percent(v, 2)
    if base.startswith("segment:") or base in ("mean_return", "std_return"):
        return number(v)
    return number(v, GATE_UNITS.get(base) or ("ms" if base.endswith("_ms") else None))


def install(env: Any) -> None:
    """Register the filters on a Jinja environment."""
    env.filters.update(num=number, pct=percent, signed=signed, gate_value=gate_value)
