"""Drift detection between two windows of trace rows: is live traffic still like the baseline?

Per field, one two-sample test:

* numeric fields: Kolmogorov–Smirnov, with the statistic and p-value of
  ``scipy.stats.ks_2samp(baseline, target)`` (``method='auto'``: exact for samples of at most
  10 000 values, asymptotic otherwise). The statistic is the same float, bit for bit; the
  p-value comes from scipy's distribution code, except in one slow case (:func:`_kstwo_sf`)
  where the same series is summed in extended precision, a few ulps from scipy's value;
* categorical fields (strings, categories, booleans): chi-square on the 2×k table of category
  counts (``scipy.stats.chi2_contingency``); a missing value is a category of its own, so a
  change in how often ``error`` is empty is drift too.

A p-value alone is a poor alarm on large windows: at a million rows a 0.01σ shift already has
p < 1e-8. A field is *drifted* only when ``p < threshold`` **and** the effect is at least
``min_effect``: the KS statistic for numeric fields, the total-variation distance for
categorical ones. Both are "the largest difference in probability of one event" (a half-line
for KS, any set of categories for TV), so one floor serves both. ``bh=True`` first adjusts the
p-values for testing many fields at once (Benjamini–Hochberg).

Trace rows are not independent draws: the rows of one episode repeat its applicant's age, income
and so on. With ``clusters`` (each row's episode id on either side) a p-value counts the
episodes that have a value, not the rows (KS: the asymptotic distribution at those sizes;
chi-square: the table scaled to them), so a window of 1 000 episodes is not tested as if it
held 5 000 independent applicants. With ``baseline_fit_n`` the baseline is known to be a model
fitted to that many episodes (a calibrated sandbox): its own estimation error is counted too,
``1/n = 1/n_sampled + 1/n_fitted``.

Default fields: the ``state.<field>`` columns of the trace record plus the operational columns
``latency_ms`` and ``error``. A field present on one side only, or of a different kind on each
side, becomes an error entry in the report; the other fields are still tested.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from decimal import Decimal, localcontext
from fractions import Fraction
from functools import cache
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats

from rlops.data_contracts.schema import STATE_PREFIX

try:  # scipy's exact small-sample p-value from (n1, n2, D); public ks_2samp is the fallback
    from scipy.stats._stats_py import _attempt_exact_2kssamp
except ImportError:  # pragma: no cover - depends on the scipy release
    _attempt_exact_2kssamp = None

OPERATIONAL_FIELDS = ("latency_ms", "error")
MISSING = "(no value)"
DEFAULT_THRESHOLD = 0.01
DEFAULT_MIN_EFFECT = 0.02

_MAX_EXACT_N = 10_000  # scipy's MAX_AUTO_N: 'auto' is exact when both samples are this small
_BLOCK = 64  # block size of the bound-and-refine search for the ECDF gap
_FAST_SMIRNOV_MIN_N = 4096
_SMIRNOV_MAX_COMPUTE_N = 1_000_000  # above this scipy uses a closed-form approximation
# the fast Smirnov sum needs x87 80-bit long double (64-bit mantissa); elsewhere scipy sums
_HAS_X87_LONG_DOUBLE = np.finfo(np.longdouble).nmant == 63


@dataclass(frozen=True)
class FieldDrift:
    """The test of one field. ``test`` is ``"ks"``, ``"chi2"`` or ``"error"`` (then ``error``
    says why and the numbers are NaN). ``p_adjusted`` is the p-value the decision used (the
    Benjamini–Hochberg adjusted one with ``bh=True``, else ``p_value``)."""

    field: str
    test: str
    statistic: float
    p_value: float
    effect: float
    drifted: bool
    n_baseline: int
    n_target: int
    p_adjusted: float = math.nan
    effect_name: str = ""
    method: str = ""
    error: str | None = None


@dataclass(frozen=True)
class DriftReport:
    """All field tests of one baseline/target comparison."""

    fields: list[FieldDrift]
    threshold: float = DEFAULT_THRESHOLD
    min_effect: float = DEFAULT_MIN_EFFECT
    bh: bool = False
    n_baseline_rows: int = 0
    n_target_rows: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def drifted_fields(self) -> list[str]:
        return [f.field for f in self.fields if f.drifted]

    @property
    def tested(self) -> list[FieldDrift]:
        return [f for f in self.fields if f.test != "error"]

    @property
    def errors(self) -> list[FieldDrift]:
        return [f for f in self.fields if f.test == "error"]

    @property
    def summary(self) -> str:
        """One sentence for people: ``"3 of 12 fields drifted (…)"``."""
        bh = " after BH" if self.bh else ""
        text = (
            f"{len(self.drifted_fields)} of {len(self.tested)} fields drifted "
            f"(p < {self.threshold:g}{bh} and effect ≥ {self.min_effect:g})."
        )
        if self.errors:
            text += f" {len(self.errors)} field(s) could not be compared."
        return text

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["fields"] = [
            {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(f).items()}
            for f in self.fields
        ]
        out["drifted_fields"] = self.drifted_fields
        out["summary"] = self.summary
        return out

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, default=str)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DriftReport:
        """Inverse of :meth:`to_dict` (e.g. a ``report.json`` read back)."""
        rows = [FieldDrift(**_nan_for_null(f)) for f in data["fields"]]
        keep = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "fields"}
        return cls(fields=rows, **keep)


# --------------------------------------------------------------------------- KS statistic
def _max_ecdf_gap(a: np.ndarray, b: np.ndarray) -> float:
    """``max_i F_a(a_i) - F_b(a_i)`` for sorted ``a``, ``b``, as the float scipy computes.

    scipy evaluates ``cdf1 - cdf2`` at every pooled point; the maximum of that difference can
    only be reached where ``F_a`` jumps, i.e. at points of ``a``, and the minimum at points of
    ``b`` (call this with the arguments swapped). At ``a_i`` we use ``(i+1)/n_a``, which is below
    the true ECDF inside a run of ties and so never wins. Rather than search all of ``a`` in
    ``b``, search block starts only: inside a block of ``_BLOCK`` points the difference is at
    most ``end/n_a - F_b(start)``; only blocks whose bound reaches the best value seen are
    searched in full. Every value compared is the same float expression scipy uses.
    """
    na, nb = a.size, b.size
    if na <= 8 * _BLOCK:
        idx = np.arange(na)
    else:
        starts = np.arange(0, na, _BLOCK)
        cb = np.searchsorted(b, a[starts], side="right")
        best = np.max((starts + 1) / na - cb / nb)
        upper = np.minimum(starts + _BLOCK, na) / na - cb / nb
        cand = starts[upper >= best - 1e-9]  # > float error; a wider margin only adds blocks
        idx = (cand[:, None] + np.arange(_BLOCK)).ravel()
        idx = idx[idx < na]
    return float(np.max((idx + 1) / na - np.searchsorted(b, a[idx], side="right") / nb))


def ks_statistic(sorted_a: np.ndarray, sorted_b: np.ndarray) -> float:
    """Two-sided KS statistic of two sorted, NaN-free samples (before scipy's exact-mode
    rounding to a multiple of 1/lcm(n1, n2), which :func:`ks_pvalue` applies)."""
    max_s = max(_max_ecdf_gap(sorted_a, sorted_b), 0.0)
    min_s = max(_max_ecdf_gap(sorted_b, sorted_a), 0.0)
    return min_s if min_s > max_s else max_s


# --------------------------------------------------------------------------- KS p-value
def ks_pvalue(d: float, n1: int, n2: int) -> tuple[float, float, str]:
    """``(statistic, p_value, method)`` as ``ks_2samp(method='auto')`` reports them."""
    if max(n1, n2) <= _MAX_EXACT_N:
        if _attempt_exact_2kssamp is None:  # pragma: no cover - another scipy layout
            raise RuntimeError("this scipy has no _attempt_exact_2kssamp; use ks_2samp itself")
        ok, d, prob = _attempt_exact_2kssamp(n1, n2, math.gcd(n1, n2), d, "two-sided")
        if ok:  # else, like scipy, the asymptotic p-value of the rounded statistic
            return float(d), float(np.clip(prob, 0.0, 1.0)), "exact"
    m, n = sorted([float(n1), float(n2)], reverse=True)
    prob = _kstwo_sf(float(d), float(np.round(m * n / (m + n))))
    return float(d), float(np.clip(prob, 0.0, 1.0)), "asymp"


def _kstwo_sf(d: float, n_eff: float) -> float:
    """``scipy.stats.kstwo.sf(d, n_eff)``.

    scipy evaluates it as ``2 * scipy.special.smirnov(n, d)`` when ``2.2 <= n d² < 370``, and
    that sums ``n(1-d)`` double-double terms one by one: about 0.4 s at n = 500 000, more
    than sorting and comparing a million rows. There the same sum is taken vectorised in
    extended precision (:func:`_smirnov_sf`); every other case goes to scipy itself.
    """
    n = int(n_eff)
    if _HAS_X87_LONG_DOUBLE and _FAST_SMIRNOV_MIN_N <= n <= _SMIRNOV_MAX_COMPUTE_N and 0.0 < d < 0.5:
        t = n * d
        if 1.0 < t < n - 1 and 2.2 <= t * d < 370.0:  # scipy's own branch conditions
            return min(2.0 * _smirnov_sf(n, d), 1.0)
    return float(scipy.stats.kstwo.sf(d, n_eff))


_STIRLING = (1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188, 691 / 360360)


@cache
def _stirlerr_table() -> np.ndarray:
    """``log k! - (k+1/2) log k + k - log(2π)/2`` for k < 64, from 50-digit decimals."""
    with localcontext() as ctx:
        ctx.prec = 50
        half_log_2pi = (2 * Decimal("3.14159265358979323846264338327950288419716939937510")).ln() / 2
        out, fact = [0.0], Decimal(1)
        for k in range(1, 64):
            fact *= k
            dk = Decimal(k)
            out.append(float(fact.ln() - (dk + Decimal("0.5")) * dk.ln() + dk - half_log_2pi))
    return np.array(out)


def _stirlerr(k: np.ndarray) -> np.ndarray:
    """Stirling's error term for integer-valued float ``k >= 1`` (series for k >= 64)."""
    k2, s = k * k, _STIRLING
    out = (s[0] - (s[1] - (s[2] - (s[3] - (s[4] - s[5] / k2) / k2) / k2) / k2) / k2) / k
    small = k < 64
    if small.any():
        out[small] = _stirlerr_table()[k[small].astype(np.int64)]
    result: np.ndarray = out
    return result


