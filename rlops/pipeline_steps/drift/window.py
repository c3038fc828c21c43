"""A long live window for the drift monitor, tested without holding its rows.

A day of traffic is millions of rows; the field tests of :mod:`rlops.pipeline_steps.drift.stats`
need far less than the rows themselves. :func:`summarise_window` streams the window once, in
frames of :data:`BATCH_ROWS` (``TraceReader.batches``: only the tested columns, the units and the
rewards), and keeps per tested field what its test reads:

* numeric fields: the target's counts at the baseline's distinct values (a binary search of each
  target value among them) — the KS statistic of two samples is attained at one of those points,
  so :func:`~rlops.pipeline_steps.drift.window_detect.ks_from_counts` gives the very float
  :func:`stats.ks_statistic` gives on the rows;
* categorical fields: the category counts (missing values a category of their own);
* the p-values' units (``drift.cluster``): per field, the distinct units among its rows with a
  value, and the live episodes' returns (the anomaly check), summed per episode as a group-by does —
  both counted by DuckDB's group-by (:func:`units_in_sql`), or, on the pandas engine, from each
  row's unit as a code shared by every frame;
* the rows the report's histograms are drawn from: every k-th row of the window, at most
  :data:`PLOT_ROWS` of them (a systematic sample; the tests themselves count every row).

:func:`~rlops.pipeline_steps.drift.window_detect.detect_drift_window` then reports exactly what
:func:`stats.detect_drift` reports on the window's rows (the same fields, statistics, p-values and
verdicts; the tests compare the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from rlops.pipeline_steps.drift.ks import _no_nan
from rlops.pipeline_steps.drift.stats import (
    _category_counts,
    _kind,
    _numeric_values,
)

BATCH_ROWS = 1_000_000


def _sorted_no_nan(values: np.ndarray) -> np.ndarray:
    """The values without NaN, sorted (the window's KS works on the baseline's sorted values)."""
    return np.sort(_no_nan(values))


PLOT_ROWS = 200_000


@dataclass
class TargetField:
    """What the test of one field needs of the target window."""

    kind: str = ""
    """``numeric``, ``categorical`` or ``unsupported (<dtype>)`` (the first frame's, as
    :func:`stats._kind` names it); ``mixed`` when frames disagree."""
    cuts: np.ndarray | None = None
    """Numeric: the baseline's sorted distinct values (the points the KS statistic is taken at)."""
    below: np.ndarray | None = None
    """Numeric: per interval ``k`` (target values with ``k`` cuts at or below them) the count."""
    equal: np.ndarray | None = None
    """Numeric: per cut, the target values equal to it."""
    n: int = 0
    """Numeric: target values that are not missing."""
    counts: pd.Series | None = None
    """Categorical: rows per category (text; missing as :data:`stats.MISSING`)."""
    has: list[np.ndarray] = field(default_factory=list)
    """Per frame, which rows have a value (numeric fields; categorical rows all count); let go once
    :attr:`units` is counted."""
    units: float | None = None
    """Distinct ``drift.cluster`` values among the rows with a value (None without a cluster column)."""


@dataclass
class WindowSummary:
    """A target window as the drift check reads it (see the module)."""

    rows: int
    fields: dict[str, TargetField]
    clustered: bool
    """Whether the window has the ``drift.cluster`` column (each field's :attr:`TargetField.units`)."""
    episode_returns: np.ndarray
    """Summed reward of each live episode with one (as :func:`~rlops.pipeline_steps.drift.check.episode_returns`:
    an episode without any ``reward_total`` has no measured return and is left out), in code order."""
    plot_rows: pd.DataFrame
    plot_every: int = 1
    """The histograms' rows are every ``plot_every``-th row of the window."""

    @property
    def empty(self) -> bool:
        return self.rows == 0


