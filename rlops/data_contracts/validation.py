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
of a few tenths of a second per run (``bench/capture.py``). The rows reach the suites through
:mod:`rlops.data_contracts.conversion` (normalised before stage 0, typed after it).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.data_contracts.conversion import fill_defaults, is_missing, normalize, to_typed
from rlops.data_contracts.schema import RAW_TYPES, Contract
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
            if is_missing(v):
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
    would pass whole: a numeric or boolean dtype (:func:`~rlops.data_contracts.conversion.normalize` gives
    it only to columns whose every value has the type) or, for text kinds, only ``str`` values (or none). Every other
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
