"""The run key: the data interval a pipeline run owns, built, parsed and validated here only.

Every output a step writes is keyed by its run key, so re-running a step for the same interval
overwrites instead of adding. The text form names the interval exactly and is safe in file names:

    20261130T0500        the hour [05:00, 06:00) UTC
    20261130T0545-15m    the quarter hour [05:45, 06:00) UTC

A scheduled run owns the interval that has *just ended*: the 06:00 tick of an hourly DAG reads
[05:00, 06:00), never the hour that is only starting. Anything that does not parse is an error,
never "now".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from rlops.common.errors import UserError

_TEXT = re.compile(r"^(\d{8}T\d{4})(?:-(\d{1,5})m)?$")
_STAMP = "%Y%m%dT%H%M"
MAX_MINUTES = 7 * 24 * 60


def as_utc(value: datetime | str) -> datetime:
    """A timezone-aware UTC datetime from a datetime (naive means UTC) or an ISO-8601 string."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise UserError(f"time {value!r}: expected an ISO-8601 time such as 2026-11-30T05:00:00Z") from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@dataclass(frozen=True, order=True)
class RunKey:
    """A half-open UTC interval ``[start, end)`` on whole minutes."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        for name in ("start", "end"):
            t = getattr(self, name)
            if t.tzinfo is None or t.utcoffset() != timedelta(0) or t.second or t.microsecond:
                raise UserError(f"run key {name} {t.isoformat()}: expected a UTC time on a whole minute")
        minutes = self.minutes
        if not 0 < minutes <= MAX_MINUTES:
            raise UserError(
                f"run key interval [{self.start:%Y-%m-%d %H:%M}, {self.end:%Y-%m-%d %H:%M}): "
                f"expected 1 to {MAX_MINUTES} minutes, start before end"
            )

    # ---- building ------------------------------------------------------------------------------
    @classmethod
    def parse(cls, text: str) -> RunKey:
        """``20261130T0500`` (one hour) or ``20261130T0545-15m``; anything else is a UserError."""
        m = _TEXT.match(str(text).strip()) if isinstance(text, str) else None
        if not m:
            raise UserError(
                f"run key {text!r}: expected YYYYMMDDTHHMM (an hour, e.g. 20261130T0500) "
                "or YYYYMMDDTHHMM-<minutes>m (e.g. 20261130T0545-15m), in UTC"
            )
        try:
            start = datetime.strptime(m.group(1), _STAMP).replace(tzinfo=UTC)
        except ValueError:
            raise UserError(f"run key {text!r}: {m.group(1)} is not a calendar date and time") from None
        return cls(start, start + timedelta(minutes=int(m.group(2) or 60)))

    @classmethod
    def of(cls, value: RunKey | str | None, *, minutes: int = 60) -> RunKey:
        """``value`` parsed, or — when None — the latest whole interval of ``minutes`` that has ended."""
        if isinstance(value, RunKey):
            return value
        if value is None or value == "":
            return cls.ending_at(datetime.now(UTC), minutes)
        return cls.parse(value)

    @classmethod
    def between(cls, start: datetime | str, end: datetime | str) -> RunKey:
        return cls(as_utc(start), as_utc(end))

    @classmethod
    def covering(cls, start: datetime | str, end: datetime | str) -> RunKey:
        """The smallest whole-minute interval holding ``[start, end)``."""
        lo, hi = as_utc(start), as_utc(end)
        if hi <= lo:
            raise UserError(
                f"interval [{lo.isoformat()}, {hi.isoformat()}) is empty or reversed: expected start before end"
            )
        floor = lo.replace(second=0, microsecond=0)
        ceil = hi.replace(second=0, microsecond=0)
        return cls(floor, ceil if ceil == hi else ceil + timedelta(minutes=1))

    @classmethod
    def ending_at(cls, when: datetime | str, minutes: int = 60) -> RunKey:
        """The interval of ``minutes`` that ends at or just before ``when`` (aligned to ``minutes``
        since midnight UTC): at 16:07 with 15 minutes, [15:45, 16:00)."""
        t = as_utc(when).replace(second=0, microsecond=0)
        midnight = t.replace(hour=0, minute=0)
        since = int((t - midnight).total_seconds() // 60)
        end = midnight + timedelta(minutes=since - since % minutes)
        return cls(end - timedelta(minutes=minutes), end)

    @classmethod
    def from_airflow(cls, context: Mapping[str, Any], minutes: int) -> RunKey:
        """The interval a DAG run owns. With a data interval (``start < end``) that interval;
        under a trigger timetable (``CronTriggerTimetable``: start == end == the logical date) the
        ``minutes`` that ended at the logical date — the window that has just happened."""
        start, end = context.get("data_interval_start"), context.get("data_interval_end")
        if start is not None and end is not None and as_utc(end) > as_utc(start):
            return cls.between(start, end)
        at = context.get("logical_date") or start
        if at is None:
            run = context.get("dag_run")
            at = getattr(run, "run_after", None)
        if at is None:
            raise UserError(
                "the Airflow context has no data interval, logical date or run_after: "
                "cannot tell which interval this run owns"
            )
        return cls.ending_at(at, minutes)

    # ---- reading -------------------------------------------------------------------------------
    def __str__(self) -> str:
        stamp = self.start.strftime(_STAMP)
        return stamp if self.minutes == 60 else f"{stamp}-{self.minutes}m"

    @property
    def minutes(self) -> int:
        return int((self.end - self.start).total_seconds() // 60)

    def contains(self, when: datetime) -> bool:
        return self.start <= as_utc(when) < self.end

    def lookback(self, hours: float) -> tuple[datetime, datetime]:
        """``[end - hours, end)``: the window of the last ``hours`` up to this interval's end."""
        return self.end - timedelta(hours=hours), self.end

    def hours(self) -> list[datetime]:
        """The UTC hour starts that overlap the interval (the ``date=/hour=`` partitions it touches)."""
        hour = self.start.replace(minute=0)
        out = []
        while hour < self.end:
            out.append(hour)
            hour += timedelta(hours=1)
        return out

    def next(self) -> RunKey:
        return RunKey(self.end, self.end + (self.end - self.start))


def parse_run_key(value: str) -> str:
    """``value`` as a canonical run key string (an argparse ``type=`` and conf validator)."""
    return str(RunKey.parse(value))
