"""What a capture says about its own input, beyond the counts, so that it cannot fail silently.

* **Too much quarantined.** Each quarantined row carries its reason; the capture tallies them by
  kind (:func:`reason_kind`: the check that failed, without the offending value). When more than
  ``capture.max_quarantine_share`` of the interval's rows were quarantined, the input is bad — an
  agent writing another schema, a pack whose contract no longer matches production — and the
  capture raises :class:`CaptureRejected` (a user error: exit 2, the capture DAG's task fails at
  once) with the top reasons in one paragraph. It raises only after its rows are written and its
  run tracked: nothing is lost (rows in = accepted + quarantined, each where it went), and a re-run
  of the interval after the fix replaces them. Rows that another source of the run key had already
  stored (an agent tracing through two sources) are copies, not bad input: they count neither way.
* **Nothing in.** A capture of an interval without rows says which interval it read and where
  the newest landing files of the scenario are (their folder and time), so that a capture run
  right after the agent — ``rlops capture`` reads the hour that has just ended — says why it found
  nothing. It stays a warning (exit 0): a scheduled capture of a quiet interval is normal.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.common.run_key import RunKey
from rlops.data_contracts.validation import STORED_ELSEWHERE
from rlops.trace_store.store import LANDING_SUFFIXES, file_time, join_uri, partition_path

if TYPE_CHECKING:
    from rlops.pipeline_steps.capture.summary import CaptureSummary
    from rlops.storage.backend import Storage

#: The kind of a row another source of the run key already stored (not counted as bad input).
STORED_KIND = f"duplicate: {STORED_ELSEWHERE}"
#: Kinds kept apart; the rest are added up as :data:`OTHER` (a bound on what one capture carries).
MAX_KINDS = 50
OTHER = "other reasons"
TOP_REASONS = 3
EXAMPLE_CHARS = 240
#: Days of landing folders looked through for the newest files when an interval has none: one
#: listing per day, so an empty capture stays cheap on S3.
LOOKBACK_DAYS = 14


class CaptureRejected(UserError):
    """More of an interval's rows were quarantined than ``capture.max_quarantine_share`` allows.
    The rows were written (accepted and quarantined, each where it belongs); ``summary`` is the
    capture's result, for whoever renders the error."""

    def __init__(self, message: str, summary: CaptureSummary | None = None) -> None:
        super().__init__(message)
        self.summary = summary


def reason_kind(reason: object) -> str:
    """The kind of one row's ``quarantine_reason``: its first check, without the offending value,
    so rows broken the same way count together — ``expect_…[column]: <check>`` for a contract
    check, else the code in front of the first colon (``json``, ``interval``, ``duplicate``, a
    column's name for a value of no accepted shape)."""
    if reason is None or (isinstance(reason, float) and math.isnan(reason)):
        return "unspecified"
    first = str(reason).split("; ", 1)[0].strip()
    if first.endswith(STORED_ELSEWHERE):
        return STORED_KIND
    head = first.split(" (got ", 1)[0]
    kind = head if head.startswith("expect_") else head.split(":", 1)[0].strip()
    return (kind or "unspecified")[:120]


@dataclass
class QuarantineTally:
    """Quarantined rows by :func:`reason_kind`, with the first full reason of each kind."""

    rows: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, reasons: Iterable[object]) -> None:
        for reason in reasons:
            kind = reason_kind(reason)
            if kind not in self.rows and len(self.rows) >= MAX_KINDS and kind != STORED_KIND:
                kind = OTHER
            self.rows[kind] += 1
            self.examples.setdefault(kind, str(reason)[:EXAMPLE_CHARS])

    def to_list(self) -> list[dict[str, Any]]:
        """``[{reason, rows, example}]``, most rows first."""
        ranked = sorted(self.rows.items(), key=lambda kv: (-kv[1], kv[0]))
        return [{"reason": k, "rows": n, "example": self.examples[k]} for k, n in ranked]


def quarantine_share(rows_in: int, rows_quarantined: int, reasons: list[dict[str, Any]]) -> float | None:
    """The share of the interval's new rows that were quarantined (rows another source had already
    stored left out of both counts); None without new rows."""
    copies = sum(int(r["rows"]) for r in reasons if r["reason"] == STORED_KIND)
    new = rows_in - copies
    return (rows_quarantined - copies) / new if new > 0 else None


