"""The counts a drift slice hands on, in one place: written by a mapped ``summarise_slice`` task
(:mod:`rlops.pipeline_steps.drift.fan_out`), read and added up by the drift check.

A slice's file is an ``.npz`` (no pickles): a JSON ``meta`` entry (rows; per field its kind, its
count of values and the dtype of the baseline's cuts) and per field either the numeric counts
(``below_<i>``, ``equal_<i>``: see :class:`rlops.pipeline_steps.drift.window.TargetField`) or the
category counts (``counts_<i>``, the names in ``meta``). The histogram rows go beside it as parquet.
"""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from rlops.common.errors import UserError
from rlops.pipeline_steps.drift.window import (
    TargetField,
    add_categories,
    joins,
    numeric_gaps,
    plot_every,
    start_counts,
    units_in_sql,
    with_units,
)

if TYPE_CHECKING:
    from rlops.pipeline_steps.drift.window import TargetField, WindowSummary
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.storage.backend import Storage

SLICE_DIR = "drift_slices"  # drift_slices/<scenario>/<run_key>/<index>.npz and .plots.parquet


class SliceError(UserError):
    """A slice handed to a mapped task or back to the reduce that cannot be used."""


def drop_slices(ctx: StepServices) -> int:
    """Delete the run key's slice files (once the drift check has merged them and written its
    report); returns how many were removed."""
    return ctx.storage.delete_prefix(ctx.uri(SLICE_DIR, ctx.scenario, ctx.run_key))


def to_npz(acc: dict[str, TargetField], rows: int) -> bytes:
    meta: dict[str, Any] = {"rows": rows, "fields": []}
    arrays: dict[str, np.ndarray] = {}
    for i, (name, a) in enumerate(acc.items()):
        entry: dict[str, Any] = {"name": name, "kind": a.kind, "n": a.n, "dtype": str(getattr(a.cuts, "dtype", ""))}
        if a.kind == "numeric" and a.below is not None and a.equal is not None:
            arrays[f"below_{i}"], arrays[f"equal_{i}"] = a.below, a.equal
        elif a.kind == "categorical" and a.counts is not None:
            entry["categories"] = [str(k) for k in a.counts.index]
            arrays[f"counts_{i}"] = a.counts.to_numpy(dtype=np.int64)
        meta["fields"].append(entry)
    buf = io.BytesIO()
    arrays["meta"] = np.array(json.dumps(meta))
    np.savez(buf, **arrays)  # type: ignore[arg-type]  # numpy's stub types the keywords as allow_pickle
    return buf.getvalue()


def read_npz(data: bytes, where: str) -> tuple[int, list[tuple[str, str, int, str, Any]]]:
    """``(rows, [(field, kind, n, dtype of the cuts, counts)])`` of one slice's file; counts are ``(below, equal)`` or a
    category Series."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            out = []
            for i, f in enumerate(meta["fields"]):
                if f["kind"] == "numeric" and f"below_{i}" in z:
                    counts: Any = (z[f"below_{i}"], z[f"equal_{i}"])
                elif f["kind"] == "categorical" and f"counts_{i}" in z:
                    counts = pd.Series(z[f"counts_{i}"], index=list(f["categories"]), dtype=np.int64)
                else:
                    counts = None
                out.append((str(f["name"]), str(f["kind"]), int(f["n"]), str(f["dtype"]), counts))
            return int(meta["rows"]), out
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SliceError(f"drift slice file {where}: not a slice summary this version wrote ({exc})") from exc


def merge_slices(
    storage: Storage,
    reader: Any,
    results: list[dict[str, Any]],
    baseline: pd.DataFrame,
    target: tuple[str, tuple[Any, Any], int],
    cluster: str | None,
    columns: list[str],
) -> WindowSummary:
    """The window's :class:`WindowSummary` from its slices' files (in window order; ``target``: the
    window's ``(uri, (start, end), rows)``), its units and episode returns counted by DuckDB over
    the whole window (``columns`` of it), as the one-task check counts them."""
    uri, window, total = target
    ordered = sorted(results, key=lambda r: int(r["index"]))
    if [int(r["index"]) for r in ordered] != list(range(len(ordered))):
        raise SliceError(f"drift slices: expected indexes 0..{len(ordered) - 1}, got {[r['index'] for r in ordered]}")
    acc: dict[str, TargetField] = {}
    rows, plots = 0, []
    for r in ordered:
        n, fields = read_npz(storage.read_bytes(r["uri"]), r["uri"])
        rows += n
        for name, kind, count, dtype, counts in fields:
            a = acc.setdefault(name, TargetField())
            _merge(a, name, kind, count, dtype, counts, baseline)
        plots.append(storage.read_parquet(r["plots_uri"]))
    if rows != total:
        raise SliceError(
            f"drift slices: the slices counted {rows} rows, the window {uri} now holds {total}; rows landed in "
            "the window after the plan — run the drift check again"
        )
    counted = units_in_sql(reader, uri, window, cluster, numeric_gaps(acc, rows), columns)
    return with_units(acc, rows, counted, plots, plot_every(rows))


def _merge(a: TargetField, name: str, kind: str, n: int, dtype: str, counts: Any, baseline: pd.DataFrame) -> None:
    """Add one slice's counts of a field to the window's, as one pass adds a frame's."""
    if not kind or not joins(a, kind):
        return
    if kind == "numeric":
        if a.cuts is None:  # the baseline's cuts, as the one pass takes them from its first frame
            start_counts(a, name, baseline, np.dtype(dtype))
        assert a.below is not None and a.equal is not None
        below, equal = counts
        if below.shape != a.below.shape or equal.shape != a.equal.shape:
            raise SliceError(f"drift slices: field {name!r} was counted against another baseline")
        a.below += below
        a.equal += equal
        a.n += n
    elif kind == "categorical":
        add_categories(a, counts)
