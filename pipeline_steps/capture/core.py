"""Capture: compact landing-zone JSON lines into the validated, partitioned trace store.

Reads the JSON-lines files an agent's :class:`agent_sdk.Tracer` wrote for one data interval,
validates every row against the scenario's trace contract (Great Expectations), and writes

* accepted rows to ``<trace_root>/scenario=<s>/date=YYYY-MM-DD/hour=HH/`` as
  ``part-<run_key>-NNNNN.parquet`` (partitioned by each row's ``ts``, UTC);
* quarantined rows, with ``quarantine_reason`` and their original text, to
  ``<quarantine_root>/scenario=<s>/date=…/hour=…/part-<run_key>-NNNNN.parquet``
  (by default ``quarantine/`` next to the trace root, so a reader of the trace root never
  meets a row of another schema);
* a manifest ``<trace_root>/_manifests/scenario=<s>/<run_key>.json`` listing those files.

Rows in = rows accepted + rows quarantined, always (a line that is not JSON is quarantined
with its raw text). Input is streamed in chunks of ``chunk_rows`` lines, so memory stays
bounded however large the interval is. Re-running an interval first deletes the files its
last run listed in the manifest (kept up to date after every chunk, so a crashed run is
cleaned up too), then writes files named after the interval: re-runs overwrite, never
duplicate. ``dry_run`` reads and validates everything and reports what it would write.

Landing-zone layout (what the tracer writes)::

    <landing>/scenario=<s>/date=YYYY-MM-DD/hour=HH/
        <YYYYmmddTHHMMSSffffff>Z-<host>-<pid>-<seq>.jsonl

A file belongs to the interval ``[start, end)`` that holds the UTC time at the front of its
name (a name without one counts from the start of its hour folder).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd
import pyarrow as pa

from data_contracts.records import (
    LINE_COLUMN,
    QUARANTINE_SCHEMA,
    SOURCE_COLUMN,
    parse_json_lines,
    quarantine_frame,
)
from data_contracts.schema import META_PREFIX, Contract
from data_contracts.validation import REASON_COLUMN, validate_frame
from pipeline_steps.infra.storage import Storage, partition_path

QUARANTINE_DIR = "quarantine"
MANIFEST_DIR = "_manifests"
_NAME_TIME = re.compile(r"^(\d{8}T\d{12})Z")
_RUN_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


@dataclass(frozen=True)
class CaptureResult:
    """What a capture run wrote (or, in a dry run, would write)."""

    partitions: list[str]
    rows_in: int
    rows_accepted: int
    rows_quarantined: int
    quarantine_uri: str | None
    run_key: str = ""
    files_read: list[str] = field(default_factory=list)
    files_written: list[str] = field(default_factory=list)
    quarantine_partitions: list[str] = field(default_factory=list)
    manifest_uri: str | None = None
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- pure helpers

def as_utc(value: datetime | str) -> datetime:
    """A tz-aware UTC datetime from a datetime (naive means UTC) or an ISO-8601 string."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"interval bound {value!r} is not an ISO-8601 timestamp "
                             "(e.g. 2026-01-01T10:00:00Z)") from exc
    if not isinstance(value, datetime):
        raise TypeError(f"interval bound {value!r}: expected a datetime or ISO-8601 string")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(
        timezone.utc)


def join_uri(base: str, *parts: str) -> str:
    """``base`` (any storage URI) with ``parts`` appended; :meth:`Storage.join` only joins
    under the storage root, and the landing zone and trace store may live elsewhere."""
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p)])


def default_quarantine_root(trace_root_uri: str) -> str:
    """``quarantine/`` next to the trace root (``…/traces`` → ``…/quarantine``)."""
    parent = trace_root_uri.rstrip("/").rsplit("/", 1)[0]
    return join_uri(parent, QUARANTINE_DIR)


def check_run_key(run_key: str) -> str:
    if not _RUN_KEY.match(run_key):
        raise ValueError(f"run key {run_key!r}: expected 1-64 letters, digits, '.', '_' or '-' "
                         "(it becomes part of file names)")
    return run_key


