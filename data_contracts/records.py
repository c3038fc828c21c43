"""JSON-lines records in, quarantine rows out: the two ends of contract validation.

:func:`parse_json_lines` turns landing-zone lines into raw rows (object columns, exactly the
JSON types that arrived) and the lines that are not a JSON object, each with its reason.
:func:`quarantine_frame` gives quarantined rows one stable, stored shape whatever they
looked like: the original text, the reason, where it came from, and the few identifying
fields that could be read.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

from data_contracts.schema import META_PREFIX, STATE_PREFIX
from data_contracts.validation import REASON_COLUMN, _is_missing, parse_timestamps

#: Bookkeeping columns carried next to each parsed row (never part of the contract).
RAW_COLUMN = "_raw"
SOURCE_COLUMN = "_source"
LINE_COLUMN = "_line_no"

#: The stored shape of every quarantine partition.
QUARANTINE_SCHEMA = pa.schema([
    pa.field("ts", pa.timestamp("us", tz="UTC")),
    pa.field("scenario", pa.string()),
    pa.field("trace_id", pa.string()),
    pa.field("episode_id", pa.string()),
    pa.field("step", pa.string()),
    pa.field(REASON_COLUMN, pa.string(), nullable=False),
    pa.field("raw", pa.string(), nullable=False),
    pa.field("source_uri", pa.string()),
    pa.field("line_no", pa.int64()),
])


def flatten_state(record: dict[str, Any]) -> dict[str, Any]:
    """``{"state": {"a": {"b": 1}}}`` → ``{"state.a.b": 1}``; other keys are left alone."""
    nested = record.pop("state")
    stack: list[tuple[str, Any]] = [(STATE_PREFIX.rstrip("."), nested)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            name = f"{prefix}.{key}"
            if isinstance(value, dict):
                stack.append((name, value))
            else:
                record[name] = value
    return record


def parse_json_lines(lines: Sequence[str], sources: Sequence[str] | str = "",
                     line_nos: Sequence[int] | None = None, *, flatten: bool = True,
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Parse landing-zone lines into ``(rows, unparseable)``.

    ``rows`` has one object column per key (a nested ``state`` object is flattened to
    ``state.<dotted.path>`` columns unless ``flatten`` is false) plus ``_raw``/``_source``/``_line_no``; ``unparseable``
    has ``raw``, ``quarantine_reason``, ``_source`` and ``_line_no`` for each line that is
    not valid JSON or not a JSON object. ``len(rows) + len(unparseable) == len(lines)``.
    """
    n = len(lines)
    src = [sources] * n if isinstance(sources, str) else list(sources)
    nos = list(range(1, n + 1)) if line_nos is None else list(line_nos)
    if len(src) != n or len(nos) != n:
        raise ValueError(f"parse_json_lines: {n} lines but {len(src)} sources and {len(nos)} "
                         "line numbers; expected one of each per line")
    records: list[dict[str, Any]] = []
    keep: list[int] = []
    bad: list[tuple[int, str]] = []
    loads = json.loads
    for i, text in enumerate(lines):
        # One json.loads per line: parsing is the irreducible per-line cost, and it is the
        # only way to tell exactly which line is broken.
        try:
            rec = loads(text)
        except ValueError as exc:
            bad.append((i, f"json: line is not valid JSON ({exc})"))
            continue
        if not isinstance(rec, dict):
            bad.append((i, f"json: line is a JSON {type(rec).__name__}, expected an object"))
            continue
        if flatten and isinstance(rec.get("state"), dict):
            rec = flatten_state(rec)
        records.append(rec)
        keep.append(i)
    rows = pd.DataFrame(records, dtype=object) if records else pd.DataFrame(dtype=object)
    rows[RAW_COLUMN] = pd.Series([lines[i] for i in keep], dtype=object)
    rows[SOURCE_COLUMN] = pd.Series([src[i] for i in keep], dtype=object)
    rows[LINE_COLUMN] = pd.Series([nos[i] for i in keep], dtype="int64")
    unparseable = pd.DataFrame({
        "raw": pd.Series([lines[i] for i, _ in bad], dtype="str"),
        REASON_COLUMN: pd.Series([r for _, r in bad], dtype="str"),
        SOURCE_COLUMN: pd.Series([src[i] for i, _ in bad], dtype="str"),
        LINE_COLUMN: pd.Series([nos[i] for i, _ in bad], dtype="int64"),
    })
    return rows, unparseable


def _text(col: pd.Series) -> pd.Series:
    return col.map(lambda v: None if _is_missing(v) else str(v)).astype("str")


def quarantine_frame(quarantined: pd.DataFrame, scenario: str) -> pd.DataFrame:
    """Quarantined rows (input rows + ``quarantine_reason``, or :func:`parse_json_lines`'s
    ``unparseable``) → the stored quarantine shape (:data:`QUARANTINE_SCHEMA`)."""
    q = quarantined.reset_index(drop=True)
    n = len(q)

    def col(name: str) -> pd.Series:
        return q[name] if name in q else pd.Series([None] * n, dtype=object)

    # The original text where there is one (a parsed line's ``_raw``, an unparseable line's
    # ``raw``); rows that never were text (e.g. sandbox rows) are kept as JSON.
    raw = pd.Series([None] * n, dtype=object)
    for name in ("raw", RAW_COLUMN):
        if name in q:
            raw = raw.where(raw.notna(), q[name].astype(object))
    missing = raw.isna().to_numpy()
    if missing.any():
        payload = q.loc[missing, [c for c in q.columns if not str(c).startswith(META_PREFIX)
                                  and c not in (REASON_COLUMN, "raw")]]
        raw[missing] = [json.dumps({k: v for k, v in r.items() if not _is_missing(v)},
                                   default=str) for r in payload.to_dict("records")]
    return pd.DataFrame({
        "ts": parse_timestamps(col("ts")) if n else pd.Series([], dtype="datetime64[us, UTC]"),
        "scenario": pd.Series([scenario] * n, dtype="str"),
        "trace_id": _text(col("trace_id")),
        "episode_id": _text(col("episode_id")),
        "step": _text(col("step")),
        REASON_COLUMN: q[REASON_COLUMN].astype("str"),
        "raw": raw.astype("str"),
        "source_uri": _text(col(SOURCE_COLUMN)),
        "line_no": pd.to_numeric(col(LINE_COLUMN), errors="coerce").astype("Int64"),
    })
