"""The drift test of a summarised window (:class:`~rlops.pipeline_steps.drift.window.WindowSummary`):
:func:`detect_drift_window` reports exactly what :func:`stats.detect_drift` reports on the window's
rows — the same fields, statistics, p-values and verdicts — from the counts the streamed pass kept.
A numeric field's KS statistic is taken from the target's counts at the baseline's distinct values
(:func:`ks_from_counts`, the very float :func:`stats.ks_statistic` gives on the rows); a categorical
field's chi-squared test reads its category counts."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from rlops.pipeline_steps.drift.ks import _kstwo_sf, ks_pvalue
from rlops.pipeline_steps.drift.stats import (
    DEFAULT_BH,
    DEFAULT_MIN_EFFECT,
    DEFAULT_THRESHOLD,
    DriftReport,
    FieldDrift,
    _category_counts,
    _error,
    _kind,
    _numeric_values,
    chi2_counts,
    default_fields,
    finish_report,
)
from rlops.pipeline_steps.drift.stats import _units as units_of
from rlops.pipeline_steps.drift.window import TargetField, WindowSummary, _sorted_no_nan


def ks_from_counts(sorted_b: np.ndarray, cuts: np.ndarray, below: np.ndarray, equal: np.ndarray, nt: int) -> float:
    """:func:`stats.ks_statistic` of the baseline and a target known by its counts at the
    baseline's distinct values (``cuts``): the ECDF gaps at every baseline value, and at the largest
    target value of each interval between them — the same expressions, so the same float."""
    nb = sorted_b.size
    b_le = np.searchsorted(sorted_b, cuts, side="right")  # baseline values at or below each cut
    t_lt = np.cumsum(below)  # t_lt[k]: target values below cuts[k] (k < len(cuts)); t_lt[-1] = nt
    t_le = t_lt[:-1] + equal
    max_s = max(float(np.max(b_le / nb - t_le / nt)), 0.0) if cuts.size else 0.0
    # the target values of interval k (cuts[k-1] <= y < cuts[k]): the largest has t_lt[k] at or below it
    occupied = below > 0
    b_before = np.concatenate([[0], b_le])
    min_s = max(float(np.max(t_lt[occupied] / nt - b_before[occupied] / nb)), 0.0) if occupied.any() else 0.0
    return min_s if min_s > max_s else max_s


def _baseline_units(col: pd.Series, unit: pd.Series | None, numeric: bool) -> float:

    return units_of(col, unit, numeric)


def _test_window_field(
    name: str,
    b: pd.Series | None,
    t: TargetField | None,
    rows: tuple[int, int],
    b_unit: pd.Series | None,
    clustered: bool,
    fit_n: float | None,
) -> FieldDrift:
    if t is not None and not t.kind:
        t = None
    if b is None or t is None:
        side, n = ("baseline", (rows[0], 0)) if t is None else ("target", (0, rows[1]))
        return _error(name, f"field only in the {side}; cannot compare", *n)
    kb, kt = _kind(b), t.kind
    if kb != kt or kb.startswith("unsupported"):
        return _error(name, f"baseline is {kb}, target is {kt}; expected both numeric or both categorical", *rows)
    numeric = kb == "numeric"
    n_eff = None
    if clustered or fit_n:
        nb = _baseline_units(b, b_unit, numeric)
        if clustered:
            assert t.units is not None
            nt = t.units
        else:  # no units: the values (every row of a categorical field) are the draws
            nt = float(max(t.n if numeric else rows[1], 1))
        n_eff = (1.0 / (1.0 / nb + 1.0 / fit_n) if fit_n else nb, nt)
    if not numeric:
        assert t.counts is not None
        return chi2_counts(name, _category_counts(b), t.counts.astype(np.int64), n_eff)
    assert t.cuts is not None and t.below is not None and t.equal is not None
    xb = _numeric_values(b)
    if xb.dtype != t.cuts.dtype:
        xb = xb.astype(np.float64)
    sb = _sorted_no_nan(xb)
    if sb.size == 0 or t.n == 0:
        side = "baseline" if sb.size == 0 else "target"
        return _error(name, f"no non-missing values in the {side}", sb.size, t.n)
    d = ks_from_counts(sb, t.cuts, t.below, t.equal, t.n)
    if n_eff is not None:
        nb_, nt_ = n_eff
        p, method = (
            min(_kstwo_sf(d, float(np.round(nb_ * nt_ / (nb_ + nt_)))), 1.0),
            f"asymp, n_eff={nb_:.0f}/{nt_:.0f}",
        )
    else:
        d, p, method = ks_pvalue(d, sb.size, t.n)
    return FieldDrift(name, "ks", d, p, d, False, int(sb.size), int(t.n), effect_name="ks_statistic", method=method)


def detect_drift_window(
    baseline: pd.DataFrame,
    target: WindowSummary,
    threshold: float = DEFAULT_THRESHOLD,
    min_effect: float = DEFAULT_MIN_EFFECT,
    bh: bool = DEFAULT_BH,
    fields: Sequence[str] | None = None,
    cluster: str | None = None,
    baseline_fit_n: float | None = None,
) -> DriftReport:
    """:func:`stats.detect_drift` of ``baseline`` against a summarised window (``cluster``: the
    column whose values are the units on both sides, as ``clusters`` there)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"detect_drift: threshold={threshold!r} must be in (0, 1]")
    if min_effect < 0.0 or not math.isfinite(min_effect):
        raise ValueError(f"detect_drift: min_effect={min_effect!r} must be a finite number >= 0")
    present = [f for f, t in target.fields.items() if t.kind]
    names = default_fields(baseline, pd.DataFrame(columns=present)) if fields is None else list(dict.fromkeys(fields))
    unknown = [f for f in names if f not in baseline.columns and f not in present]
    if unknown:
        raise ValueError(
            f"detect_drift: field(s) {unknown} are in neither the baseline nor the "
            f"target; baseline columns are {list(baseline.columns)}"
        )
    clustered = bool(cluster) and cluster in baseline.columns and target.clustered
    b_unit = baseline[cluster] if clustered and cluster else None
    rows = (len(baseline), target.rows)
    results = [
        _test_window_field(
            f,
            baseline[f] if f in baseline.columns else None,
            target.fields.get(f) if f in present else None,
            rows,
            b_unit,
            clustered,
            baseline_fit_n,
        )
        for f in names
    ]
    return finish_report(results, threshold, min_effect, bh, rows)