def run_key_for(interval_start: datetime | str, interval_end: datetime | str) -> str:
    """Deterministic key of a data interval, used in every file name a run writes."""
    start, end = as_utc(interval_start), as_utc(interval_end)
    if end <= start:
        raise ValueError(f"capture interval is empty or reversed: start {start.isoformat()} >= "
                         f"end {end.isoformat()}; expected start < end")
    return f"{start:%Y%m%dT%H%M%S}Z_{end:%Y%m%dT%H%M%S}Z"


def hours_between(start: datetime, end: datetime) -> list[datetime]:
    """The UTC hour starts that overlap ``[start, end)``."""
    hour = start.replace(minute=0, second=0, microsecond=0)
    out = []
    while hour < end:
        out.append(hour)
        hour += timedelta(hours=1)
    return out


def file_time(uri: str, hour_start: datetime) -> datetime:
    """The write time a landing file's name carries (its hour folder's start otherwise)."""
    m = _NAME_TIME.match(uri.rsplit("/", 1)[-1])
    if not m:
        return hour_start
    return datetime.strptime(m.group(1), "%Y%m%dT%H%M%S%f").replace(tzinfo=timezone.utc)


def partition_groups(df: pd.DataFrame, ts: pd.Series) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """Split ``df`` by the UTC date and hour of ``ts`` (aligned with ``df``)."""
    keys = pd.DataFrame({"date": ts.dt.strftime("%Y-%m-%d"), "hour": ts.dt.strftime("%H")},
                        index=df.index)
    for (date, hour), idx in keys.groupby(["date", "hour"], sort=True).groups.items():
        yield str(date), str(hour), df.loc[idx]


