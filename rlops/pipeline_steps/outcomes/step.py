"""Late outcomes into the outcome store: ``rlops outcome import FILE`` and ``rlops outcome capture``.

Both read records (a file, or the outcome lines landed in the run key's interval under
``<landing>/_outcomes``), check them against the outcome contract
(:mod:`rlops.data_contracts.outcomes`), then against the trace store: a record whose episode is not
in the trace store, or whose time is more than ``outcomes.max_delay_days`` after the episode's last
decision, is quarantined with its reason. Records in = accepted + quarantined, always. Accepted
values are merged into the store (:meth:`rlops.trace_store.outcomes.OutcomeStore.upsert`): a repeated
outcome changes nothing, a changed one replaces the stored value and is listed in the result. Within
one batch, the latest record of a (episode, kind, name) wins; earlier ones are counted as superseded.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from rlops.common.errors import UserError
from rlops.common.step_result import StepResult
from rlops.data_contracts.outcomes import CheckedOutcomes, check_records
from rlops.data_contracts.records import parse_line
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest, OutcomeImportRequest
from rlops.trace_store.outcomes import KEY, OUTCOME_LANDING, STORE_SCHEMA, OutcomeStore
from rlops.trace_store.store import join_uri, scan_landing
from rlops.trace_store.time_partitions import parse_ts

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.storage.backend import Storage

READERS = (".jsonl", ".jsonl.gz", ".ndjson", ".csv", ".csv.gz", ".parquet", ".pq")
#: Episode ids looked up in the trace store per query (bounded parameter lists).
LOOKUP_CHUNK = 20_000


@dataclass
class RawBatch:
    """Records read from one source, where each came from, and the lines that were no JSON object."""

    records: list[dict[str, Any]] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    line_nos: list[int] = field(default_factory=list)
    unparseable: list[tuple[str, int, str, str]] = field(default_factory=list)
    """(source, line number, raw text, reason)."""

    def add_lines(self, text: str, source: str) -> None:
        for no, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            rec, reason = parse_line(line)
            if rec is None:
                self.unparseable.append((source, no, line[:4096], f"unparseable: {reason}"))
            else:
                self.add(rec, source, no)

    def add(self, record: dict[str, Any], source: str, line_no: int) -> None:
        self.records.append(record)
        self.sources.append(source)
        self.line_nos.append(line_no)


@dataclass(frozen=True)
class OutcomeSummary(StepResult):
    """One batch of outcomes stored: balanced record counts, what the store did, why records were quarantined."""

    scenario: str
    source: str
    """``file:<path>`` or ``landing_zone:<run key>``."""
    dry_run: bool
    records_in: int
    records_accepted: int
    records_quarantined: int
    values_added: int
    values_unchanged: int
    values_replaced: int
    values_superseded: int
    """Values of this batch overridden by a later record of the same key in the same batch."""
    replacements: list[dict[str, Any]]
    """The first replaced values (old and new)."""
    quarantine_reasons: dict[str, int]
    partitions: list[str]
    quarantine_uri: str | None
    files: list[str] = field(default_factory=list)
    """The landing files read (a capture)."""
    skipped_files: list[str] = field(default_factory=list)
    """Files in the landing interval that are not JSON lines (reported, never read)."""


def import_outcomes(ctx: StepContext, request: OutcomeImportRequest) -> OutcomeSummary:
    """Store the outcomes of ``request.path`` for ``ctx``'s scenario (a dry run checks and counts, writes nothing)."""
    path = request.path
    raw, digest = read_outcome_file(ctx.storage, path)
    if not raw.records and not raw.unparseable:
        raise UserError(f"outcome import {path}: the file holds no record; expected one outcome per line or row")
    store = ctx.traces.outcomes or OutcomeStore.from_params(ctx.config, ctx.storage)
    return store_batch(ctx, store, raw, f"import-{digest}", f"file:{path}")


