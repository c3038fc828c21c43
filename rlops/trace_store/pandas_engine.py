"""The pandas engine of the trace store: the reference every DuckDB read is compared with.

Each matching file is read whole with pyarrow and filtered in memory (``trace_store.engine:
pandas``): simple enough to trust, and what the tests and the benchmark set beside DuckDB.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rlops.trace_store.time_partitions import parse_ts

if TYPE_CHECKING:
    import pandas as pd

    from rlops.storage.backend import Storage


def pandas_frame(
    storage: Storage,
    files: list[str],
    window: tuple[datetime, datetime] | None,
    columns: Sequence[str] | None,
    where: Mapping[str, Any] | None,
    categorical: bool = False,
) -> pd.DataFrame:
    """The reference path: each file read whole (the asked columns plus those filtered on) with
    pyarrow into pandas and filtered there, the kept rows concatenated (as :func:`pyarrow.concat_tables`
    with schema promotion, then one conversion, so dtypes match a single read of the files)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = []
    for f in files:
        with storage.local_path(f) as path:
            have = pq.read_schema(path).names
            need = (
                None
                if not columns
                else [c for c in have if c in {*columns, *(where or {}), *(["ts"] if window else [])}]
            )
            table = pq.read_table(path, columns=need)
        df = table.to_pandas()
        keep = np.ones(len(df), dtype=bool)
        if window is not None and "ts" in df.columns:
            ts = parse_ts(df["ts"])
            keep &= ((ts >= window[0]) & (ts < window[1])).to_numpy(dtype=bool)
        for col, value in (where or {}).items():
            if col not in df.columns:
                keep[:] = False
            elif isinstance(value, (list, tuple, set, frozenset)):
                keep &= df[col].isin(list(value)).to_numpy(dtype=bool)
            else:
                keep &= (df[col] == value).fillna(False).to_numpy(dtype=bool)
        tables.append(table if keep.all() else table.filter(pa.array(keep)))
    out = pa.concat_tables(tables, promote_options="default").to_pandas(strings_to_categorical=categorical)
    return out[[c for c in columns if c in out.columns]] if columns else out