def _smirnov_sf(n: int, x: float) -> float:
    """One-sided Smirnov ``P(D+_n >= x)``: ``sum_v C(n,v) x (x+v/n)^(v-1) (1-x-v/n)^(n-v)``.

    Each term is written as a binomial probability in Loader's saddle-point form,
    ``exp(stirlerr(n) - stirlerr(v) - stirlerr(n-v) - bd0(v, n p) - bd0(n-v, n q))`` times a
    smooth factor; the deviance terms carry all the cancellation and are computed in long
    double, so the float64 result is within a few ulps of scipy's double-double sum. Terms
    below ``e^-80`` of the largest (by a float64 pass without the smooth factor, which varies
    by less than ``n`` over the sum) are skipped: together under ``1e-20`` of the result.
    """
    ld = np.longdouble
    n_below = n - math.floor(Fraction(x) * n) - 1  # last v with 1 - x - v/n > 0
    nx_f = n * x
    v = np.arange(1, n_below + 1, dtype=np.float64)
    nv = n - v
    rough = v * np.log1p(nx_f / v) - nv * np.log1p(nx_f / (nv - nx_f))
    keep = np.flatnonzero(rough >= rough.max() - 80.0)
    v, nv = v[keep[0] : keep[-1] + 1], nv[keep[0] : keep[-1] + 1]
    nx = ld(n) * ld(x)
    vl, nvl = v.astype(ld), nv.astype(ld)
    deviance = nvl * np.log1p(nx / (nvl - nx)) - vl * np.log1p(nx / vl)
    log_terms = (_stirlerr(np.array([float(n)]))[0] - _stirlerr(v) - _stirlerr(nv)) - deviance
    log_t0 = ld(n) * np.log1p(-ld(x))  # the v = 0 term, (1-x)^n
    top = max(log_terms.max(), log_t0)
    rel = log_terms - top
    rel_hi = rel.astype(np.float64)
    rel_lo = (rel - rel_hi).astype(np.float64)
    factor = (nx_f / (nx_f + v)) * np.sqrt(n / (2.0 * np.pi * v * nv))
    total = np.sum(np.exp(rel_hi) * (1.0 + rel_lo) * factor, dtype=ld) + np.exp(log_t0 - top)
    return float(total * np.exp(top))


