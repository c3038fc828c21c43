"""Reading the traces a pack is inferred from: a parquet file or folder of the trace store, or a
JSON-lines file of the landing zone, by path or storage URI (``file://``, ``s3://``).

Anything that is not a usable trace table is a :class:`~rlops.common.errors.UserError` naming the
input and what was expected, before anything is inferred or written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlops.common.config import load_params
from rlops.common.errors import UserError
from rlops.data_contracts.records import parse_json_lines
from rlops.data_contracts.schema import STATE_PREFIX
from rlops.storage.backend import Storage, StorageError
from rlops.trace_store.store import read_traces

if TYPE_CHECKING:
    import pandas as pd

JSON_SUFFIXES = (".jsonl", ".json", ".ndjson", ".jsonl.gz", ".ndjson.gz")
MIN_EPISODES = 20
"""Fewer episodes than this leave ranges, distributions and trees to chance."""


@dataclass(frozen=True)
class TraceTable:
    """Trace rows in episode order with the columns inference reads."""

    rows: pd.DataFrame
    """One row per agent step, sorted by ``episode_id`` then ``step``."""
    source: str
    """The file or URI they were read from."""
    fields: tuple[str, ...]
    """State field paths (the ``state.`` columns without the prefix), in column order."""


def read_trace_table(uri: str) -> TraceTable:
    """The trace rows at ``uri``, checked to be traces: ``episode_id``, ``step``, ``action`` and at
    least one ``state.<field>`` column, and at least :data:`MIN_EPISODES` episodes."""
    import pandas as pd

    storage = Storage.from_params(load_params())
    try:
        target = uri if "://" in uri else "file://" + str(Path(uri).resolve())
        if not storage.exists(target) and not storage.list(target, suffix=".parquet"):
            raise UserError(
                f"--from-traces {uri}: no such file or folder; expected a trace parquet file or folder, "
                "or a JSON-lines file"
            )
        if uri.lower().endswith(JSON_SUFFIXES):
            with storage.open_stream(target, gzip=uri.lower().endswith(".gz")) as fh:
                lines = [ln for ln in fh.read().splitlines() if ln.strip()]
            df, bad = parse_json_lines(lines, uri)
            if len(bad):
                row = bad.iloc[0]
                raise UserError(
                    f"--from-traces {uri}: line {int(row['_line_no'])} is not a JSON object "
                    f"({row['quarantine_reason']}); expected one trace row per line"
                )
            df = df.drop(columns=[c for c in df.columns if c.startswith("_")])
        else:
            df = read_traces(storage, target)
    except (StorageError, ValueError, OSError) as exc:
        if isinstance(exc, UserError):
            raise
        raise UserError(
            f"--from-traces {uri}: cannot be read as traces ({exc}); expected a trace parquet file or "
            "folder, or a JSON-lines file"
        ) from None
    missing = [c for c in ("episode_id", "step", "action") if c not in df.columns]
    fields = tuple(c[len(STATE_PREFIX) :] for c in df.columns if c.startswith(STATE_PREFIX))
    if missing or not fields:
        what = f"no {', '.join(missing)} column" if missing else "no state.<field> column"
        raise UserError(
            f"--from-traces {uri}: {len(df)} rows but {what}; expected trace rows (episode_id, step, "
            "action, state.<field>…) as the trace store or the landing zone hold them"
        )
    df = df[df["action"].notna() & df["episode_id"].notna()].copy()
    df["step"] = pd.to_numeric(df["step"], errors="coerce")
    df = df.dropna(subset=["step"]).sort_values(["episode_id", "step"], kind="stable").reset_index(drop=True)
    episodes = df["episode_id"].nunique()
    if episodes < MIN_EPISODES:
        raise UserError(
            f"--from-traces {uri}: {episodes} episode(s) with an action; expected at least {MIN_EPISODES} "
            "to infer ranges, distributions and the logged behaviour"
        )
    return TraceTable(df, uri, fields)


__all__ = ["MIN_EPISODES", "TraceTable", "read_trace_table"]