class _Codes:
    """One integer code per distinct value over every frame (-1: missing): the frames' values are
    kept as Arrow arrays and hashed together once at the end (no Python object per value)."""

    def __init__(self) -> None:
        self.arrays: list[Any] = []

    def add(self, col: pd.Series) -> None:
        import pyarrow as pa

        arr = pa.array(col, from_pandas=True)
        if isinstance(arr, pa.ChunkedArray):  # Arrow-backed text hands over its chunks
            arr = arr.combine_chunks()
        self.arrays.append(arr.dictionary_decode() if pa.types.is_dictionary(arr.type) else arr)

    def codes(self) -> tuple[np.ndarray, int]:
        """Every row's code, and how many distinct values there are."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if not self.arrays:
            return np.zeros(0, dtype=np.int64), 0
        arrays = self.arrays
        if len({a.type for a in arrays}) > 1:
            arrays = [a.cast(pa.large_string()) for a in arrays]
        encoded = pc.dictionary_encode(pa.concat_arrays(arrays))
        codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
        return codes, len(encoded.dictionary)


@dataclass
class UnitSummary:
    """The units and returns of a window, counted by the query engine (:func:`units_in_sql`)."""

    units: dict[str, float]
    """Per field, distinct units among rows with a value; ``""``: among all rows."""
    episode_returns: np.ndarray


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def sql_counts(reader: Any, columns: Sequence[str]) -> bool:
    """Whether :func:`units_in_sql` can count a window's units (DuckDB, with episode ids); else the
    frames carry them (the pandas engine)."""
    return bool(reader.engine == "duckdb" and "episode_id" in columns)


def units_in_sql(
    reader: Any, uri: str, window: tuple[Any, Any], unit: str | None, fields: Sequence[str], columns: Sequence[str]
) -> UnitSummary:
    """:class:`UnitSummary` by DuckDB aggregates grouped by unit and by episode, with the units of
    ``fields`` counted over their rows with a value (as the field tests count them: not null, not
    NaN). A missing unit is one unit of its own (as ``pd.unique`` counts it); returns leave out rows
    without an episode (as ``groupby`` does)."""
    have = [f for f in fields if f in columns]
    flags = [
        f"count(CASE WHEN NOT isnan(TRY_CAST({_ident(f)} AS DOUBLE)) THEN 1 END) > 0 AS h{i}"
        for i, f in enumerate(have)
    ]
    reward = "reward_total" in columns
    # NULL, not 0, for an episode without a reward: it has no measured return
    summed = "sum(CASE WHEN isnan(reward_total) THEN NULL ELSE reward_total END)" if reward else "NULL"
    units: dict[str, float] = {}
    if unit and unit in columns and unit != "episode_id":
        got = reader.query(
            uri, f"SELECT {', '.join(['1 AS one', *flags])} FROM traces GROUP BY {_ident(unit)}", window=window
        )
        units = {"": float(len(got)), **{f: float(got[f"h{i}"].sum()) for i, f in enumerate(have)}}
        flags = []
    elif unit != "episode_id":
        flags = []
    sql = f"SELECT {', '.join([f'{summed} AS r', 'episode_id IS NULL AS k', *flags])} FROM traces GROUP BY episode_id"
    got = reader.query(uri, sql, window=window)
    if unit == "episode_id":
        units = {"": float(len(got)), **{f: float(got[f"h{i}"].sum()) for i, f in enumerate(have)}}
    returns = pd.to_numeric(got["r"], errors="coerce").to_numpy(np.float64, na_value=np.nan)
    keyed = ~got["k"].to_numpy(dtype=bool) & ~np.isnan(returns)
    return UnitSummary(units, returns[keyed])


@dataclass
class FramePass:
    """What one streamed pass over some of a window's frames kept (:func:`scan_frames`)."""

    fields: dict[str, TargetField]
    rows: int
    plots: list[pd.DataFrame]
    units: _Codes
    episodes: _Codes
    rewards: list[np.ndarray]


