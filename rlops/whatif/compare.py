"""Side-by-side figures of two policies on the same episodes, with confidence intervals.

Each figure of each policy is a mean over the episodes it counts, with a two-sided interval: the
Wilson score interval for a rate (exact enough at 0 % and 100 %, where the normal one collapses),
the normal interval of the mean otherwise. The difference (what-if − champion) is paired when both
policies count the same episodes — the same seeds, so the episode-to-episode spread cancels — and
otherwise (a KPI with ``when``: each policy counts its own approvals) a Welch-style interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # the console formats figures with this module; it need not import torch for it
    from rlops.whatif.episodes import Played


@dataclass(frozen=True)
class Estimate:
    """A mean and its two-sided interval over ``n`` episodes (NaN when there are none)."""

    mean: float
    low: float
    high: float
    n: int

    def to_dict(self) -> dict[str, Any]:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


_NONE = Estimate(math.nan, math.nan, math.nan, 0)


def z_of(confidence: float) -> float:
    """The standard normal quantile of a two-sided ``confidence`` interval (1.96 at 0.95)."""
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def mean_interval(values: np.ndarray, z: float, rate: bool) -> Estimate:
    """Mean of ``values`` with its interval: Wilson for a rate (values 0/1), normal otherwise."""
    n = int(values.size)
    if n == 0:
        return _NONE
    m = float(values.mean())
    if rate:
        centre = (m + z * z / (2 * n)) / (1 + z * z / n)
        half = z * math.sqrt(m * (1 - m) / n + z * z / (4 * n * n)) / (1 + z * z / n)
        return Estimate(m, max(0.0, centre - half), min(1.0, centre + half), n)
    half = z * float(values.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
    return Estimate(m, m - half, m + half, n)


def difference(a: np.ndarray, a_counted: np.ndarray, b: np.ndarray, b_counted: np.ndarray, z: float) -> Estimate:
    """``mean(b) − mean(a)`` with its interval: paired over episodes both count when they count the
    same ones, else from the two means' standard errors."""
    if a_counted.all() and b_counted.all():
        d = b - a
        n = int(d.size)
        if n == 0:
            return _NONE
        half = z * float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else math.nan
        return Estimate(float(d.mean()), float(d.mean()) - half, float(d.mean()) + half, n)
    xa, xb = a[a_counted], b[b_counted]
    if xa.size < 2 or xb.size < 2:
        return _NONE
    m = float(xb.mean() - xa.mean())
    half = z * math.sqrt(float(xa.var(ddof=1)) / xa.size + float(xb.var(ddof=1)) / xb.size)
    return Estimate(m, m - half, m + half, int(min(xa.size, xb.size)))


def _side_by_side(a: np.ndarray, ac: np.ndarray, b: np.ndarray, bc: np.ndarray, z: float, rate: bool) -> dict[str, Any]:
    return {
        "champion": mean_interval(a[ac], z, rate).to_dict(),
        "whatif": mean_interval(b[bc], z, rate).to_dict(),
        "difference": difference(a, ac, b, bc, z).to_dict(),
    }


def compare(
    champion: Played, whatif: Played, segments: dict[str, np.ndarray], rates: set[str], confidence: float
) -> dict[str, Any]:
    """Per segment (``overall`` first): the returns under each reward and every KPI, side by side.
    ``rates``: the KPIs that are rates (a bool expression or a built-in rate)."""
    z = z_of(confidence)
    n = next(iter(champion.returns.values())).size
    out: dict[str, Any] = {}
    for seg, mask in {"overall": np.ones(n, dtype=bool), **segments}.items():
        block: dict[str, Any] = {"episodes": int(mask.sum()), "returns": {}, "kpis": {}}
        everyone = np.ones(int(mask.sum()), dtype=bool)
        for reward in champion.returns:
            a, b = champion.returns[reward][mask], whatif.returns[reward][mask]
            block["returns"][reward] = _side_by_side(a, everyone, b, everyone, z, False)
        for name, (av, ac) in champion.kpis.items():
            bv, bc = whatif.kpis[name]
            block["kpis"][name] = _side_by_side(av[mask], ac[mask], bv[mask], bc[mask], z, name in rates)
        out[seg] = block
    return out


def format_estimate(e: dict[str, Any], rate: bool, signed: bool = False) -> str:
    """``12.3% [10.1%, 14.6%]`` (a rate) or ``1.234 [1.2, 1.27]``; ``n/a`` when nothing was counted."""
    if e["mean"] is None:
        return "n/a"
    sign = "+" if signed else ""
    f = f"{{:{sign}.1%}}" if rate else f"{{:{sign}.4g}}"
    if e["low"] is None or e["high"] is None:
        return f.format(e["mean"])
    return f"{f.format(e['mean'])} [{f.format(e['low'])}, {f.format(e['high'])}]"


__all__ = ["Estimate", "compare", "difference", "format_estimate", "mean_interval", "z_of"]