def capture_outcomes(ctx: StepContext, request: OutcomeCaptureRequest | None = None) -> OutcomeSummary:
    """Store the outcome lines landed in the run key's interval (what a DAG task calls); a re-run of
    the run key stores the same values again, which changes nothing."""
    del request  # the interval is the capture's only input
    landing = join_uri(ctx.traces.landing_uri, OUTCOME_LANDING)
    files, skipped = scan_landing(ctx.storage, landing, ctx.scenario, ctx.key.start, ctx.key.end)
    raw = RawBatch()
    for uri in files:
        raw.add_lines(_text(ctx.storage, uri), uri)
    store = ctx.traces.outcomes or OutcomeStore.from_params(ctx.config, ctx.storage)
    summary = store_batch(ctx, store, raw, f"capture-{ctx.run_key}", f"landing_zone:{ctx.run_key}", allow_empty=True)
    return dataclasses.replace(summary, files=files, skipped_files=skipped)


def read_outcome_file(storage: Storage, path: str) -> tuple[RawBatch, str]:
    """The records of a JSON-lines, CSV or parquet file, and a digest of its bytes (the batch's name:
    a re-import of the same file replaces its own quarantine file)."""
    name = path.lower()
    if not name.endswith(READERS):
        raise UserError(f"outcome import {path}: expected a file ending in one of {', '.join(READERS)}")
    if "://" not in path or path.startswith("file://"):
        local = Path(path.removeprefix("file://"))
        if not local.is_file():
            what = "is a folder" if local.is_dir() else "does not exist"
            raise UserError(f"outcome import {path}: the file {what}; expected a readable outcomes file")
    data = storage.read_bytes(path if "://" in path else f"file://{Path(path).resolve()}")
    digest = hashlib.sha256(data).hexdigest()[:16]
    raw = RawBatch()
    try:
        if name.endswith((".jsonl", ".jsonl.gz", ".ndjson")):
            raw.add_lines(_decode(data, name), path)
        else:
            if name.endswith((".parquet", ".pq")):
                frame = pd.read_parquet(io.BytesIO(data))
            else:  # ids as text: an id 0042 is not the number 42
                frame = pd.read_csv(io.BytesIO(_decode(data, name).encode()), dtype={"episode_id": str})
            for no, rec in enumerate(frame.to_dict("records"), start=2 if name.endswith((".csv", ".csv.gz")) else 1):
                raw.add({str(k): v for k, v in rec.items()}, path, no)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        detail = " ".join(str(exc).split())[:200]
        raise UserError(f"outcome import {path}: not a readable {name.rsplit('.', 1)[-1]} file ({detail})") from None
    return raw, digest


def _decode(data: bytes, name: str) -> str:
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    return data.decode("utf-8")


def _text(storage: Storage, uri: str) -> str:
    return _decode(storage.read_bytes(uri), uri.lower())


def decision_times(ctx: StepServices, episode_ids: list[str]) -> pd.Series:
    """The time of each episode's last decision (its latest trace row), by episode id; an id the
    trace store does not hold is absent."""
    reader, uri = ctx.traces.reader, ctx.traces.scenario_uri(ctx.scenario)
    found = []
    for i in range(0, len(episode_ids), LOOKUP_CHUNK):
        chunk = episode_ids[i : i + LOOKUP_CHUNK]
        found.append(reader.read(uri, columns=["episode_id", "ts"], where={"episode_id": chunk}))
    rows = pd.concat(found, ignore_index=True) if found else pd.DataFrame()
    if rows.empty:
        return pd.Series(dtype="datetime64[us, UTC]")
    return parse_ts(rows["ts"]).groupby(rows["episode_id"].astype(str).to_numpy()).max()