def scan_frames(
    frames: Iterable[pd.DataFrame],
    baseline: pd.DataFrame,
    fields: Sequence[str],
    every: int,
    unit: str | None,
    carry_units: bool,
    offset: int = 0,
) -> FramePass:
    """One pass over ``frames``: each field's counts against ``baseline``, every ``every``-th row for
    the histograms (``offset``: rows of the window before the first frame, so that consecutive
    slices of a window sample the rows one pass over all of it would), and with ``carry_units`` each
    row's unit, episode and reward."""
    acc = {f: TargetField() for f in fields}
    units, episodes = _Codes(), _Codes()
    rewards: list[np.ndarray] = []
    plots: list[pd.DataFrame] = []
    rows = 0
    for df in frames:
        if df.empty:
            continue
        at, rows = offset + rows, rows + len(df)
        plots.append(df[[f for f in fields if f in df.columns]].iloc[(-at) % every :: every])
        if carry_units and unit and unit in df.columns and unit != "episode_id":
            units.add(df[unit])
        if carry_units and "episode_id" in df.columns:
            episodes.add(df["episode_id"])
            reward = df["reward_total"] if "reward_total" in df.columns else pd.Series(np.nan, index=df.index)
            rewards.append(pd.to_numeric(reward, errors="coerce").to_numpy(np.float64, na_value=np.nan))
        for name, a in acc.items():
            if name in df.columns:
                _add(a, name, df[name], baseline, keep_has=carry_units)
    return FramePass(acc, rows, plots, units, episodes, rewards)


def plot_every(total: int, plot_rows: int = PLOT_ROWS) -> int:
    """The histograms of a window of ``total`` rows are drawn from every this-many-th row."""
    return max(1, math.ceil(total / max(plot_rows, 1)))


def with_units(
    acc: dict[str, TargetField], rows: int, counted: UnitSummary, plots: list[pd.DataFrame], every: int
) -> WindowSummary:
    """The summary of a window whose units and returns the query engine counted."""
    clustered = bool(counted.units)
    for name, a in acc.items():
        key = name if a.kind == "numeric" else ""
        a.has, a.units = [], (counted.units.get(key, counted.units[""]) if clustered else None)
    return WindowSummary(rows, acc, clustered, counted.episode_returns, _plots(plots), every)


def summarise_window(
    frames: Iterable[pd.DataFrame],
    baseline: pd.DataFrame,
    fields: Sequence[str],
    total: int,
    unit: str | None,
    plot_rows: int = PLOT_ROWS,
    count_units: Callable[[list[str]], UnitSummary] | None = None,
) -> WindowSummary:
    """One pass over ``frames`` (the window's rows, in order; ``total`` of them in all) keeping what
    the tests of ``fields`` against ``baseline`` need, the units of ``unit`` and the episodes' returns
    (those two from ``count_units`` when the query engine counts them: the frames then need neither
    the unit, the episode nor the reward column; it is asked for the numeric fields with missing
    values, the others' units being those of every row)."""
    every = plot_every(total, plot_rows)
    scan = scan_frames(frames, baseline, fields, every, unit, carry_units=count_units is None)
    acc, rows = scan.fields, scan.rows
    if count_units is not None:
        counted = count_units(numeric_gaps(acc, rows))
        return with_units(acc, rows, counted, scan.plots, every)
    ep_codes, n_eps = scan.episodes.codes()
    if unit == "episode_id":  # the usual unit: one encoding serves both
        unit_codes = ep_codes if scan.episodes.arrays else None
    else:
        unit_codes = scan.units.codes()[0] if scan.units.arrays else None
    reward = np.concatenate(scan.rewards) if scan.rewards else np.zeros(0)
    keep = ep_codes >= 0
    rewarded = keep & ~np.isnan(reward)
    returns = np.bincount(ep_codes[rewarded], weights=reward[rewarded], minlength=n_eps) if n_eps else np.zeros(0)
    if n_eps:  # an episode without any reward has no measured return: left out, not counted as 0
        returns = returns[np.bincount(ep_codes[rewarded], minlength=n_eps) > 0]
    if unit_codes is not None:
        every_row: dict[str, float] = {}  # units over all rows, counted once
        for a in acc.values():
            has = np.concatenate(a.has) if a.kind == "numeric" and a.has else np.ones(rows, dtype=bool)
            a.has, a.units = [], _units(has, unit_codes, every_row)
    return WindowSummary(rows, acc, unit_codes is not None, returns, _plots(scan.plots), every)


