"""The time layout of the trace store's partitions, as reads see it.

Rows live under ``date=YYYY-MM-DD/hour=HH`` folders (:mod:`rlops.trace_store.store`): a read of a
time window opens only the partitions that overlap it (:func:`partition_overlaps`), then keeps the
rows whose ``ts`` (:func:`parse_ts`, as UTC) falls inside it.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

_PART = re.compile(r"/date=(\d{4}-\d{2}-\d{2})(?:/hour=(\d{1,2}))?/")


def parse_ts(col: pd.Series) -> pd.Series:
    """Trace timestamps (ISO text, datetimes) as UTC."""
    import pandas as pd

    if isinstance(col.dtype, pd.DatetimeTZDtype):
        return col.dt.tz_convert("UTC")
    return pd.to_datetime(col, utc=True, format="ISO8601", errors="coerce")


def partition_overlaps(uri: str, window: tuple[datetime, datetime]) -> bool:
    """Whether the ``date=``/``hour=`` partition of ``uri`` overlaps ``window`` (a file outside
    the date/hour layout always may)."""
    m = _PART.search(uri)
    if not m:
        return True  # not partitioned by time: read it and filter rows by ts
    day = datetime.strptime(m.group(1), "%Y-%m-%d").replace(tzinfo=UTC)
    if m.group(2) is None:
        lo, hi = day, day + timedelta(days=1)
    else:
        lo = day + timedelta(hours=int(m.group(2)))
        hi = lo + timedelta(hours=1)
    return lo < window[1] and hi > window[0]
