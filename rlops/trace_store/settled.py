"""The episodes whose return became final in a window: the evidence a test of live outcomes reads.

A window's own episodes are not that evidence once outcomes arrive late: at the window's end the
episodes decided in it that await an outcome are still censored, and what is final among them is only
what needed no wait (a declined loan, not an approved one) — a biased share that shows no default at
all when the delay is as long as the window. So a live-outcome test reads, beside the window's
episodes that are final at its end, the episodes decided earlier whose awaited outcome **arrived** in
the window, joined with what was known at its end. Each settled episode is counted in exactly one
window: the one its return became final in.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import pandas as pd

from rlops.trace_store.outcome_join import JOIN_COLUMNS, settled

if TYPE_CHECKING:
    from rlops.trace_store.store import TraceStore


def settled_in(
    traces: TraceStore,
    scenario: str,
    window: tuple[datetime, datetime],
    columns: Sequence[str] | None = None,
    as_of: datetime | None = None,
) -> pd.DataFrame:
    """Rows (only ``columns``, with the join's columns) of the episodes of ``scenario`` whose return
    became final from the start of ``window`` to ``as_of`` (default: its end), outcomes known at
    ``as_of`` joined: those decided in the window that are final at ``as_of``, and those decided
    before it whose outcome arrived in that time. Without outcomes to join, the window's rows as
    :meth:`TraceStore.read` gives them."""
    start, end = window
    as_of = as_of or end
    wanted = None if columns is None else list(dict.fromkeys([*columns, *JOIN_COLUMNS]))
    here = traces.read(scenario, window, wanted, as_of=as_of)
    if traces.outcomes is None or not traces.joins_outcomes(scenario):
        return here
    final_here = settled(here)
    earlier = _settled_earlier(traces, scenario, start, as_of, wanted)
    if earlier.empty:
        return final_here
    if final_here.empty:
        return earlier
    earlier = earlier[~earlier["episode_id"].astype(str).isin(set(final_here["episode_id"].astype(str)))]
    return pd.concat([final_here, earlier], ignore_index=True)


def _settled_earlier(
    traces: TraceStore, scenario: str, start: datetime, end: datetime, columns: list[str] | None
) -> pd.DataFrame:
    """Rows of the episodes decided before ``start`` whose outcome arrived in ``[start, end)``,
    joined at ``end``; read around the hours of their last decisions (never the months between)."""
    assert traces.outcomes is not None
    first_day = (start - traces.outcomes.rules.max_delay).date()
    days = pd.date_range(first_day, end.date(), freq="D").date
    stored = traces.outcomes.read(scenario, days)
    if stored.empty:
        return pd.DataFrame()
    arrived = stored[(stored["ts"] >= pd.Timestamp(start)) & (stored["ts"] < pd.Timestamp(end))]
    arrived = arrived[arrived["decision_ts"] < pd.Timestamp(start)]
    if arrived.empty:
        return pd.DataFrame()
    wanted = set(arrived["episode_id"].astype(str))
    frames = []
    for lo, hi in _spans(sorted(set(arrived["decision_ts"].dt.floor("h")))):
        rows = traces.reader.read(traces.scenario_uri(scenario), (lo, hi), columns)
        frames.append(rows[rows["episode_id"].astype(str).isin(wanted)])
    rows = pd.concat(frames, ignore_index=True)
    return settled(traces.join_outcomes(scenario, rows, end))


def _spans(hours: list[pd.Timestamp]) -> list[tuple[datetime, datetime]]:
    """Contiguous read windows covering each hour of a last decision, from the hour before it (an
    episode's first decisions may fall there) to its end; overlapping ones merged."""
    spans: list[tuple[datetime, datetime]] = []
    for hour in hours:
        lo, hi = hour.to_pydatetime() - timedelta(hours=1), hour.to_pydatetime() + timedelta(hours=1)
        if spans and lo <= spans[-1][1]:
            spans[-1] = (spans[-1][0], hi)
        else:
            spans.append((lo, hi))
    return spans


__all__ = ["settled_in"]