def numeric_gaps(acc: dict[str, TargetField], rows: int) -> list[str]:
    """The numeric fields with missing values (their units are not those of every row)."""
    return [f for f, a in acc.items() if a.kind == "numeric" and a.n < rows]


def _plots(plots: list[pd.DataFrame]) -> pd.DataFrame:
    return pd.concat(plots, ignore_index=True) if plots else pd.DataFrame()


def joins(a: TargetField, kind: str) -> bool:
    """Whether values of ``kind`` join the counts of field ``a`` (frames or slices whose kinds
    disagree make it ``mixed``, and nothing joins it after)."""
    if a.kind and a.kind != kind:
        a.kind = "mixed"
    a.kind = a.kind or kind
    return a.kind == kind


def start_counts(a: TargetField, name: str, baseline: pd.DataFrame, dtype: np.dtype) -> None:
    """The baseline's cuts of numeric field ``a`` and empty counts at them, taken when its first
    values (of ``dtype``) arrive: int against float is compared as floats, as detect_drift does."""
    b = _numeric_values(baseline[name]) if name in baseline.columns else np.zeros(0)
    if b.dtype != dtype:
        b = b.astype(np.float64)
    a.cuts = np.unique(_sorted_no_nan(b))
    a.below = np.zeros(a.cuts.size + 1, dtype=np.int64)
    a.equal = np.zeros(a.cuts.size, dtype=np.int64)


def add_categories(a: TargetField, counts: pd.Series) -> None:
    a.counts = counts if a.counts is None else a.counts.add(counts, fill_value=0).astype(np.int64)


def _add(a: TargetField, name: str, col: pd.Series, baseline: pd.DataFrame, keep_has: bool = True) -> None:
    """Count one frame's values of a field (``keep_has``: and which rows have one, for units
    counted from the frames)."""
    kind = _kind(col)
    if not joins(a, kind):
        return
    if kind == "numeric":
        x = _numeric_values(col)
        if a.cuts is None:
            start_counts(a, name, baseline, x.dtype)
        assert a.cuts is not None
        if x.dtype != a.cuts.dtype:
            x = x.astype(np.float64)
        has = ~np.isnan(x) if x.dtype.kind == "f" else np.ones(x.size, dtype=bool)
        if keep_has:
            a.has.append(has)
        x = x[has]
        k = np.searchsorted(a.cuts, x, side="right")  # cuts at or below each value
        on = k > 0
        on[on] = x[on] == a.cuts[k[on] - 1]
        assert a.below is not None and a.equal is not None
        a.below += np.bincount(k, minlength=a.cuts.size + 1)
        a.equal += np.bincount(k[on] - 1, minlength=a.cuts.size)
        a.n += int(x.size)
    elif kind == "categorical":
        add_categories(a, _category_counts(col))


def _units(has: np.ndarray, codes: np.ndarray | None, every: dict[str, float]) -> float:
    if has.all() and "all" in every:  # every row has a value (all categorical fields, most numeric ones)
        return every["all"]
    got = _count_units(has, codes)
    if has.all():
        every["all"] = got
    return got


def _count_units(has: np.ndarray, codes: np.ndarray | None) -> float:
    if codes is None:
        return float(max(int(has.sum()), 1))
    picked = codes[has]
    missing = bool((picked < 0).any())  # a missing unit is one value of its own, as pd.unique counts it
    picked = picked[picked >= 0]
    return float(max((int(np.count_nonzero(np.bincount(picked))) if picked.size else 0) + missing, 1))


def read_summary(
    reader: Any,
    uri: str,
    window: tuple[Any, Any],
    columns: list[str],
    baseline: pd.DataFrame,
    fields: Sequence[str],
    unit: str | None,
) -> WindowSummary:
    """:func:`summarise_window` over the trace store's ``window`` under ``uri`` (``columns`` read)."""
    total = reader.count(uri, window)
    frames = reader.batches(uri, window, columns, batch_rows=BATCH_ROWS, categorical=True)
    return summarise_window(frames, baseline, fields, total, unit)