# --------------------------------------------------------------------------- per-field tests
def _numeric_values(col: pd.Series) -> np.ndarray:
    is_int = isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu"  # NaN-free: keep ints
    out: np.ndarray = col.to_numpy() if is_int else col.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def _sorted_no_nan(values: np.ndarray) -> np.ndarray:
    s = np.sort(values)  # NaNs sort last, so dropping them is one binary search
    nan_tail = s.dtype.kind == "f" and s.size and np.isnan(s[-1])
    return s[: np.searchsorted(s, np.nan, side="left")] if nan_tail else s


def _ks_field(name: str, b: pd.Series, t: pd.Series, n_eff: tuple[float, float] | None = None) -> FieldDrift:
    xb, xt = _numeric_values(b), _numeric_values(t)
    if xb.dtype != xt.dtype:  # int vs float: compare as floats, as scipy's concatenation does
        xb, xt = xb.astype(np.float64), xt.astype(np.float64)
    sb, st = _sorted_no_nan(xb), _sorted_no_nan(xt)
    if sb.size == 0 or st.size == 0:
        side = "baseline" if sb.size == 0 else "target"
        return _error(name, f"no non-missing values in the {side}", sb.size, st.size)
    if n_eff is not None:  # independent units fewer than rows: the asymptotic law at their number
        d, (nb, nt) = ks_statistic(sb, st), n_eff
        p, method = min(_kstwo_sf(d, float(np.round(nb * nt / (nb + nt)))), 1.0), f"asymp, n_eff={nb:.0f}/{nt:.0f}"
    elif _attempt_exact_2kssamp is None and max(sb.size, st.size) <= _MAX_EXACT_N:
        ref = scipy.stats.ks_2samp(sb, st)  # pragma: no cover - small samples, another scipy
        d, p, method = float(ref.statistic), float(ref.pvalue), "exact"
    else:
        d, p, method = ks_pvalue(ks_statistic(sb, st), sb.size, st.size)
    return FieldDrift(name, "ks", d, p, d, False, int(sb.size), int(st.size), effect_name="ks_statistic", method=method)


