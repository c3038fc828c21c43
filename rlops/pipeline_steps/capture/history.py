"""Decision logs from before rlops (``rlops import``): a parquet, CSV or JSON-lines file, local or
``s3://``, with its own timestamps, mapped into the trace store through the same contract,
duplicate checks, quarantine and manifest as a capture, partitioned by event time.

The log's columns are mapped onto the trace schema (``docs/trace-store.md``): a mapping names,
for a trace column (``episode_id``, ``step``, ``ts``, ``action``, ``reward_total``, ``latency_ms``…),
a state field (its dotted path, with or without ``state.``) or ``propensity``, the log's column
that holds it. A log column already named like a trace column or a state field needs no entry;
every other column is kept in the row's ``extra``. What a log of a policy outside rlops usually
lacks is filled in, and said in the result's warnings:

- ``step`` missing: every row is a one-step episode (``step`` 0, ``done``), its ``episode_id``
  (when that is missing too) the file's name and the row number;
- ``done`` missing: the last step of each episode;
- ``trace_id`` missing: the episode id; ``source``: ``live``; ``scenario``: the pack's name;
- ``action_mask`` missing: every action legal; a log whose masks follow its own system's action
  order names it (``mask_actions`` in the mapping file) and the masks are rewritten in the pack's;
- ``propensity`` (the logging policy's probability of the logged action) becomes ``logp``; a
  deterministic logging policy (``deterministic``) logs ``logp`` 0. Without either, the rows carry
  no propensity and the off-policy gate says so (insufficient evidence).

The whole import is one run key covering the log's first to last timestamp, so a second import
of the same file replaces the first (its manifest names the files it wrote).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.common.errors import UserError
from rlops.common.run_key import MAX_MINUTES, RunKey
from rlops.data_contracts.contracts import contract_for
from rlops.data_contracts.schema import STATE_PREFIX, Contract
from rlops.pipeline_steps.capture.core import defaulted_notes, write_capture
from rlops.pipeline_steps.capture.input_checks import CaptureRejected, rejection
from rlops.pipeline_steps.capture.log_mapping import PROPENSITY, LogMapping, check_local_file, shown
from rlops.pipeline_steps.capture.request import ImportRequest
from rlops.pipeline_steps.capture.source_lines import CaptureSource, SourceLine
from rlops.pipeline_steps.capture.summary import CaptureSummary

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import Pack

READERS = (".parquet", ".pq", ".csv", ".csv.gz", ".jsonl", ".jsonl.gz", ".json", ".ndjson")
TEXT_COLUMNS = ("action_mask", "episode_id", "trace_id", "action")


def import_log(ctx: StepContext, request: ImportRequest) -> CaptureSummary:
    """Import ``request.path`` into the trace store of ``ctx``'s scenario (a dry run reads,
    validates and counts every row and writes nothing). Raises :class:`CaptureRejected` when more
    rows were quarantined than ``capture.max_quarantine_share`` or none was accepted — after the
    rows are written, so nothing is lost."""
    _check_request(request)
    pack = ctx.load_pack()
    contract = contract_for(pack)
    mapping = LogMapping.of(request, pack, contract, ctx.storage.read_text)
    if request.deterministic and PROPENSITY in mapping.columns:
        raise UserError(
            f"import: --deterministic says every logged action had propensity 1, and the column "
            f"{mapping.columns[PROPENSITY]!r} gives each its propensity; keep one"
        )
    text = [col for trace, col in mapping.columns.items() if trace in TEXT_COLUMNS] + list(TEXT_COLUMNS)
    log = read_log(ctx.storage, request.path, text)
    rows, notes, reasons = trace_rows(log, mapping, pack, contract, request, PurePosixPath(request.path).name)
    placed = ~reasons.fillna("").str.startswith(TS_REASON)  # a time in the future or a placeholder
    ts = rows["ts"][placed].dropna()
    where = mapping.columns.get("ts", "ts")
    if ts.empty:
        why = next((r for r in reasons if isinstance(r, str) and r.startswith(TS_REASON)), None)
        raise UserError(
            f"import {shown(request.path)}: no row has a readable timestamp in its column {where!r}"
            + (f" (first: {why.removeprefix('import: ')})" if why else "")
            + " (map the log's event-time column with --columns ts=COLUMN)"
        )
    first, last = ts.min().to_pydatetime(), ts.max().to_pydatetime() + timedelta(seconds=1)
    if last - first > timedelta(minutes=MAX_MINUTES):
        raise UserError(
            f"import {shown(request.path)}: the timestamps in {where!r} span {first:%Y-%m-%d %H:%M} to "
            f"{last:%Y-%m-%d %H:%M} ({(last - first).total_seconds() / 86400:,.1f} days); one import covers at most "
            f"{MAX_MINUTES // 1440} days (a run key): split the log by time and import each part"
        )
    key = RunKey.covering(first, last)
    store = ctx.traces
    source = CaptureSource(f"import:{request.path}", _lines(rows, reasons, request.path))
    res = write_capture(
        ctx.storage,
        source,
        store.trace_uri,
        ctx.scenario,
        contract,
        key.start,
        key.end,
        chunk_rows=ctx.config.capture.chunk_rows,
        dry_run=ctx.dry_run,
        quarantine_root_uri=store.quarantine_uri,
        run_key=str(key),
        max_lateness=timedelta(0),
        landing_uri=store.landing_uri,
    )
    out = CaptureSummary(
        scenario=ctx.scenario,
        run_key=str(key),
        interval=[key.start.isoformat(), key.end.isoformat()],
        dry_run=ctx.dry_run,
        source=source.name,
        rows_in=res.rows_in,
        rows_accepted=res.rows_accepted,
        rows_quarantined=res.rows_quarantined,
        partitions=res.partitions,
        quarantine_partitions=res.quarantine_partitions,
        quarantine_uri=res.quarantine_uri,
        quarantine_reasons=res.quarantine_reasons,
        manifest_uri=res.manifest_uri,
        warnings=[*notes, *defaulted_notes(res.defaulted)],
    )
    rejected = rejection(out, ctx.config.capture.max_quarantine_share)
    if rejected is None and out.rows_accepted == 0:
        rejected = f"import of {request.path}: {out.rows_in} rows in, none accepted: nothing was imported"
    if rejected:
        raise CaptureRejected(rejected, out)
    return out


def _check_request(request: ImportRequest) -> None:
    """What the options alone show to be wrong: a blank policy name, or one with control characters
    (it is shown in tables and logs, a line break would forge a line)."""
    name = request.policy_version
    if name is not None and name != "" and (not name.strip() or not name.isprintable()):
        raise UserError(
            f"import --policy-version {name[:80]!r}: expected the logging policy's name, printable text "
            "that is not blank"
        )


def read_log(storage: Any, path: str, text_columns: list[str] | None = None) -> pd.DataFrame:
    """The log as a frame, by its file name's ending; ``text_columns`` of a CSV file are read as
    text (an action mask ``0011`` is not the number 11). A log without a row is an error."""
    name = path.lower()
    if not name.endswith(READERS):
        raise UserError(f"import {shown(path)}: expected a file ending in one of {', '.join(READERS)}")
    check_local_file(path, "import")
    with storage.local_path(path) as local:
        try:
            if name.endswith((".parquet", ".pq")):
                log = pd.read_parquet(local)
            elif name.endswith((".csv", ".csv.gz")):
                log = pd.read_csv(local, low_memory=False, dtype=dict.fromkeys(text_columns or [], str))
            else:
                log = pd.read_json(local, lines=True, dtype=False, convert_dates=False)
        except (ValueError, OSError) as exc:
            detail = " ".join(str(exc).split())[:200]
            raise UserError(f"import {shown(path)}: not a readable {name.rsplit('.', 1)[-1]} file ({detail})") from None
    if log.empty:
        raise UserError(f"import {shown(path)}: the log has no rows (columns: {list(log.columns)[:30]})")
    return log


def trace_rows(
    log: pd.DataFrame, mapping: LogMapping, pack: Pack, contract: Contract, request: ImportRequest, stem: str
) -> tuple[pd.DataFrame, list[str], pd.Series]:
    """The log's rows as trace rows (one per log row, in its order), the notes on what was filled
    in, and per row why it is quarantined before validation (None: it goes to the contract)."""
    missing = sorted({c for c in mapping.columns.values() if c not in log.columns})
    if missing:
        raise UserError(
            f"import {shown(request.path)}: the mapping names columns the log does not have: {missing} "
            f"(the log's columns: {list(log.columns)[:30]})"
        )
    fields = _state_paths(contract)
    rows = pd.DataFrame(index=log.index)
    mapped = set(mapping.columns.values())
    for col in log.columns:
        if col not in mapped:
            rows[STATE_PREFIX + col if col in fields else col] = log[col]
    for trace, col in mapping.columns.items():
        rows[trace] = log[col]
    notes: list[str] = []
    reasons = pd.Series([None] * len(rows), index=rows.index, dtype=object)
    n = len(pack.scenario.action_names)
    for trace, value in mapping.constants.items():
        rows[trace] = value
    _whole_numbers_as_ints(rows, contract)
    if "ts" not in rows:
        raise UserError(
            f"import {shown(request.path)}: the log has no ts column: map its event-time column with "
            "--columns ts=COLUMN"
        )
    rows["ts"], note = _event_times(rows["ts"], mapping.columns.get("ts", "ts"), reasons)
    notes += [note] if note else []
    if mapping.actions and "action" in rows:
        rows["action"] = rows["action"].map(lambda v: mapping.actions.get(str(v), v))
    if "step" in rows and "episode_id" not in rows:
        raise UserError(
            f"import {shown(request.path)}: a log with steps needs an episode column (--columns episode_id=…)"
        )
    if "step" not in rows:
        rows["step"] = 0
        rows["done"] = rows.get("done", True)
        if "episode_id" not in rows:
            rows["episode_id"] = [f"{stem}:{i}" for i in range(len(rows))]
        notes.append("no step column: every row is a one-step episode")
    elif "done" not in rows:
        step = pd.to_numeric(rows["step"], errors="coerce")
        last = step.groupby(rows["episode_id"].astype(str)).transform("max")
        rows["done"] = step.eq(last)
        notes.append("no done column: the last step of each episode ends it")
    if "policy_version" not in rows:
        if not request.policy_version:
            raise UserError(
                f"import {shown(request.path)}: which policy served these decisions? Give --policy-version NAME "
                "(or map a column: --columns policy_version=…)"
            )
        rows["policy_version"] = request.policy_version
    if PROPENSITY in rows:
        rows["logp"] = _log_propensities(rows.pop(PROPENSITY), mapping.columns.get(PROPENSITY, PROPENSITY), reasons)
    elif request.deterministic:
        rows["logp"] = 0.0
    elif "logp" not in rows:
        notes.append("no propensity: the off-policy gate cannot judge a candidate on these rows")
    if "action_mask" not in rows:
        rows["action_mask"] = "1" * n
        notes.append("no action_mask column: every action taken as legal")
    else:
        rows["action_mask"] = _masks_in_pack_order(rows["action_mask"], mapping, pack, request.path)
    if "trace_id" not in rows:
        rows["trace_id"] = rows["episode_id"]
    if "source" not in rows:
        rows["source"] = "live"
    rows["scenario"] = pack.name
    return rows, notes, reasons


#: A decision's time before this is a placeholder (year 1, the epoch), not when it was made.
EARLIEST = datetime(1971, 1, 1, tzinfo=UTC)
#: How far past the clock of this machine a logged decision may lie (clocks differ a little).
CLOCK_SKEW = timedelta(minutes=5)
TS_REASON = "import: ts"
_ZONE = r"(?:[zZ]|[+-]\d{2}(?::?\d{2})?|UTC|GMT)\s*$"


def _event_times(col: pd.Series, where: str, reasons: pd.Series) -> tuple[pd.Series, str | None]:
    """The log's timestamps in UTC: text as ISO 8601 or any form pandas reads (without a zone: UTC,
    said in the note), numbers as epoch seconds, as the capture contract reads them. A time in the
    future or before 1971 sets the row's reason; an unreadable one is left for the contract (null)."""
    note = None
    if pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_bool_dtype(col):
        ts = pd.to_datetime(pd.to_numeric(col, errors="coerce"), unit="s", utc=True, errors="coerce")
    else:
        text = col.map(lambda v: v if isinstance(v, str) else None)
        naive = text.notna() & ~text.fillna("").str.contains(_ZONE, regex=True)
        if naive.any():
            note = f"{int(naive.sum()):,} timestamps in {where!r} carry no time zone: read as UTC"
        ts = pd.to_datetime(col, utc=True, errors="coerce", format="mixed")
    now = datetime.now(UTC)
    late = ts.notna() & (ts > now + CLOCK_SKEW)
    early = ts.notna() & (ts < EARLIEST)
    for mask, why in ((late, f"in the future (now {now:%Y-%m-%dT%H:%M}Z)"), (early, "before 1971: a placeholder")):
        for i in ts.index[mask]:
            reasons[i] = f"{TS_REASON} {ts[i].isoformat()} ({where}) is {why}, not the time of a logged decision"
    return ts, note