def store_batch(
    services: StepServices, store: OutcomeStore, raw: RawBatch, batch: str, source: str, allow_empty: bool = False
) -> OutcomeSummary:
    """Check, quarantine and store one batch of raw records in ``store`` (see the module)."""
    checked = check_records(raw.records, services.scenario, raw.sources, raw.line_nos)
    rows, late = against_traces(services, store, checked, raw)
    quarantined = pd.concat(
        [
            pd.DataFrame(
                [(None, None, reason, text, src, no) for src, no, text, reason in raw.unparseable],
                columns=["episode_id", "ts", "reason", "raw", "source_uri", "line_no"],
            ),
            checked.quarantined,
            late,
        ],
        ignore_index=True,
    )
    records_in = len(raw.records) + len(raw.unparseable)
    accepted = records_in - len(quarantined)
    latest = rows.sort_values(["ts", "record"], kind="stable").drop_duplicates(KEY, keep="last")
    wrote = store.upsert(services.scenario, latest[STORE_SCHEMA.names], dry_run=services.dry_run)
    q_uri = store.write_quarantine(services.scenario, batch, quarantined.astype({"line_no": "int64"}), services.dry_run)
    reasons = quarantined["reason"].str.split(":", n=1).str[0].value_counts() if len(quarantined) else pd.Series()
    summary = OutcomeSummary(
        scenario=services.scenario,
        source=source,
        dry_run=services.dry_run,
        records_in=records_in,
        records_accepted=accepted,
        records_quarantined=len(quarantined),
        values_added=wrote.added,
        values_unchanged=wrote.unchanged,
        values_replaced=wrote.replaced,
        values_superseded=len(rows) - len(latest),
        replacements=wrote.replacements,
        quarantine_reasons={str(k): int(v) for k, v in reasons.items()},
        partitions=wrote.partitions,
        quarantine_uri=q_uri,
    )
    if records_in and not accepted and not allow_empty:
        first = str(quarantined["reason"].iloc[0])
        raise UserError(
            f"outcome {source}: none of {records_in} record(s) was accepted (first reason: {first}); all are "
            f"quarantined in {q_uri} — expected outcomes of episodes in the trace store of {services.scenario!r}, "
            "in the format of docs/outcomes.md"
        )
    return summary


def against_traces(
    ctx: StepServices, store: OutcomeStore, checked: CheckedOutcomes, raw: RawBatch
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(rows, quarantined)``: the contract-valid rows whose episode is in the trace store and whose
    time is within ``outcomes.max_delay_days`` of its last decision (with ``decision_ts``), and the
    records that are not, with their reasons."""
    rows = checked.rows
    if rows.empty:
        return rows.assign(decision_ts=pd.Series(dtype="datetime64[us, UTC]")), checked.quarantined.iloc[:0]
    decided = decision_times(ctx, sorted(set(rows["episode_id"].astype(str))))
    found = decided.reindex(rows["episode_id"].astype(str).to_numpy()).to_numpy()
    rows = rows.assign(decision_ts=pd.to_datetime(pd.Series(found, index=rows.index), utc=True).dt.as_unit("us"))
    unknown = rows["decision_ts"].isna()
    delay = rows["ts"] - rows["decision_ts"]
    late = ~unknown & (delay > store.rules.max_delay)
    days = store.rules.max_delay.days
    reasons: dict[int, str] = {}
    for r in rows[unknown | late].itertuples(index=False):
        if r.record in reasons:
            continue
        if pd.isna(r.decision_ts):
            reasons[r.record] = (
                f"unknown_episode: episode {r.episode_id!r} is not in the trace store of {ctx.scenario!r}; "
                "an outcome needs its captured episode"
            )
        else:
            reasons[r.record] = (
                f"too_late: outcome at {r.ts.isoformat()} is {(r.ts - r.decision_ts).days} days after the episode's "
                f"last decision ({r.decision_ts.isoformat()}); outcomes.max_delay_days is {days}"
            )
    bad = rows["record"].isin(list(reasons))
    quarantined = pd.DataFrame(
        [
            (
                str(raw.records[i].get("episode_id")),
                str(raw.records[i].get("ts")),
                reason,
                json.dumps(raw.records[i], default=str)[:4096],
                raw.sources[i],
                raw.line_nos[i],
            )
            for i, reason in sorted(reasons.items())
        ],
        columns=["episode_id", "ts", "reason", "raw", "source_uri", "line_no"],
    )
    return rows[~bad].reset_index(drop=True), quarantined


__all__ = ["OutcomeSummary", "RawBatch", "capture_outcomes", "import_outcomes", "read_outcome_file", "store_batch"]