def _category_counts(col: pd.Series) -> pd.Series:
    counts = col.value_counts(dropna=False)
    counts.index = [MISSING if pd.isna(k) else str(k) for k in counts.index]
    return counts.groupby(level=0).sum()  # str() may merge keys like True and "True"


def _chi2_field(name: str, b: pd.Series, t: pd.Series, n_eff: tuple[float, float] | None = None) -> FieldDrift:
    return chi2_counts(name, _category_counts(b), _category_counts(t), n_eff)


def chi2_counts(name: str, cb: pd.Series, ct: pd.Series, n_eff: tuple[float, float] | None = None) -> FieldDrift:
    """The chi-square test of one categorical field from its category counts on each side."""
    if cb.sum() == 0 or ct.sum() == 0:
        return _error(name, "no rows on one side", int(cb.sum()), int(ct.sum()))
    cats = cb.index.union(ct.index)
    table = np.vstack([cb.reindex(cats, fill_value=0).to_numpy(), ct.reindex(cats, fill_value=0).to_numpy()]).astype(
        np.float64
    )
    nb, nt = table.sum(axis=1)
    scaled = table if n_eff is None else table * (np.array(n_eff) / np.array([nb, nt]))[:, None]
    res = scipy.stats.chi2_contingency(scaled)
    tv = 0.5 * float(np.abs(table[0] / nb - table[1] / nt).sum())
    return FieldDrift(
        name,
        "chi2",
        float(res.statistic),
        float(res.pvalue),
        tv,
        False,
        int(nb),
        int(nt),
        effect_name="total_variation",
        method=f"dof={int(res.dof)}" + ("" if n_eff is None else f", n_eff={n_eff[0]:.0f}/{n_eff[1]:.0f}"),
    )