def _log_propensities(col: pd.Series, where: str, reasons: pd.Series) -> np.ndarray:
    """``log(propensity)``; a propensity that is given but no probability in (0, 1] sets the row's
    reason (a missing one leaves the row without a propensity, as a log without the column)."""
    p = pd.to_numeric(col.map(lambda v: np.nan if isinstance(v, bool) else v), errors="coerce").to_numpy(np.float64)
    ok = (p > 0) & (p <= 1)
    for i, (label, value) in enumerate(col.items()):
        if not ok[i] and not _is_missing(value):
            reasons[label] = (
                f"import: propensity {str(value)[:40]!r} ({where}) is no probability in (0, 1]: the logging "
                "policy's probability of the logged action"
            )
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, np.log(np.where(ok, p, 1.0)), np.nan)


def _is_missing(v: Any) -> bool:
    return v is None or v is pd.NA or v is pd.NaT or (isinstance(v, float) and math.isnan(v))


def _masks_in_pack_order(masks: pd.Series, mapping: LogMapping, pack: Pack, path: str) -> pd.Series:
    """The log's masks with one position per pack action, in the pack's order: rewritten by
    ``mask_actions`` (an action the log's system did not have is taken as legal); without it, a
    mask of another width than the pack's action count is one clear error."""
    names = list(pack.scenario.action_names)
    text = masks.astype("string")
    widths = sorted(int(w) for w in text.str.len().dropna().unique())
    if not mapping.mask_actions:
        if widths and widths != [len(names)]:
            raise UserError(
                f"import {path}: the log's action_mask has {', '.join(map(str, widths))} positions, the pack "
                f"{pack.name} has {len(names)} actions: name the log's action at each position in the mapping "
                "file (mask_actions: [...], in the log system's order), or drop the column to take every action "
                "as legal"
            )
        return masks
    order = [mapping.actions.get(a, a) for a in mapping.mask_actions]
    where = {a: i for i, a in enumerate(order)}

    def rewrite(mask: Any) -> Any:
        if not isinstance(mask, str) or len(mask) != len(order):
            return mask  # the contract quarantines it, with the reason
        return "".join(mask[where[a]] if a in where else "1" for a in names)

    return masks.map(rewrite)


