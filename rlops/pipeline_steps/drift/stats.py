"""Drift detection between two windows of trace rows: is live traffic still like the baseline?

Per field, one two-sample test:

* numeric fields: Kolmogorov–Smirnov, with the statistic and p-value of
  ``scipy.stats.ks_2samp(baseline, target)`` (``method='auto'``: exact for samples of at most
  10 000 values, asymptotic otherwise), computed in :mod:`.ks` without sorting the samples;
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
``latency_ms`` and ``error`` (and, comparing two trace windows, the ``action`` taken and the
``reward_total``: two logging policies differ there first). A field present on one side only, or
of a different kind on each side, becomes an error entry in the report; the other fields are
still tested.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.stats

from rlops.common.params_drift import DriftParams
from rlops.data_contracts.schema import STATE_PREFIX
from rlops.pipeline_steps.drift.ks import (
    HAS_EXACT,
    MAX_EXACT_N,
    _kstwo_sf,
    _no_nan,
    ks_pvalue,
    ks_statistic_unsorted,
)

OPERATIONAL_FIELDS = ("latency_ms", "error")
#: what was decided and what it earned: tested by default when two trace windows are compared
#: (``rlops drift detect``), not by the drift check, whose baseline is the sandbox's own rollouts
DECISION_FIELDS = ("action", "reward_total")
MISSING = "(no value)"
#: the tests' defaults are the params' (``drift:``), so a call without them judges as the drift check does
_DRIFT = DriftParams()
DEFAULT_THRESHOLD = _DRIFT.threshold
DEFAULT_MIN_EFFECT = _DRIFT.min_effect
DEFAULT_BH = _DRIFT.bh


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
    bh: bool = DEFAULT_BH
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


# --------------------------------------------------------------------------- per-field tests
def _numeric_values(col: pd.Series) -> np.ndarray:
    is_int = isinstance(col.dtype, np.dtype) and col.dtype.kind in "iu"  # NaN-free: keep ints
    out: np.ndarray = col.to_numpy() if is_int else col.to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def _ks_field(
    name: str,
    b: pd.Series,
    t: pd.Series,
    n_eff: tuple[float, float] | None = None,
) -> FieldDrift:
    xb, xt = _numeric_values(b), _numeric_values(t)
    if xb.dtype != xt.dtype:  # int vs float: compare as floats, as scipy's concatenation does
        xb, xt = xb.astype(np.float64), xt.astype(np.float64)
    d, n_b, n_t = ks_statistic_unsorted(xb, xt)  # NaN (missing) values left out, in the same pass
    if n_b == 0 or n_t == 0:
        side = "baseline" if n_b == 0 else "target"
        return _error(name, f"no non-missing values in the {side}", n_b, n_t)
    if n_eff is not None:  # independent units fewer than rows: the asymptotic law at their number
        nb, nt = n_eff
        p, method = min(_kstwo_sf(d, float(np.round(nb * nt / (nb + nt)))), 1.0), f"asymp, n_eff={nb:.0f}/{nt:.0f}"
    elif not HAS_EXACT and max(n_b, n_t) <= MAX_EXACT_N:
        ref = scipy.stats.ks_2samp(_no_nan(xb), _no_nan(xt))  # pragma: no cover - small samples, another scipy
        d, p, method = float(ref.statistic), float(ref.pvalue), "exact"
    else:
        d, p, method = ks_pvalue(d, n_b, n_t)
    return FieldDrift(name, "ks", d, p, d, False, int(n_b), int(n_t), effect_name="ks_statistic", method=method)


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


def default_fields(baseline: pd.DataFrame, target: pd.DataFrame, decisions: bool = False) -> list[str]:
    """``state.*`` columns and ``latency_ms``/``error`` of either side, baseline order first; with
    ``decisions``, also the action taken and the reward (:data:`DECISION_FIELDS`) where both sides
    have them."""
    cols = list(dict.fromkeys([*baseline.columns, *target.columns]))
    out = [c for c in cols if isinstance(c, str) and (c.startswith(STATE_PREFIX) or c in OPERATIONAL_FIELDS)]
    if decisions:
        out += [c for c in DECISION_FIELDS if c in baseline.columns and c in target.columns]
    return out


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
    bh: bool = DEFAULT_BH,
    fields: Sequence[str] | None = None,
    workers: int | None = None,
    clusters: tuple[pd.Series, pd.Series] | None = None,
    baseline_fit_n: float | None = None,
    decisions: bool = False,
) -> DriftReport:
    """Test every field of ``baseline`` against ``target`` and flag the drifted ones
    (``clusters``, ``baseline_fit_n``: the sample sizes the p-values count, see the module).

    ``fields`` defaults to :func:`default_fields` (with ``decisions``: the actions and rewards
    too); naming a field that neither frame has is an
    error. Fields are tested in parallel on ``workers`` threads (default: the CPU count); the
    array passes release the GIL.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"detect_drift: threshold={threshold!r} must be in (0, 1]")
    if min_effect < 0.0 or not math.isfinite(min_effect):
        raise ValueError(f"detect_drift: min_effect={min_effect!r} must be a finite number >= 0")
    for side, frame in (("baseline", baseline), ("target", target)):
        if not frame.columns.is_unique:
            dup = sorted({str(c) for c in frame.columns[frame.columns.duplicated()]})
            raise ValueError(f"detect_drift: the {side} has duplicate columns {dup}")
    names = default_fields(baseline, target, decisions) if fields is None else list(dict.fromkeys(fields))
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

    def test(job: tuple[str, pd.Series | None, pd.Series | None]) -> FieldDrift:
        return _test_field(*job, n_rows, clusters, baseline_fit_n)

    if n_workers == 1:
        results = [test(job) for job in jobs]
    else:
        with ThreadPoolExecutor(n_workers, thread_name_prefix="drift") as pool:
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
