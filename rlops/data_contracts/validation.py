"""Run a :class:`~rlops.data_contracts.schema.Contract` on a DataFrame with Great Expectations and
split the rows into accepted and quarantined.

The split comes from GE itself: each failed expectation's ``unexpected_index_list``
(``result_format="COMPLETE"``) names the offending rows. A suite first runs with
``BOOLEAN_ONLY`` — about half the cost, for the clean batches that are the common case — and only
the expectations that failed run again for their row lists. A row that fails
an expectation with no row list (a missing required column, a check that could not run) is
quarantined together with every other row of that stage, so nothing is ever accepted
unchecked. Rows in = rows accepted + rows quarantined, always.

One GE run per stage per batch (not per row): GE's pandas checks are vectorised, so a
100k-row chunk of a 35-column trace takes about 2 s on one core, against a fixed overhead
of a few tenths of a second per run (``bench/capture.py``).
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.data_contracts.schema import EXTRA_COLUMN, META_PREFIX, RAW_TYPES, ColumnSpec, Contract
from rlops.data_contracts.shapes import SHAPES, ShapeError

if TYPE_CHECKING:
    import great_expectations as gx

REASON_COLUMN = "quarantine_reason"
_MAX_VALUE_REPR = 80


@dataclass(frozen=True)
class ValidationResult:
    """``accepted``: typed rows in contract column order (plus any ``_`` bookkeeping columns);
    ``quarantined``: the input rows as given plus ``quarantine_reason``."""

    accepted: pd.DataFrame
    quarantined: pd.DataFrame
    defaulted: dict[str, int] = field(default_factory=dict)
    """Rows per column that lacked it and took the column's declared default."""

    @property
    def rows_in(self) -> int:
        return len(self.accepted) + len(self.quarantined)


@functools.lru_cache(maxsize=1)
def _batch_definition() -> Any:
    """One in-memory GE context per process: no files, no analytics, no progress bars."""
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        analytics_enabled=False,
        progress_bars=ProgressBarsConfig(globally=False),
        store_backend_defaults=InMemoryStoreBackendDefaults(init_temp_docs_sites=False),
    )
    context = gx.get_context(mode="ephemeral", project_config=config)
    source = context.data_sources.add_pandas("rlops_contracts")
    asset = source.add_dataframe_asset("rows")
    return asset.add_batch_definition_whole_dataframe("whole_frame")


def failed_part(frame: pd.DataFrame, suite: gx.ExpectationSuite) -> gx.ExpectationSuite | None:
    """The expectations of ``suite`` that ``frame`` fails (a pass/fail run: no row lists), as a
    suite of their own; None when all pass."""
    import great_expectations as gx

    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    result = batch.validate(suite, result_format={"result_format": "BOOLEAN_ONLY"})
    if result.success:
        return None
    failed = [r.expectation_config.to_domain_obj() for r in result.results if not r.success]
    return gx.ExpectationSuite(name=f"{suite.name}.failed", expectations=failed)


def run_suite(frame: pd.DataFrame, suite: gx.ExpectationSuite) -> Any:
    """Validate ``frame`` against ``suite`` in the shared ephemeral context (COMPLETE results)."""
    batch = _batch_definition().get_batch(batch_parameters={"dataframe": frame})
    # COMPLETE for the full unexpected_index_list; values and the pandas "query" (a string
    # listing every index) are not needed and cost time on large chunks.
    return batch.validate(
        suite,
        result_format={
            "result_format": "COMPLETE",
            "exclude_unexpected_values": True,
            "return_unexpected_index_query": False,
        },
    )


# --------------------------------------------------------------------------- normalisation