def _nan_for_null(row: dict[str, Any]) -> dict[str, Any]:
    """A stored field row with its nulls read back as NaN (``error`` stays null)."""
    return {k: (math.nan if v is None and k != "error" else v) for k, v in row.items()}


def _error(name: str, why: str, nb: int = 0, nt: int = 0) -> FieldDrift:
    return FieldDrift(name, "error", math.nan, math.nan, math.nan, False, int(nb), int(nt), error=why)


def _kind(col: pd.Series) -> str:
    dt, types = col.dtype, pd.api.types
    if types.is_numeric_dtype(dt) and not types.is_bool_dtype(dt):
        return "numeric"
    if (
        types.is_bool_dtype(dt)
        or isinstance(dt, pd.CategoricalDtype)
        or dt == np.dtype(object)
        or types.is_string_dtype(dt)
    ):
        return "categorical"
    return f"unsupported ({dt})"


def _test_field(
    name: str,
    b: pd.Series | None,
    t: pd.Series | None,
    n_rows: tuple[int, int],
    clusters: tuple[pd.Series, pd.Series] | None = None,
    fit_n: float | None = None,
) -> FieldDrift:
    if b is None or t is None:
        side, n = ("baseline", (n_rows[0], 0)) if t is None else ("target", (0, n_rows[1]))
        return _error(name, f"field only in the {side}; cannot compare", *n)
    kb, kt = _kind(b), _kind(t)
    if kb != kt or kb.startswith("unsupported"):
        return _error(name, f"baseline is {kb}, target is {kt}; expected both numeric or both categorical", *n_rows)
    numeric = kb == "numeric"
    n_eff = None
    if clusters is not None or fit_n:
        nb, nt = (_units(col, unit, numeric) for col, unit in zip((b, t), clusters or (None, None)))
        n_eff = (1.0 / (1.0 / nb + 1.0 / fit_n) if fit_n else nb, nt)
    return _ks_field(name, b, t, n_eff) if numeric else _chi2_field(name, b, t, n_eff)


def _units(col: pd.Series, unit: pd.Series | None, numeric: bool) -> float:
    """Independent draws behind a column: its units (episodes) with a value, or its values (a
    missing value is a category of its own, so every row of a categorical column counts)."""
    has = col.notna().to_numpy() if numeric else np.ones(len(col), dtype=bool)
    return float(max(pd.unique(unit.to_numpy()[has]).size if unit is not None else int(has.sum()), 1))