def _whole_numbers_as_ints(rows: pd.DataFrame, contract: Contract) -> None:
    """Integer columns a CSV file or a missing value turned into floats (``538.0``) back to
    integers, where every value is whole; others are left for the contract to quarantine."""
    for spec in contract.columns:
        if spec.kind != "int" or spec.name not in rows or rows[spec.name].dtype.kind != "f":
            continue
        col = rows[spec.name]
        known = col.dropna()
        if (known == np.floor(known)).all():
            rows[spec.name] = col.astype("Int64")


def _state_paths(contract: Contract) -> set[str]:
    """The dotted paths of the state fields of a trace contract."""
    return {c.name.removeprefix(STATE_PREFIX) for c in contract.columns if c.name.startswith(STATE_PREFIX)}


def _lines(rows: pd.DataFrame, reasons: pd.Series, uri: str) -> Iterator[SourceLine]:
    """Each row as the JSON line a tracer would have written (NaN and NaT as null), with its reason
    when the import already knows it must be quarantined."""
    cols = list(rows.columns)
    why = [r if isinstance(r, str) else None for r in reasons.tolist()]
    for no, values in enumerate(rows.itertuples(index=False, name=None), start=1):
        rec = {c: _plain(v) for c, v in zip(cols, values, strict=True)}
        yield SourceLine(json.dumps(rec, default=str), uri, no, why[no - 1])


def _plain(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "isoformat"):
        return None if str(v) == "NaT" else v.isoformat()
    if isinstance(v, np.generic):
        return _plain(v.item())
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, np.ndarray):
        return [_plain(x) for x in v.tolist()]
    return v