def rejection(out: CaptureSummary, max_share: float) -> str | None:
    """The paragraph of a capture whose quarantined share is over ``max_share`` (None: within it)."""
    share = quarantine_share(out.rows_in, out.rows_quarantined, out.quarantine_reasons)
    if share is None or share <= max_share:
        return None
    bad = [r for r in out.quarantine_reasons if r["reason"] != STORED_KIND]
    top = "; ".join(f"{r['reason']} — {r['rows']} rows (e.g. {r['example']!r})" for r in bad[:TOP_REASONS]) or (
        "not tallied"
    )
    more = f"; and {len(bad) - TOP_REASONS} more kinds" if len(bad) > TOP_REASONS else ""
    copies = sum(int(r["rows"]) for r in out.quarantine_reasons if r not in bad)
    counted = (
        f"{out.rows_quarantined - copies} of its {out.rows_in} rows"
        if not copies
        else f"{out.rows_quarantined - copies} of its {out.rows_in - copies} new rows (and {copies} copies of "
        "rows another source of the run key had stored)"
    )
    accepted_where = ", ".join(out.partitions) or "no partition"
    quarantine_where = ", ".join(out.quarantine_partitions) or out.quarantine_uri or "the quarantine"
    kept = (
        f"Dry run: nothing was written; a real run would keep {out.rows_accepted} accepted rows and "
        f"{out.rows_quarantined} quarantined ones with their reasons."
        if out.dry_run
        else f"Nothing was lost: {out.rows_accepted} rows accepted into {accepted_where}; "
        f"{out.rows_quarantined} quarantined with their reasons in {quarantine_where}."
    )
    return (
        f"capture of {out.scenario} {out.run_key} (interval [{out.interval[0]}, {out.interval[1]}), "
        f"source {out.source}) quarantined {counted} ({share:.0%}), more "
        f"than capture.max_quarantine_share ({max_share:.0%}) allows. Top reasons: {top}{more}. {kept} "
        "Fix what the agent writes (or the pack's contract, if production changed), then capture the "
        "interval again: a re-run replaces its files. Raise capture.max_quarantine_share to accept "
        "such an interval as it is."
    )


# --------------------------------------------------------------------------- nothing in


@dataclass(frozen=True)
class NewestLanding:
    """The hour folder holding a scenario's newest landing files."""

    folder: str
    newest: datetime
    files: int


def newest_landing(
    storage: Storage, landing_uri: str, scenario: str, key: RunKey, now: datetime
) -> NewestLanding | None:
    """The newest landing files of ``scenario``: the day folders of the :data:`LOOKBACK_DAYS` days
    up to ``now`` (or the interval's end, when later) and those around the interval, newest first,
    one listing each; None when none of them holds a file."""
    latest = max(now, key.end)
    days: set[date] = {(latest - timedelta(days=i)).date() for i in range(LOOKBACK_DAYS)}
    days |= {(key.start + timedelta(days=i)).date() for i in (-1, 0, 1)}
    for day in sorted(days, reverse=True):
        folder = join_uri(landing_uri, partition_path(scenario=scenario, date=f"{day:%Y-%m-%d}"))
        by_hour: dict[str, list[datetime]] = {}
        for uri in storage.list(folder):
            where, name = uri.rsplit("/", 1)
            hour = where.rsplit("/", 1)[-1]
            if name.startswith(".") or not name.lower().endswith(LANDING_SUFFIXES) or not hour.startswith("hour="):
                continue
            try:
                start = datetime(day.year, day.month, day.day, int(hour[len("hour=") :]), tzinfo=UTC)
            except ValueError:  # not an hour folder the tracer writes
                continue
            by_hour.setdefault(where, []).append(file_time(uri, start))
        if by_hour:
            where, times = max(by_hour.items(), key=lambda kv: max(kv[1]))
            return NewestLanding(where, max(times), len(times))
    return None


def empty_interval_warning(
    storage: Storage, landing_uri: str, scenario: str, key: RunKey, files_read: list[str], now: datetime | None = None
) -> str:
    """Why a landing-zone capture of ``key`` found no rows, and where the scenario's traffic is."""
    interval = f"[{key.start.isoformat()}, {key.end.isoformat()})"
    read = f"no rows in: the capture of {scenario} read the interval {interval} (run key {key})"
    if files_read:
        return f"{read}; its {len(files_read)} landing file(s) hold no trace lines: {', '.join(files_read[:3])}"
    scenario_root = join_uri(landing_uri, partition_path(scenario=scenario))
    now = now or datetime.now(UTC)
    found = newest_landing(storage, landing_uri, scenario, key, now)
    quiet = (
        " A scheduled capture of a quiet interval finds nothing, and that is normal; with no live agent "
        "yet, --simulate (or params capture.simulate_when_empty: true) stores simulated champion traffic "
        "instead."
    )
    if found is None:
        latest = max(now, key.end)
        return (
            f"{read}, and no landing file of {scenario} lies under {scenario_root} in the {LOOKBACK_DAYS} days "
            f"up to {latest:%Y-%m-%d} nor around the interval: is the agent's Tracer writing to this landing "
            f"zone (params capture.landing_dir) under the scenario name {scenario!r}?{quiet}"
        )
    where = (
        f"the newest landing files of {scenario} are in {found.folder} ({found.files} file(s), the newest "
        f"written {found.newest.isoformat()})"
    )
    if found.newest >= key.end:
        hour = RunKey.of(found.newest.strftime("%Y%m%dT%H00"))
        return (
            f"{read}; {where}, after the interval. `rlops capture` reads the hour that has just ended by "
            f"default: capture that traffic once its hour has ended, or name its interval (--run-key {hour})."
            f"{quiet}"
        )
    return (
        f"{read}; {where}, before the interval: no agent has traced {scenario} to {landing_uri} since "
        f"then — is it still running?{quiet}"
    )


__all__ = [
    "CaptureRejected",
    "NewestLanding",
    "QuarantineTally",
    "empty_interval_warning",
    "newest_landing",
    "quarantine_share",
    "reason_kind",
    "rejection",
]