def validate_rows(df: pd.DataFrame, contract: Contract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(accepted, quarantined)``: typed rows in contract order, and the input rows that broke
    the contract with a ``quarantine_reason``. ``len(accepted) + len(quarantined) == len(df)``."""
    result = validate_frame(df, contract)
    return result.accepted, result.quarantined


# --------------------------------------------------------------------------- writing

def _part_name(run_key: str, part: int) -> str:
    return f"part-{run_key}-{part:05d}.parquet"


def write_trace_partitions(storage: Storage, df: pd.DataFrame, trace_root_uri: str,
                           run_key: str, *, contract: Contract | None = None, part: int = 0,
                           dry_run: bool = False) -> list[str]:
    """Write accepted trace rows to ``scenario=/date=/hour=`` partitions under
    ``trace_root_uri``, one file per partition named ``part-<run_key>-<part>.parquet``.

    ``df`` holds typed rows (as :func:`validate_rows` returns them); with ``contract`` the
    file gets exactly the contract's schema. Returns the file URIs (planned ones when
    ``dry_run``)."""
    if df.empty:
        return []
    for col in ("scenario", "ts"):
        if col not in df:
            raise ValueError(f"write_trace_partitions: rows lack the {col!r} column needed to "
                             "partition them; pass validated trace rows")
    schema = contract.arrow_schema() if contract is not None else None
    columns = (contract.column_names if contract is not None
               else [c for c in df.columns if not str(c).startswith(META_PREFIX)])
    written = []
    for scenario, rows in df.groupby("scenario", sort=True):
        for date, hour, group in partition_groups(rows, pd.to_datetime(rows["ts"], utc=True)):
            uri = join_uri(trace_root_uri,
                           partition_path(scenario=scenario, date=date, hour=hour),
                           _part_name(run_key, part))
            if not dry_run:
                table = pa.Table.from_pandas(group[columns], schema=schema, preserve_index=False)
                storage.write_parquet(uri, table)
            written.append(uri)
    return written


def write_quarantine_partitions(storage: Storage, quarantined: pd.DataFrame,
                                quarantine_root_uri: str, scenario: str, run_key: str, *,
                                fallback_ts: datetime, part: int = 0,
                                dry_run: bool = False) -> list[str]:
    """Write quarantined rows (input rows + ``quarantine_reason``) to
    ``<quarantine_root>/scenario=/date=/hour=`` partitions; rows whose ``ts`` is unreadable go
    to the partition of ``fallback_ts``. Returns the file URIs."""
    if quarantined.empty:
        return []
    frame = quarantine_frame(quarantined, scenario)
    ts = frame["ts"].fillna(pd.Timestamp(fallback_ts)).dt.as_unit("us")
    written = []
    for date, hour, group in partition_groups(frame, ts):
        uri = join_uri(quarantine_root_uri,
                       partition_path(scenario=scenario, date=date, hour=hour),
                       _part_name(run_key, part))
        if not dry_run:
            table = pa.Table.from_pandas(group, schema=QUARANTINE_SCHEMA, preserve_index=False)
            storage.write_parquet(uri, table)
        written.append(uri)
    return written


# --------------------------------------------------------------------------- reading

def landing_files(storage: Storage, landing_uri: str, scenario: str,
                  interval_start: datetime | str, interval_end: datetime | str) -> list[str]:
    """The landing-zone JSON-lines files of ``scenario`` written in ``[start, end)``, sorted."""
    start, end = as_utc(interval_start), as_utc(interval_end)
    files = []
    for hour in hours_between(start, end):
        folder = join_uri(landing_uri, partition_path(
            scenario=scenario, date=f"{hour:%Y-%m-%d}", hour=hour.hour))
        for uri in storage.list(folder, suffix=".jsonl"):
            if not uri.rsplit("/", 1)[-1].startswith(".") and start <= file_time(uri, hour) < end:
                files.append(uri)
    return sorted(files)


@dataclass
class LineChunk:
    """Up to ``chunk_rows`` non-blank lines, with the file and 1-based line number of each;
    ``undecodable`` holds the lines that are not UTF-8 (as ``(text, source, line_no)``, the
    text decoded with replacement characters)."""

    index: int
    lines: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)
    undecodable: list[tuple[str, str, int]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.lines) + len(self.undecodable)

    def undecodable_rows(self) -> pd.DataFrame:
        """The undecodable lines, shaped like :func:`parse_json_lines`'s unparseable rows."""
        return pd.DataFrame({
            "raw": pd.Series([t for t, _, _ in self.undecodable], dtype="str"),
            REASON_COLUMN: pd.Series(["encoding: line is not valid UTF-8"] * len(
                self.undecodable), dtype="str"),
            SOURCE_COLUMN: pd.Series([s for _, s, _ in self.undecodable], dtype="str"),
            LINE_COLUMN: pd.Series([n for _, _, n in self.undecodable], dtype="int64")})


def iter_line_chunks(storage: Storage, files: Sequence[str],
                     chunk_rows: int) -> Iterator[LineChunk]:
    """Stream the files line by line, yielding chunks; blank lines are not rows."""
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
    chunk = LineChunk(0)
    for uri in files:
        # Read as latin-1 (every byte is a character) and decode each line as UTF-8 here, so
        # one bad byte quarantines its line instead of failing the whole file.
        with storage.open_stream(uri, encoding="latin-1") as stream:
            for no, line in enumerate(stream, start=1):
                raw = line.rstrip("\r\n").encode("latin-1")
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    chunk.undecodable.append((raw.decode("utf-8", "replace"), uri, no))
                else:
                    chunk.lines.append(text)
                    chunk.sources.append(uri)
                    chunk.line_nos.append(no)
                if len(chunk) >= chunk_rows:
                    yield chunk
                    chunk = LineChunk(chunk.index + 1)
    if len(chunk):
        yield chunk


# --------------------------------------------------------------------------- the step