def _is_missing(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _json_text(v: Any) -> Any:
    """Nested JSON (dict/list) becomes text so it is stored as one string column."""
    if isinstance(v, (dict, list)):
        return json.dumps(v, separators=(",", ":"), default=str)
    return v


def _mask_text(v: Any) -> Any:
    """A list of booleans (or 0/1) becomes the stored '0'/'1' string; anything else is left
    as it is so the type check reports it."""
    if isinstance(v, (list, tuple)) and all(isinstance(b, bool) or (isinstance(b, int) and b in (0, 1)) for b in v):
        return "".join("1" if b else "0" for b in v)
    return v


def _fold_extra(df: pd.DataFrame, unknown: list[str]) -> pd.Series:
    """Merge the unknown columns (and an incoming ``extra`` object) into one JSON object."""
    base = df[EXTRA_COLUMN] if EXTRA_COLUMN in df else pd.Series(None, index=df.index, dtype=object)
    out = []
    for incoming, rec in zip(base.tolist(), df[unknown].to_dict("records"), strict=True):
        merged = dict(incoming) if isinstance(incoming, dict) else {}
        merged.update({k: v for k, v in rec.items() if not _is_missing(v)})
        if not merged and not _is_missing(incoming) and not isinstance(incoming, dict):
            out.append(incoming)  # not an object: the type check will say so
        else:
            out.append(json.dumps(merged, separators=(",", ":"), default=str) if merged else None)
    return pd.Series(out, index=df.index, dtype=object)


def fill_defaults(df: pd.DataFrame, contract: Contract) -> tuple[pd.DataFrame, dict[str, int]]:
    """``df`` with every column that declares a default filled where a row lacks it (the column
    absent, or the value null), and how many rows of each took it."""
    counts: dict[str, int] = {}
    for spec in contract.columns:
        if spec.default is None or len(df) == 0:
            continue
        if spec.name not in df.columns:
            df = df.assign(**{spec.name: [spec.default] * len(df)})
            counts[spec.name] = len(df)
            continue
        lacking = df[spec.name].isna()
        if lacking.any():
            df = df.copy()
            df[spec.name] = df[spec.name].astype(object).where(~lacking, spec.default)
            counts[spec.name] = int(lacking.sum())
    return df, counts


def normalize(df: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    """Raw rows → object columns the stage-0 suite can check, losing nothing.

    Nested JSON in ``json`` columns is serialised, list masks become '0'/'1' strings, and
    columns the contract does not know are folded into ``extra``.
    """
    known = [c for c in df.columns if c in contract or str(c).startswith(META_PREFIX)]
    unknown = [c for c in df.columns if c not in known]
    out = df[known].astype(object)
    if unknown and EXTRA_COLUMN in contract:
        out[EXTRA_COLUMN] = _fold_extra(df, unknown)
    for name in out.columns:
        if name not in contract:
            continue
        spec = contract[name]
        kind = spec.kind
        # ``astype(object)`` after ``map``: pandas would infer a string dtype, and GE checks
        # value types one by one only on object columns.
        if spec.true_text is not None:
            out[name] = _flag_text(out[name], spec.true_text)
        if kind == "json":
            out[name] = out[name].map(_json_text).astype(object)
        elif kind == "mask":
            out[name] = out[name].map(_mask_text).astype(object)
        else:
            if kind in ("int", "float"):
                out[name] = _no_bools(out[name])
            out[name] = _narrow(out[name], kind)
    return out


def _no_bools(col: pd.Series) -> pd.Series:
    """true/false where a number belongs: Python counts a bool as an int, the contract does not;
    shown as the JSON text so the type check rejects it."""
    if col.dtype != object or pd.api.types.infer_dtype(col, skipna=True) in (
        "integer",
        "floating",
        "mixed-integer-float",
    ):
        return col  # the common case: no value to look at one by one
    if not col.map(lambda v: isinstance(v, (bool, np.bool_))).any():
        return col
    return col.map(lambda v: ("true" if v else "false") if isinstance(v, (bool, np.bool_)) else v).astype(object)


def _flag_text(col: pd.Series, text: str) -> pd.Series:
    """Boolean flags in a text column: true → ``text``, false → null; text stays as it is."""
    if pd.api.types.infer_dtype(col, skipna=True) not in ("boolean", "mixed"):
        return col
    return col.map(lambda v: (text if v else None) if isinstance(v, (bool, np.bool_)) else v).astype(object)


#: ``infer_dtype`` answers that mean every non-null value already has the kind's JSON type.
_CLEAN = {"float": ("floating", "integer", "mixed-integer-float"), "int": ("integer",), "bool": ("boolean",)}
_NATURAL = {"float": "float64", "int": "int64", "bool": "bool"}
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
#: Bits of the largest integer a float64 holds (its exponent's range).
_FLOAT_BITS = 1024


def _narrow(col: pd.Series, kind: str) -> pd.Series:
    """Give a column whose values all have the right type its natural dtype.

    GE then checks its type once, from the dtype, instead of value by value, and hashing
    the batch (GE fingerprints every batch) is far cheaper on numeric columns than on
    object ones. Columns with any odd value stay ``object`` and are checked per value.
    """
    inferred = pd.api.types.infer_dtype(col, skipna=True)
    if kind == "timestamp" and inferred in ("datetime", "datetime64"):
        # Python datetimes → pandas Timestamps, the datetime type GE's type list names.
        return pd.Series(pd.to_datetime(col, utc=True), index=col.index).astype(object)
    if kind == "timestamp" and inferred.startswith("mixed"):
        return col.map(lambda v: pd.Timestamp(v) if isinstance(v, datetime) else v).astype(object)
    if kind == "int" and col.dtype == object:
        # An integer beyond 64 bits cannot be stored: present it as the float it would have
        # to become, so the type check rejects it (showing the value).
        values = col.tolist()
        if any(type(v) is int and not _I64_MIN <= v <= _I64_MAX for v in values):
            # Built as object: ``map`` would infer float64 and turn every int into a float.
            col = pd.Series(
                [_as_float(v) if type(v) is int and not _I64_MIN <= v <= _I64_MAX else v for v in values],
                index=col.index,
                dtype=object,
            )
            inferred = pd.api.types.infer_dtype(col, skipna=True)
    if kind == "float" and col.dtype == object:
        # An integer beyond a float's range (a JSON number of 400 digits) is the infinity it
        # would become: the range check then rejects it instead of the cast raising.
        values = col.tolist()
        if any(type(v) is int and v.bit_length() > _FLOAT_BITS for v in values):
            col = pd.Series(
                [_as_float(v) if type(v) is int and v.bit_length() > _FLOAT_BITS else v for v in values],
                index=col.index,
                dtype=object,
            )
            inferred = pd.api.types.infer_dtype(col, skipna=True)
    if kind not in _CLEAN or inferred not in _CLEAN[kind]:
        return col
    if col.isna().any() and kind != "float":
        return col
    try:
        return col.astype(_NATURAL[kind])
    except (OverflowError, TypeError, ValueError):  # e.g. an integer beyond 64 bits
        return col


def _as_float(v: int) -> float:
    """The float an integer becomes: beyond a float's range, the infinity of its sign."""
    try:
        return float(v)
    except OverflowError:
        return math.inf if v > 0 else -math.inf


# --------------------------------------------------------------------------- typing


def _typed_column(col: pd.Series, spec: ColumnSpec) -> pd.Series:
    """Cast a column whose values already passed the stage-0 type check."""
    kind = spec.kind
    if kind in ("str", "json", "mask"):
        return col.astype("str")
    if kind == "float":
        return pd.to_numeric(col, errors="coerce").astype("float64")
    if kind == "int":  # values beyond 64 bits were turned away by the type check
        return col.astype("Int64") if col.isna().any() else col.astype("int64")
    if kind == "bool":
        return col.astype("boolean") if col.isna().any() else col.astype(bool)
    if kind == "timestamp":
        return parse_timestamps(col)
    raise AssertionError(f"unhandled kind {kind}")


def parse_timestamps(col: pd.Series) -> pd.Series:
    """UTC timestamps from ISO-8601 text, epoch seconds or datetime values (naive ones are
    taken as UTC); anything unreadable becomes NaT."""
    if isinstance(col.dtype, pd.DatetimeTZDtype) or pd.api.types.is_datetime64_dtype(col):
        return pd.to_datetime(col, utc=True).dt.as_unit("us")
    is_text = col.map(lambda v: isinstance(v, str)).astype(bool)
    is_num = col.map(lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)).astype(bool)
    text = pd.to_datetime(col.where(is_text), format="ISO8601", utc=True, errors="coerce")
    seconds = pd.to_numeric(col.where(is_num), errors="coerce")
    epoch = pd.to_datetime(seconds, unit="s", utc=True, errors="coerce")
    rest = ~(is_text | is_num) & col.notna()
    other = pd.Series(pd.NaT, index=col.index, dtype="datetime64[us, UTC]")
    if rest.any():
        # One by one: a list or object where a time belongs (a quarantined row) must become NaT,
        # not make to_datetime read the whole column as nested data.
        one_by_one = pd.Series([_one_timestamp(v) for v in col[rest].tolist()], index=col.index[rest], dtype=object)
        other[rest] = pd.to_datetime(one_by_one, utc=True).dt.as_unit("us")
    return text.where(is_text, epoch.where(is_num, other)).dt.as_unit("us")


def _one_timestamp(v: Any) -> Any:
    if isinstance(v, (list, tuple, dict, set)):
        return pd.NaT
    try:
        return pd.to_datetime(v, utc=True, errors="coerce")
    except (TypeError, ValueError, OverflowError):
        return pd.NaT


def _null_column(spec: ColumnSpec, index: pd.Index) -> pd.Series:
    dtype = {
        "str": "str",
        "json": "str",
        "mask": "str",
        "float": "float64",
        "int": "Int64",
        "bool": "boolean",
        "timestamp": "datetime64[us, UTC]",
    }[spec.kind]
    return pd.Series(pd.NA if dtype in ("Int64", "boolean") else None, index=index, dtype=dtype)


def to_typed(raw: pd.DataFrame, contract: Contract) -> pd.DataFrame:
    """Contract columns in contract order with their stored dtypes (absent ones all-null),
    followed by the bookkeeping columns."""
    cols = {
        spec.name: (_typed_column(raw[spec.name], spec) if spec.name in raw else _null_column(spec, raw.index))
        for spec in contract.columns
    }
    for name in raw.columns:
        if str(name).startswith(META_PREFIX):
            cols[name] = raw[name]
    return pd.DataFrame(cols, index=raw.index)


# --------------------------------------------------------------------------- reasons


def _short(v: Any) -> str:
    text = repr(v.item() if isinstance(v, np.generic) else v)
    return text if len(text) <= _MAX_VALUE_REPR else text[: _MAX_VALUE_REPR - 3] + "..."


def _reasons_from(result: Any, frame: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    """(row labels, reason per row) for one failed expectation result."""
    cfg = result.expectation_config
    column = cfg.meta.get("column", cfg.kwargs.get("column"))
    head = f"{cfg.type}[{column}]: {cfg.meta.get('check', 'failed')}"
    raised = isinstance(result.exception_info, dict) and any(
        isinstance(v, dict) and v.get("raised_exception")
        for v in [result.exception_info, *result.exception_info.values()]
    )
    idx = None if raised else result.result.get("unexpected_index_list")
    if idx is None:
        # No row list: a table-level failure or a check that could not run. Fail the stage's
        # rows rather than accept them unchecked.
        detail = _exception_message(result.exception_info) if raised else ""
        reason = head + (f" (check could not run: {detail})" if detail else "")
        return frame.index.to_numpy(), [reason] * len(frame)
    rows = np.asarray(idx, dtype=np.int64)
    if cfg.type == "expect_column_values_to_not_be_null" or column not in frame:
        return rows, [head] * len(rows)
    # GE caps its unexpected_list at 200 values; the full index list is what counts.
    values = frame[column].loc[rows].tolist()
    if cfg.type == "expect_column_values_to_be_in_type_list":
        return rows, [f"{head} (got {type(v).__name__} {_short(v)})" for v in values]
    return rows, [f"{head} (got {_short(v)})" for v in values]


def _exception_message(info: Any) -> str:
    if not isinstance(info, dict):
        return str(info or "")
    if info.get("exception_message"):
        return str(info["exception_message"])
    for v in info.values():
        if isinstance(v, dict) and v.get("exception_message"):
            return str(v["exception_message"])
    return ""


def _check_shapes(raw: pd.DataFrame, contract: Contract) -> tuple[list[int], list[str]]:
    """Normalise every ``shape`` column of ``raw`` in place; ``(rows, reasons)`` of the values
    that are of no accepted shape."""
    rows: list[int] = []
    reasons: list[str] = []
    for name in raw.columns:
        spec = contract[name] if name in contract else None  # noqa: SIM401 - a Contract has no .get
        if spec is None or spec.shape is None:
            continue
        fix = SHAPES[spec.shape]
        out = raw[name].tolist()
        for i, v in enumerate(out):
            if _is_missing(v):
                continue
            if isinstance(v, str) and spec.kind == "json":
                try:
                    json.loads(v)
                except ValueError:
                    continue  # not JSON at all: the suite's json-parseable check says so
            try:
                out[i] = fix(v)
            except (ShapeError, TypeError, RecursionError) as exc:
                rows.append(i)
                reasons.append(f"{name}: {exc}")
        raw[name] = pd.Series(out, index=raw.index, dtype=object)
    return rows, reasons


def typed_columns(raw: pd.DataFrame, contract: Contract) -> list[str]:
    """The columns of a normalised batch whose values are all of their kind, which the type check
    would pass whole: a numeric or boolean dtype (:func:`_narrow` gave it only to columns whose
    every value has the type) or, for text kinds, only ``str`` values (or none). Every other
    column keeps its per-value type check."""
    out = []
    for name in raw.columns:
        if name not in contract:
            continue
        kind, col = contract[name].kind, raw[name]
        if col.dtype != object:
            if col.dtype.kind in _DTYPE_KINDS.get(kind, ""):
                out.append(name)
        elif RAW_TYPES[kind] == ["str"] and all(type(v) is str for v in col.dropna().tolist()):
            out.append(name)
    return out


# numpy dtype kinds whose every value passes a kind's type list (float64 → "float", int64 → "int")
_DTYPE_KINDS = {"float": "fi", "int": "i", "bool": "b"}


# --------------------------------------------------------------------------- entry point


def validate_frame(df: pd.DataFrame, contract: Contract) -> ValidationResult:
    """Validate ``df`` against ``contract`` with its GE suites; see the module docstring."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"validate_frame: expected a pandas DataFrame, got {type(df).__name__}")
    df = df.reset_index(drop=True)
    n = len(df)
    if n == 0:
        return ValidationResult(
            to_typed(normalize(df, contract), contract), df.assign(**{REASON_COLUMN: pd.Series([], dtype="str")})
        )
    df, defaulted = fill_defaults(df, contract)
    raw = normalize(df, contract)
    alive = np.ones(n, dtype=bool)
    labels: list[np.ndarray] = []
    reasons: list[str] = []
    shape_rows, shape_reasons = _check_shapes(raw, contract)
    if shape_rows:
        labels.append(np.asarray(shape_rows, dtype=np.int64))
        reasons.extend(shape_reasons)
        alive[shape_rows] = False
    typed: pd.DataFrame | None = None
    for stage, suite in enumerate(contract.suites(raw.columns, typed_columns(raw, contract))):
        if not alive.any():
            break
        if stage == 1:  # values are checked on typed columns, for rows whose types are right
            typed = to_typed(raw[alive], contract)
        if not suite.expectations:
            continue
        source = raw if typed is None else typed
        # Only the columns this stage checks: GE fingerprints (hashes) the whole batch.
        checked = list(dict.fromkeys(col for e in suite.expectations if (col := getattr(e, "column", None)) in source))
        frame = source.loc[alive[source.index], checked]
        failed_here: list[np.ndarray] = []
        failed = failed_part(frame, suite)
        for result in run_suite(frame, failed).results if failed is not None else ():
            if result.success:
                continue
            rows, texts = _reasons_from(result, frame)
            labels.append(rows)
            reasons.extend(texts)
            failed_here.append(rows)
        if failed_here:
            alive[np.concatenate(failed_here).astype(np.int64)] = False
    if typed is None:
        typed = to_typed(raw[alive], contract)
    accepted = typed.loc[alive[typed.index]].reset_index(drop=True)
    quarantined = df.loc[~alive].copy()
    if labels:
        per_row = (
            pd.Series(reasons, index=np.concatenate(labels).astype(np.int64), dtype="str")
            .groupby(level=0, sort=True)
            .agg("; ".join)
        )
        quarantined[REASON_COLUMN] = per_row.reindex(quarantined.index).astype("str")
    else:
        quarantined[REASON_COLUMN] = pd.Series([], dtype="str")
    return ValidationResult(accepted, quarantined.reset_index(drop=True), defaulted)


# --------------------------------------------------------------------------- row identity


#: The reason of a row another source of the run key already stored: a copy, not bad data.
STORED_ELSEWHERE = "already captured by another source of this run key"


def reject_outside_interval_and_duplicates(
    accepted: pd.DataFrame,
    start: datetime,
    end: datetime,
    seen: set[tuple[str, int]],
    stored: Collection[tuple[str, int]] = frozenset(),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split typed, accepted trace rows into ``(kept, rejected)``: a row is rejected (with a
    ``quarantine_reason``) when its ``ts`` lies outside ``[start, end)`` (the run's interval,
    widened by the lateness the caller allows), when its ``(episode_id, step)`` was already seen in
    this run (``seen`` is updated in place, so duplicates across chunks are caught too), or when it
    is in ``stored`` (the keys other sources of the run key wrote; their reason ends with
    :data:`STORED_ELSEWHERE`). The first occurrence of a key is kept."""
    if accepted.empty:
        return accepted, accepted.assign(**{REASON_COLUMN: pd.Series([], dtype="str")})
    frame = accepted.reset_index(drop=True)
    ts = pd.to_datetime(frame["ts"], utc=True)
    reasons: list[list[str]] = [[] for _ in range(len(frame))]
    lo, hi = pd.Timestamp(start), pd.Timestamp(end)
    outside = ~((ts >= lo) & (ts < hi)).to_numpy()
    for j in np.flatnonzero(outside):
        reasons[j].append(
            f"interval: ts {ts.iloc[j].isoformat()} is outside the run's window [{lo.isoformat()}, {hi.isoformat()})"
        )
    for i, key in enumerate(zip(frame["episode_id"].astype(str), frame["step"].astype("int64"))):
        if outside[i]:
            continue  # not this run's row: it neither claims nor duplicates a key
        if key in stored:
            reasons[i].append(f"duplicate: (episode_id, step) = ({key[0]!r}, {int(key[1])}) {STORED_ELSEWHERE}")
        elif key in seen:
            reasons[i].append(
                f"duplicate: (episode_id, step) = ({key[0]!r}, {int(key[1])}) already captured in this run"
            )
        else:
            seen.add(key)
    bad = np.array([bool(r) for r in reasons], dtype=bool)
    rejected = frame.loc[bad].copy()
    rejected[REASON_COLUMN] = pd.Series(["; ".join(r) for r in reasons if r], index=rejected.index, dtype="str")
    return frame.loc[~bad].reset_index(drop=True), rejected.reset_index(drop=True)