def _cpu_count() -> int:
    """The CPUs this process may use (containers, taskset), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def default_fields(baseline: pd.DataFrame, target: pd.DataFrame) -> list[str]:
    """``state.*`` columns and ``latency_ms``/``error`` of either side, baseline order first."""
    cols = list(dict.fromkeys([*baseline.columns, *target.columns]))
    return [c for c in cols if isinstance(c, str) and (c.startswith(STATE_PREFIX) or c in OPERATIONAL_FIELDS)]


def benjamini_hochberg(p_values: Sequence[float]) -> np.ndarray:
    """Benjamini–Hochberg adjusted p-values (step-up, monotone, capped at 1)."""
    p = np.asarray(p_values, dtype=np.float64)
    order = np.argsort(p)
    scaled = p[order] * p.size / np.arange(1, p.size + 1)
    adjusted = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    out = np.empty(p.size)
    out[order] = adjusted
    return out


def detect_drift(
    baseline: pd.DataFrame,
    target: pd.DataFrame,
    threshold: float = DEFAULT_THRESHOLD,
    min_effect: float = DEFAULT_MIN_EFFECT,
    bh: bool = False,
    fields: Sequence[str] | None = None,
    workers: int | None = None,
    clusters: tuple[pd.Series, pd.Series] | None = None,
    baseline_fit_n: float | None = None,
) -> DriftReport:
    """Test every field of ``baseline`` against ``target`` and flag the drifted ones
    (``clusters``, ``baseline_fit_n``: the sample sizes the p-values count, see the module).

    ``fields`` defaults to :func:`default_fields`; naming a field that neither frame has is an
    error. Fields are tested in parallel on ``workers`` threads (default: the CPU count); the
    sorts and searches release the GIL.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"detect_drift: threshold={threshold!r} must be in (0, 1]")
    if min_effect < 0.0 or not math.isfinite(min_effect):
        raise ValueError(f"detect_drift: min_effect={min_effect!r} must be a finite number >= 0")
    for side, frame in (("baseline", baseline), ("target", target)):
        if not frame.columns.is_unique:
            dup = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise ValueError(f"detect_drift: the {side} has duplicate columns {dup}")
    names = default_fields(baseline, target) if fields is None else list(dict.fromkeys(fields))
    unknown = [f for f in names if f not in baseline.columns and f not in target.columns]
    if unknown:
        raise ValueError(
            f"detect_drift: field(s) {unknown} are in neither the baseline nor the "
            f"target; baseline columns are {list(baseline.columns)}"
        )
    # columns are taken here, in one thread; the workers only read arrays
    jobs = [
        (f, baseline[f] if f in baseline.columns else None, target[f] if f in target.columns else None) for f in names
    ]
    n_rows = (len(baseline), len(target))
    n_workers = max(1, min(len(names), workers or _cpu_count()))
    if n_workers == 1:
        results = [_test_field(*job, n_rows, clusters, baseline_fit_n) for job in jobs]
    else:
        with ThreadPoolExecutor(n_workers, thread_name_prefix="drift") as pool:

            def test(job: tuple[str, pd.Series | None, pd.Series | None]) -> FieldDrift:
                return _test_field(*job, n_rows, clusters, baseline_fit_n)

            results = list(pool.map(test, jobs))
    return finish_report(results, threshold, min_effect, bh, n_rows)


def finish_report(
    results: list[FieldDrift], threshold: float, min_effect: float, bh: bool, n_rows: tuple[int, int]
) -> DriftReport:
    """The report of the field tests: p-values adjusted (with ``bh``) and each field's verdict."""
    tested = [i for i, r in enumerate(results) if r.test != "error"]
    raw = [results[i].p_value for i in tested]
    adjusted = benjamini_hochberg(raw) if bh else np.asarray(raw, dtype=np.float64)
    for i, p_adj in zip(tested, adjusted, strict=True):
        r = results[i]
        drifted = bool(p_adj < threshold and r.effect >= min_effect)
        results[i] = FieldDrift(**{**asdict(r), "p_adjusted": float(p_adj), "drifted": drifted})
    return DriftReport(
        fields=results,
        threshold=threshold,
        min_effect=min_effect,
        bh=bh,
        n_baseline_rows=n_rows[0],
        n_target_rows=n_rows[1],
    )