def capture_landing_zone(storage: Storage, landing_uri: str, trace_root_uri: str, scenario: str,
                         contract: Contract, interval_start: datetime | str,
                         interval_end: datetime | str, chunk_rows: int = 100_000,
                         dry_run: bool = False, quarantine_root_uri: str | None = None,
                         run_key: str | None = None, progress: bool = False) -> CaptureResult:
    """Capture one data interval of ``scenario`` from the landing zone (see module docstring).

    ``run_key`` names the output files (default: derived from the interval, see
    :func:`run_key_for`); pass the pipeline's own key to share one naming across steps.
    ``progress`` draws a bar of the rows captured so far on stderr.
    """
    from tqdm.auto import tqdm
    start, end = as_utc(interval_start), as_utc(interval_end)
    derived = run_key_for(start, end)  # also rejects an empty or reversed interval
    run_key = check_run_key(run_key) if run_key else derived
    quarantine_root = quarantine_root_uri or default_quarantine_root(trace_root_uri)
    files = landing_files(storage, landing_uri, scenario, start, end)
    manifest_uri = join_uri(trace_root_uri, MANIFEST_DIR, f"scenario={scenario}",
                                f"{run_key}.json")
    if not dry_run and storage.exists(manifest_uri):
        for old in storage.read_json(manifest_uri).get("files", []):
            storage.delete(old)  # the previous run of this interval, complete or not
    written: list[str] = []
    accepted_parts: list[str] = []
    quarantine_parts: list[str] = []
    rows_in = rows_accepted = rows_quarantined = 0

    def save_manifest(status: str) -> None:
        if not dry_run:
            storage.write_json(manifest_uri, {
                "run_key": run_key, "scenario": scenario, "status": status,
                "interval_start": start.isoformat(), "interval_end": end.isoformat(),
                "files_read": files, "files": written, "rows_in": rows_in,
                "rows_accepted": rows_accepted, "rows_quarantined": rows_quarantined})

    save_manifest("running")
    bar = tqdm(desc="capture", unit="rows", unit_scale=True, disable=not progress)
    for chunk in iter_line_chunks(storage, files, chunk_rows):
        rows, unparseable = parse_json_lines(chunk.lines, chunk.sources, chunk.line_nos)
        accepted, quarantined = validate_rows(rows, contract)
        extra = [f for f in (unparseable, chunk.undecodable_rows()) if len(f)]
        if extra:
            quarantined = pd.concat([quarantined, *extra], ignore_index=True)
        if len(accepted) + len(quarantined) != len(chunk):
            raise AssertionError(f"capture lost rows in chunk {chunk.index} of {run_key}: "
                                 f"{len(chunk)} in, {len(accepted)} accepted, "
                                 f"{len(quarantined)} quarantined")
        new = write_trace_partitions(storage, accepted, trace_root_uri, run_key,
                                     contract=contract, part=chunk.index, dry_run=dry_run)
        accepted_parts += new
        newq = write_quarantine_partitions(storage, quarantined, quarantine_root, scenario,
                                           run_key, fallback_ts=start, part=chunk.index,
                                           dry_run=dry_run)
        quarantine_parts += newq
        written += new + newq
        rows_in += len(chunk)
        rows_accepted += len(accepted)
        rows_quarantined += len(quarantined)
        save_manifest("running")  # a crash from here on is cleaned up by the next run
        bar.update(len(chunk))
    bar.close()
    save_manifest("complete")

    def folders(uris: list[str]) -> list[str]:
        return sorted({u.rsplit("/", 1)[0] for u in uris})

    return CaptureResult(
        partitions=folders(accepted_parts), rows_in=rows_in, rows_accepted=rows_accepted,
        rows_quarantined=rows_quarantined,
        quarantine_uri=(join_uri(quarantine_root, f"scenario={scenario}")
                        if rows_quarantined else None),
        run_key=run_key, files_read=files, files_written=written,
        quarantine_partitions=folders(quarantine_parts),
        manifest_uri=None if dry_run else manifest_uri, dry_run=dry_run)


def store_uris(params: dict[str, Any], storage: Storage | None = None) -> tuple[str, str, str]:
    """``(landing_uri, trace_root_uri, quarantine_root_uri)`` from the ``capture`` block of
    params: folders under ``storage.root``, or full URIs when they contain ``://``."""
    storage = storage or Storage.from_params(params)
    cfg = params.get("capture") or {}

    def where(key: str, default: str) -> str:
        value = str(cfg.get(key) or default)
        return value if "://" in value else storage.join(value)
    return (where("landing_dir", "landing"), where("trace_dir", "traces"),
            where("quarantine_dir", QUARANTINE_DIR))
