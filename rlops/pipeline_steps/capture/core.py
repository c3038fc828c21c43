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
failure ends the run with the manifest's status ``failed``. Input is streamed in chunks of
``chunk_rows`` lines, so memory stays
bounded however large the interval is. Re-running an interval first deletes the files its
last run listed in the manifest (kept up to date after every chunk, so a crashed run is
cleaned up too), then writes files named after the interval: re-runs overwrite, never
duplicate. ``dry_run`` reads and validates everything and reports what it would write.

Landing-zone layout (what the tracer writes)::

    <landing>/scenario=<s>/date=YYYY-MM-DD/hour=HH/
        <YYYYmmddTHHMMSSffffff>Z-<host>-<pid>-<seq>.jsonl     (or .jsonl.gz, any letter case)

A file belongs to the interval ``[start, end)`` that holds the UTC time at the front of its
name (a name without one counts from the start of its hour folder).

Every source goes through this one writer, :func:`write_capture`: the landing zone, and the
readers of :mod:`rlops.pipeline_steps.capture.trace_sources` (an OTLP export file, MLflow's trace
store), which only turn their input into
:class:`~rlops.pipeline_steps.capture.source_lines.SourceLine` items. So the same rules hold for all
of them: the interval and duplicate checks, quarantine with a reason, the manifest, streaming in
chunks. Each source of a run key has its own manifest and file names (the landing zone's are
``<run_key>.json`` and ``part-<run_key>-NNNNN``; another source's carry a tag of its name,
``<run_key>~<tag>.json`` and ``part-<run_key>-<tag>-NNNNN``): re-running one source replaces only
its own earlier output, a second source adds to the run key, and an ``(episode_id, step)`` another
source of the run key already captured is a duplicate.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from rlops.common.params_model import CaptureParams
from rlops.common.progress import progress_bar
from rlops.common.run_key import RunKey, as_utc
from rlops.data_contracts.records import parse_json_lines
from rlops.data_contracts.schema import Contract
from rlops.data_contracts.validation import (
    REASON_COLUMN,
    reject_outside_interval_and_duplicates,
    validate_frame,
)
from rlops.pipeline_steps.capture.input_checks import QuarantineTally
from rlops.pipeline_steps.capture.source_lines import LANDING_ZONE, CaptureSource, chunked, landing_lines
from rlops.storage.backend import Storage
from rlops.trace_store.store import (
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
    #: the quarantined rows by kind of reason (:meth:`QuarantineTally.to_list`)
    quarantine_reasons: list[dict[str, Any]] = field(default_factory=list)
    manifest_uri: str | None = None
    dry_run: bool = False
    #: what the rows came from: ``landing_zone``, ``otlp:<uri>``, ``mlflow:<experiment>``
    source: str = "landing_zone"
    #: spans of a trace source that are parts of a decision (its children), not decisions
    spans_skipped: int = 0
    #: rows per state column that lacked the field and took its declared ``default:``
    defaulted: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def defaulted_notes(defaulted: dict[str, int]) -> list[str]:
    """One warning per state column whose declared default filled rows that lacked it."""
    return [
        f"{n} rows lacked {column}: its declared default was used (traffic older than the field)"
        for column, n in sorted(defaulted.items())
    ]


# --------------------------------------------------------------------------- pure helpers


def validate_rows(df: pd.DataFrame, contract: Contract) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(accepted, quarantined)``: typed rows in contract order, and the input rows that broke
    the contract with a ``quarantine_reason``. ``len(accepted) + len(quarantined) == len(df)``."""
    result = validate_frame(df, contract)
    return result.accepted, result.quarantined


def manifest_name(run_key: str, tag: str) -> str:
    return f"{run_key}~{tag}" if tag else run_key


def _captured_keys(
    storage: Storage, store: TraceStore, scenario: str, run_key: str, own_manifest: str
) -> set[tuple[str, int]]:
    """``(episode_id, step)`` of the rows the run key's *other* sources already captured, so a
    decision that arrives through two sources is stored once."""
    folder = store.manifest_uri(scenario, run_key).rsplit("/", 1)[0]
    seen: set[tuple[str, int]] = set()
    prefix = folder + "/"
    for uri in storage.list(folder, suffix=".json"):
        name = uri[len(prefix) :] if uri.startswith(prefix) else uri.rsplit("/", 1)[-1]
        if uri == own_manifest or not (name == f"{run_key}.json" or name.startswith(f"{run_key}~")):
            continue
        for part in storage.read_json(uri).get("files", []):
            if not str(part).startswith(store.trace_uri.rstrip("/") + "/"):
                continue  # a quarantine file
            if not storage.exists(part):
                continue
            keys = storage.read_parquet(part, columns=["episode_id", "step"])
            seen.update(zip(keys["episode_id"].astype(str), keys["step"].astype("int64").tolist()))
    return seen


# --------------------------------------------------------------------------- the step
#: rows parsed and validated at once: params ``capture.chunk_rows``'s default, for callers outside a step
DEFAULT_CHUNK_ROWS = CaptureParams().chunk_rows


def capture_landing_zone(
    storage: Storage,
    landing_uri: str,
    trace_root_uri: str,
    scenario: str,
    contract: Contract,
    interval_start: datetime | str,
    interval_end: datetime | str,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    dry_run: bool = False,
    quarantine_root_uri: str | None = None,
    run_key: str | None = None,
    progress: bool = False,
    max_lateness: timedelta = timedelta(hours=1),
    max_clock_skew: timedelta = timedelta(minutes=5),
) -> CaptureResult:
    """Capture one data interval of ``scenario`` from the landing zone (see module docstring).

    A row's ``ts`` must lie in ``[start - max_lateness, end + max_clock_skew)``: a tracer names a
    file when it flushes, so its rows may be older than the file (buffered, or kept through a
    failing write) but not newer beyond clock skew. Anything else — a bogus year, another day —
    is quarantined with the reason, as is a second row for one ``(episode_id, step)``.

    ``run_key`` names the output files (default: derived from the interval, see
    :class:`~rlops.common.run_key.RunKey`); pass the pipeline's own key to share one naming across steps.
    ``progress`` draws a bar of the rows captured so far on stderr.
    """
    start, end = as_utc(interval_start), as_utc(interval_end)
    RunKey.covering(start, end)  # rejects an empty or reversed interval before any listing
    files, skipped = scan_landing(storage, landing_uri, scenario, start, end)
    source = CaptureSource(LANDING_ZONE, landing_lines(storage, files), files, skipped)
    return write_capture(
        storage,
        source,
        trace_root_uri,
        scenario,
        contract,
        start,
        end,
        chunk_rows=chunk_rows,
        dry_run=dry_run,
        quarantine_root_uri=quarantine_root_uri,
        run_key=run_key,
        progress=progress,
        max_lateness=max_lateness,
        max_clock_skew=max_clock_skew,
        landing_uri=landing_uri,
    )


def write_capture(
    storage: Storage,
    source: CaptureSource,
    trace_root_uri: str,
    scenario: str,
    contract: Contract,
    interval_start: datetime | str,
    interval_end: datetime | str,
    chunk_rows: int = DEFAULT_CHUNK_ROWS,
    dry_run: bool = False,
    quarantine_root_uri: str | None = None,
    run_key: str | None = None,
    progress: bool = False,
    max_lateness: timedelta = timedelta(hours=1),
    max_clock_skew: timedelta = timedelta(minutes=5),
    landing_uri: str = "",
) -> CaptureResult:
    """The one capture writer: ``source``'s rows, streamed in chunks, validated against the
    contract, checked against the interval and for duplicates (within the run and against the
    run key's other sources), written to the trace store and quarantine, with a manifest kept
    up to date after every chunk. See the module docstring and :func:`capture_landing_zone`."""
    start, end = as_utc(interval_start), as_utc(interval_end)
    key = RunKey.covering(start, end)  # rejects an empty or reversed interval
    run_key = str(RunKey.parse(run_key)) if run_key else str(key)
    quarantine_root = quarantine_root_uri or default_quarantine_root(trace_root_uri)
    store = TraceStore(storage, landing_uri, trace_root_uri, quarantine_root)
    files, skipped = source.files_read, source.files_skipped
    file_key = run_key if not source.tag else f"{run_key}-{source.tag}"  # names this source's files
    manifest_uri = store.manifest_uri(scenario, manifest_name(run_key, source.tag))
    if not dry_run and storage.exists(manifest_uri):
        for old in storage.read_json(manifest_uri).get("files", []):
            storage.delete(old)  # the previous run of this source and interval, complete or not
    written: list[str] = []
    accepted_parts: list[str] = []
    quarantine_parts: list[str] = []
    rows_in = rows_accepted = rows_quarantined = 0

    def save_manifest(status: str) -> None:
        if not dry_run:
            storage.write_json(
                manifest_uri,
                {
                    "run_key": run_key,
                    "scenario": scenario,
                    "status": status,
                    "source": source.name,
                    "spans_skipped": source.spans_skipped,
                    "interval_start": start.isoformat(),
                    "interval_end": end.isoformat(),
                    "files_read": files,
                    "files_skipped": skipped,
                    "files": written,
                    "rows_in": rows_in,
                    "rows_accepted": rows_accepted,
                    "rows_quarantined": rows_quarantined,
                },
            )

    save_manifest("running")
    stored = _captured_keys(storage, store, scenario, run_key, manifest_uri)
    seen: set[tuple[str, int]] = set()
    defaulted: Counter[str] = Counter()
    tally = QuarantineTally()
    window = (start - max_lateness, end + max_clock_skew)
    bar = progress_bar(progress, desc="capture", unit="rows", unit_scale=True)
    try:
        for chunk in chunked(source.items, chunk_rows):
            rows, unparseable = parse_json_lines(chunk.lines, chunk.sources, chunk.line_nos)
            checked = validate_frame(rows, contract)
            accepted, quarantined = checked.accepted, checked.quarantined
            defaulted.update(checked.defaulted)
            # The run owns its interval and each (episode_id, step) once: the contract's
            # row-identity rules, which need the interval and every earlier chunk.
            accepted, foreign = reject_outside_interval_and_duplicates(accepted, *window, seen, stored)
            extra = [f for f in (foreign, unparseable, chunk.rejected_rows()) if len(f)]
            if extra:
                quarantined = pd.concat([quarantined, *extra], ignore_index=True)
            if len(accepted) + len(quarantined) != len(chunk):
                raise AssertionError(
                    f"capture lost rows in chunk {chunk.index} of {run_key}: "
                    f"{len(chunk)} in, {len(accepted)} accepted, "
                    f"{len(quarantined)} quarantined"
                )
            new = write_trace_partitions(
                storage, accepted, trace_root_uri, file_key, contract=contract, part=chunk.index, dry_run=dry_run
            )
            accepted_parts += new
            newq = write_quarantine_partitions(
                storage,
                quarantined,
                quarantine_root,
                scenario,
                file_key,
                fallback_ts=start,
                part=chunk.index,
                dry_run=dry_run,
                window=window,
            )
            quarantine_parts += newq
            tally.add(quarantined[REASON_COLUMN].tolist() if len(quarantined) else [])
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
        partitions=folders(accepted_parts),
        rows_in=rows_in,
        rows_accepted=rows_accepted,
        rows_quarantined=rows_quarantined,
        quarantine_uri=(
            TraceStore(storage, landing_uri, quarantine_root, quarantine_root).scenario_uri(scenario)
            if rows_quarantined
            else None
        ),
        run_key=run_key,
        files_read=files,
        files_skipped=skipped,
        files_written=written,
        quarantine_partitions=folders(quarantine_parts),
        quarantine_reasons=tally.to_list(),
        manifest_uri=None if dry_run else manifest_uri,
        dry_run=dry_run,
        source=source.name,
        spans_skipped=source.spans_skipped,
        defaulted=dict(defaulted),
    )
