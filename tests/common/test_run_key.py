"""RunKey: the one home of a run's data interval — parsing, building from Airflow, windows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from rlops.common.errors import UserError
from rlops.common.run_key import RunKey

T = datetime(2026, 11, 30, 16, 0, tzinfo=UTC)


def test_text_round_trip():
    assert str(RunKey.parse("20261130T0500")) == "20261130T0500"
    key = RunKey.parse("20261130T1545-15m")
    assert (key.start, key.end, key.minutes) == (T - timedelta(minutes=15), T, 15)
    assert str(key) == "20261130T1545-15m"
    assert RunKey.parse(str(key)) == key


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "now",
        "..",
        "../escape",
        "20261130",
        "20261130T05",
        "20261332T0500",
        "20261130T0500-0m",
        "20261130T0500-99999m",
        "20261130T0500Z",
        20261130,
    ],
)
def test_bad_keys_are_user_errors_never_now(bad):
    with pytest.raises(UserError, match="run key"):
        RunKey.parse(bad)


def test_a_scheduled_run_owns_the_interval_that_has_just_ended():
    # CronTriggerTimetable: data interval start == end == logical date.
    ctx = {"data_interval_start": T, "data_interval_end": T, "logical_date": T}
    assert RunKey.from_airflow(ctx, 15) == RunKey(T - timedelta(minutes=15), T)
    assert RunKey.from_airflow(ctx, 60) == RunKey(T - timedelta(hours=1), T)
    # A timetable with a real data interval keeps it.
    ctx = {"data_interval_start": T - timedelta(hours=1), "data_interval_end": T}
    assert str(RunKey.from_airflow(ctx, 60)) == "20261130T1500"
    # A manual run has only run_after.
    assert RunKey.from_airflow({"dag_run": SimpleNamespace(run_after=T + timedelta(minutes=7))}, 15) == RunKey(
        T - timedelta(minutes=15), T
    )


def test_ending_at_aligns_and_windows():
    key = RunKey.ending_at(T + timedelta(minutes=7, seconds=30), 15)
    assert (key.start, key.end) == (T - timedelta(minutes=15), T)
    assert key.lookback(24) == (T - timedelta(hours=24), T)
    assert key.contains(T - timedelta(minutes=1)) and not key.contains(T)
    assert RunKey.parse("20261130T1530-90m").hours() == [T - timedelta(hours=1), T]
    assert key.next() == RunKey(T, T + timedelta(minutes=15))


def test_covering_rounds_outward_and_rejects_empty():
    key = RunKey.covering(T + timedelta(seconds=5), T + timedelta(minutes=1, seconds=1))
    assert (key.start, key.end) == (T, T + timedelta(minutes=2))
    with pytest.raises(UserError, match="empty or reversed"):
        RunKey.covering(T, T)
