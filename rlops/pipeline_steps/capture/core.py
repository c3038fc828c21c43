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
with its raw text). No single line can stop an interval: a line over 1 MiB, nested deeper than
64 levels, not UTF-8 or with a lone surrogate is quarantined with its reason (see
:func:`rlops.data_contracts.records.parse_line`), as is a row whose ``ts`` lies outside the interval
(less the allowed lateness) or whose ``(episode_id, step)`` came earlier in the run. A storage
failure ends the run with the manifest's status ``failed``. Input is streamed in chunks of ``chunk_rows`` lines, so memory stays
bounded however large the interval is. Re-running an interval first deletes the files its
last run listed in the manifest (kept up to date after every chunk, so a crashed run is
cleaned up too), then writes files named after the interval: re-runs overwrite, never
duplicate. ``dry_run`` reads and validates everything and reports what it would write.

Landing-zone layout (what the tracer writes)::

    <landing>/scenario=<s>/date=YYYY-MM-DD/hour=HH/
        <YYYYmmddTHHMMSSffffff>Z-<host>-<pid>-<seq>.jsonl     (or .jsonl.gz, any letter case)

A file belongs to the interval ``[start, end)`` that holds the UTC time at the front of its
name (a name without one counts from the start of its hour folder).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from rlops.data_contracts.records import (
    LINE_COLUMN,
    SOURCE_COLUMN,
    parse_json_lines,
)
from rlops.data_contracts.schema import Contract
from rlops.data_contracts.validation import (
    REASON_COLUMN,
    reject_outside_interval_and_duplicates,
    validate_frame,
)
from rlops.common.run_key import RunKey, as_utc
from rlops.pipeline_steps.infra.storage import Storage
from rlops.pipeline_steps.infra.trace_store import (
    TraceStore,
    default_quarantine_root,
    scan_landing,
    write_quarantine_partitions,
    write_trace_partitions,
)


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
    #: landing files of the interval that are not JSON lines (``.jsonl``/``.jsonl.gz``): not read
    files_skipped: list[str] = field(default_factory=list)
    files_written: list[str] = field(default_factory=list)
    quarantine_partitions: list[str] = field(default_factory=list)
    manifest_uri: str | None = None
    dry_run: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# --------------------------------------------------------------------------- pure helpers

def validate_rows(df: pd.DataFrame, contract: Contract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(accepted, quarantined)``: typed rows in contract order, and the input rows that broke
    the contract with a ``quarantine_reason``. ``len(accepted) + len(quarantined) == len(df)``."""
    result = validate_frame(df, contract)
    return result.accepted, result.quarantined


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
        with storage.open_stream(uri, encoding="latin-1",
                                 gzip=uri.lower().endswith(".gz")) as stream:
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
                         run_key: str | None = None, progress: bool = False,
                         max_lateness: timedelta = timedelta(hours=1),
                         max_clock_skew: timedelta = timedelta(minutes=5)) -> CaptureResult:
    """Capture one data interval of ``scenario`` from the landing zone (see module docstring).

    A row's ``ts`` must lie in ``[start - max_lateness, end + max_clock_skew)``: a tracer names a
    file when it flushes, so its rows may be older than the file (buffered, or kept through a
    failing write) but not newer beyond clock skew. Anything else — a bogus year, another day —
    is quarantined with the reason, as is a second row for one ``(episode_id, step)``.

    ``run_key`` names the output files (default: derived from the interval, see
    :class:`~rlops.common.run_key.RunKey`); pass the pipeline's own key to share one naming across steps.
    ``progress`` draws a bar of the rows captured so far on stderr.
    """
    from tqdm.auto import tqdm
    start, end = as_utc(interval_start), as_utc(interval_end)
    key = RunKey.covering(start, end)  # rejects an empty or reversed interval
    run_key = str(RunKey.parse(run_key)) if run_key else str(key)
    quarantine_root = quarantine_root_uri or default_quarantine_root(trace_root_uri)
    store = TraceStore(storage, landing_uri, trace_root_uri, quarantine_root)
    files, skipped = scan_landing(storage, landing_uri, scenario, start, end)
    manifest_uri = store.manifest_uri(scenario, run_key)
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
                "files_read": files, "files_skipped": skipped, "files": written, "rows_in": rows_in,
                "rows_accepted": rows_accepted, "rows_quarantined": rows_quarantined})

    save_manifest("running")
    seen: set[tuple[str, int]] = set()
    window = (start - max_lateness, end + max_clock_skew)
    bar = tqdm(desc="capture", unit="rows", unit_scale=True, disable=not progress)
    try:
        for chunk in iter_line_chunks(storage, files, chunk_rows):
            rows, unparseable = parse_json_lines(chunk.lines, chunk.sources, chunk.line_nos)
            accepted, quarantined = validate_rows(rows, contract)
            # The run owns its interval and each (episode_id, step) once: the contract's
            # row-identity rules, which need the interval and every earlier chunk.
            accepted, foreign = reject_outside_interval_and_duplicates(accepted, *window, seen)
            extra = [f for f in (foreign, unparseable, chunk.undecodable_rows()) if len(f)]
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
                                               dry_run=dry_run, window=window)
            quarantine_parts += newq
            written += new + newq
            rows_in += len(chunk)
            rows_accepted += len(accepted)
            rows_quarantined += len(quarantined)
            save_manifest("running")  # a crash from here on is cleaned up by the next run
            bar.update(len(chunk))
    except BaseException:
        try:  # say so: a manifest left at "running" reads as a run still in progress
            save_manifest("failed")
        except Exception:  # noqa: BLE001 - the original error is the one to report
            pass
        raise
    finally:
        bar.close()
    save_manifest("complete")

    def folders(uris: list[str]) -> list[str]:
        return sorted({u.rsplit("/", 1)[0] for u in uris})

    return CaptureResult(
        partitions=folders(accepted_parts), rows_in=rows_in, rows_accepted=rows_accepted,
        rows_quarantined=rows_quarantined,
        quarantine_uri=(TraceStore(storage, landing_uri, quarantine_root, quarantine_root).scenario_uri(scenario)
                        if rows_quarantined else None),
        run_key=run_key, files_read=files, files_skipped=skipped, files_written=written,
        quarantine_partitions=folders(quarantine_parts),
        manifest_uri=None if dry_run else manifest_uri, dry_run=dry_run)
