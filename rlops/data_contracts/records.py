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

from rlops.data_contracts.conversion import is_missing, parse_timestamps
from rlops.data_contracts.schema import EXTRA_COLUMN, META_PREFIX, STATE_PREFIX
from rlops.data_contracts.validation import REASON_COLUMN

#: Bookkeeping columns carried next to each parsed row (never part of the contract).
RAW_COLUMN = "_raw"
SOURCE_COLUMN = "_source"
LINE_COLUMN = "_line_no"

#: A line longer than this (characters) is quarantined unparsed; its stored text is cut to
#: :data:`KEPT_CHARS` (the reason gives the full length), so one huge line cannot exhaust memory.
MAX_LINE_CHARS = 1 << 20
#: JSON nested deeper than this is quarantined: nothing a tracer writes comes close, and deep
#: nesting is what overflows recursive code further down (serialisers, Arrow).
MAX_DEPTH = 64
KEPT_CHARS = 4096

#: The stored shape of every quarantine partition.
QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("ts", pa.timestamp("us", tz="UTC")),
        pa.field("scenario", pa.string()),
        pa.field("trace_id", pa.string()),
        pa.field("episode_id", pa.string()),
        pa.field("step", pa.string()),
        pa.field(REASON_COLUMN, pa.string(), nullable=False),
        pa.field("raw", pa.string(), nullable=False),
        pa.field("source_uri", pa.string()),
        pa.field("line_no", pa.int64()),
    ]
)


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


def parse_json_lines(
    lines: Sequence[str],
    sources: Sequence[str] | str = "",
    line_nos: Sequence[int] | None = None,
    *,
    flatten: bool = True,
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
        raise ValueError(
            f"parse_json_lines: {n} lines but {len(src)} sources and {len(nos)} "
            "line numbers; expected one of each per line"
        )
    records: list[dict[str, Any]] = []
    keep: list[int] = []
    bad: list[tuple[int, str]] = []
    for i, text in enumerate(lines):
        rec, reason = parse_line(text)
        if reason is not None:
            bad.append((i, reason))
            continue
        assert rec is not None
        if flatten and isinstance(rec.get("state"), dict):
            rec = flatten_state(rec)
        records.append(rec)
        keep.append(i)
    rows = pd.DataFrame(records, dtype=object) if records else pd.DataFrame(dtype=object)
    rows[RAW_COLUMN] = pd.Series([lines[i] for i in keep], dtype=object)
    rows[SOURCE_COLUMN] = pd.Series([src[i] for i in keep], dtype=object)
    rows[LINE_COLUMN] = pd.Series([nos[i] for i in keep], dtype="int64")
    unparseable = pd.DataFrame(
        {
            "raw": pd.Series([_kept(lines[i]) for i, _ in bad], dtype="str"),
            REASON_COLUMN: pd.Series([r for _, r in bad], dtype="str"),
            SOURCE_COLUMN: pd.Series([src[i] for i, _ in bad], dtype="str"),
            LINE_COLUMN: pd.Series([nos[i] for i, _ in bad], dtype="int64"),
        }
    )
    return rows, unparseable


def _kept(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[:KEPT_CHARS]


def json_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deeply ``value`` nests (a scalar is 0, ``[]`` is 1), counted without recursion and
    only up to ``limit + 1``."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                return deepest
            stack.extend((v, depth) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value (use null)")


def parse_line(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """One landing-zone line → ``(record, None)`` or ``(None, reason)``. Never raises: every
    way a line can be bad (size, syntax, depth, shape, reserved keys) is a reason."""
    if len(text) > MAX_LINE_CHARS:
        return None, (
            f"size: line has {len(text)} characters, more than {MAX_LINE_CHARS} allowed (first {KEPT_CHARS} kept)"
        )
    try:
        # One json.loads per line: parsing is the irreducible per-line cost, and it is the
        # only way to tell exactly which line is broken.
        rec = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        return None, f"depth: JSON nested too deep to parse (more than {MAX_DEPTH} levels allowed)"
    except ValueError as exc:
        return None, f"json: line is not valid JSON ({exc})"
    if not isinstance(rec, dict):
        return None, f"json: line is a JSON {type(rec).__name__}, expected an object"
    # Counting brackets is cheap; the exact depth is only worked out when it could be too deep.
    if text.count("{") + text.count("[") > MAX_DEPTH:
        depth = json_depth(rec)
        if depth > MAX_DEPTH:
            return None, f"depth: JSON nested more than {MAX_DEPTH} levels deep"
    if "\\u" in text:
        # JSON may escape a lone surrogate (\ud800), which no UTF-8 file can store.
        try:
            json.dumps(rec, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:
            return None, f"encoding: the line escapes a lone UTF-16 surrogate ({exc.reason})"
    reserved = [k for k in rec if str(k).startswith(META_PREFIX)]
    if reserved:
        # Keys starting with "_" would collide with bookkeeping columns: keep them in ``extra``.
        extra = rec.get(EXTRA_COLUMN)
        if extra is not None and not isinstance(extra, dict):
            return None, (
                f"key {reserved[0]!r}: keys starting with {META_PREFIX!r} are kept in "
                f"{EXTRA_COLUMN!r}, but {EXTRA_COLUMN!r} is a {type(extra).__name__}, "
                "expected an object"
            )
        merged = dict(extra or {})
        for k in reserved:
            merged[k] = rec.pop(k)
        rec[EXTRA_COLUMN] = merged
    return rec, None


def _text(col: pd.Series) -> pd.Series:
    return col.map(lambda v: None if is_missing(v) else str(v)).astype("str")


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
        payload = q.loc[
            missing, [c for c in q.columns if not str(c).startswith(META_PREFIX) and c not in (REASON_COLUMN, "raw")]
        ]
        raw[missing] = [
            json.dumps({k: v for k, v in r.items() if not is_missing(v)}, default=str)
            for r in payload.to_dict("records")
        ]
    return pd.DataFrame(
        {
            "ts": parse_timestamps(col("ts")) if n else pd.Series([], dtype="datetime64[us, UTC]"),
            "scenario": pd.Series([scenario] * n, dtype="str"),
            "trace_id": _text(col("trace_id")),
            "episode_id": _text(col("episode_id")),
            "step": _text(col("step")),
            REASON_COLUMN: q[REASON_COLUMN].astype("str"),
            "raw": raw.astype("str"),
            "source_uri": _text(col(SOURCE_COLUMN)),
            "line_no": pd.to_numeric(col(LINE_COLUMN), errors="coerce").astype("Int64"),
        }
    )
