"""Raw rows into the columns a :class:`~rlops.data_contracts.schema.Contract` checks and stores.

* before the first stage of validation, :func:`normalize` turns raw rows into object columns the
  type checks can read, losing nothing (nested JSON as text, list masks as ``'0'``/``'1'`` text,
  unknown keys folded into ``extra``; columns whose values all have the right type get their
  natural dtype, so Great Expectations checks their type once), and :func:`fill_defaults` gives
  rows that lack a column its declared default;
* once the types passed, :func:`to_typed` casts the columns to their stored dtypes
  (:func:`parse_timestamps` reads every way a timestamp arrives).

The checks themselves run in :mod:`rlops.data_contracts.validation`.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rlops.data_contracts.schema import EXTRA_COLUMN, META_PREFIX, ColumnSpec, Contract


# --------------------------------------------------------------------------- normalisation
def is_missing(v: Any) -> bool:
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
        merged.update({k: v for k, v in rec.items() if not is_missing(v)})
        if not merged and not is_missing(incoming) and not isinstance(incoming, dict):
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
