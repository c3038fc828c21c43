"""A long drift window fanned out: one Airflow mapped task per slice of hours, reduced afterwards.

A day of a busy pack is millions of rows, and the field tests' pass over them
(:func:`rlops.pipeline_steps.drift.window.scan_frames`) is most of a day's drift check. Its results
add up across rows: per numeric field the target's counts at the baseline's values, per categorical
field the category counts. With ``drift.slice_hours`` the drift monitor DAG therefore

1. plans (:func:`plan_slices`): rolls out or reads back the sandbox baseline once, writes it under
   the run key, and cuts the ``drift.window_hours`` window into slices of that many hours, each
   with its row count and its offset in the window;
2. summarises each slice in its own mapped task (:func:`summarise_slice`), on any Celery worker:
   reads the baseline and only the slice's hour partitions, writes the slice's counts and
   histogram rows under ``drift_slices/<scenario>/<run_key>/`` and hands back their URI;
3. reduces (``slice_counts.merge_slices``, in the drift check): adds the counts up, lets DuckDB
   count the units and episode returns over the whole window as the one-task check does, and tests — the same
   fields, statistics, p-values and verdicts as one task reading the window whole (the tests
   compare the two).
4. once the drift report is written, deletes the run key's slice files
   (``slice_counts.drop_slices``): the report holds what they added up to, and a monitor every
   15 minutes would otherwise leave a folder of them per run.

Without ``drift.slice_hours`` (or with the pandas engine, in a dry run, or with no
``drift.window_hours``) the plan is one empty slice and the drift check reads its window whole.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from rlops.pipeline_steps.drift.check import baseline_uri, drift_columns, long_window, sandbox_baseline, tested_fields
from rlops.pipeline_steps.drift.slice_counts import SLICE_DIR, SliceError, to_npz
from rlops.pipeline_steps.drift.window import BATCH_ROWS, plot_every, scan_frames
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.prefetch import prefetched
from rlops.pipeline_steps.infra.services import StepServices
from rlops.sandbox.profiles import default_profile

if TYPE_CHECKING:
    from rlops.common.params_drift import DriftParams


@dataclass(frozen=True)
class WindowSlice:
    """One mapped task's part of a drift window (XCom carries it as a small dict)."""

    index: int
    """Position in the window, from 0."""
    start: str
    """ISO start of the slice (inclusive, UTC)."""
    end: str
    """ISO end of the slice (exclusive)."""
    offset: int
    """Rows of the window before this slice (the histogram sample continues across slices)."""
    rows: int
    """Rows in the slice."""
    every: int
    """The histograms are drawn from every ``every``-th row of the whole window."""
    baseline_uri: str
    """The sandbox baseline every slice is counted against (written once, by the plan)."""

    @classmethod
    def parse(cls, obj: Any) -> WindowSlice:
        names = set(cls.__dataclass_fields__)
        if not isinstance(obj, dict) or set(obj) != names:
            got = sorted(obj) if isinstance(obj, dict) else type(obj).__name__
            raise SliceError(f"drift slice: expected a mapping with keys {sorted(names)}, got {got}")
        try:
            sl = cls(**obj)
            window = (datetime.fromisoformat(sl.start), datetime.fromisoformat(sl.end))
        except (TypeError, ValueError) as exc:
            raise SliceError(f"drift slice {obj!r}: {exc}") from exc
        if window[0] >= window[1] or min(sl.index, sl.offset, sl.rows) < 0 or sl.every < 1:
            raise SliceError(f"drift slice {obj!r}: expected start < end, counts >= 0 and every >= 1")
        return sl

    @property
    def window(self) -> tuple[datetime, datetime]:
        return datetime.fromisoformat(self.start), datetime.fromisoformat(self.end)


def slice_bounds(window: tuple[datetime, datetime], hours: float) -> list[tuple[datetime, datetime]]:
    """``window`` cut into consecutive slices of ``hours`` (the last one shorter when it must)."""
    start, end = window
    step = timedelta(hours=hours)
    out = []
    while start < end:
        out.append((start, min(start + step, end)))
        start += step
    return out


def fans_out(services: StepServices, cfg: DriftParams) -> bool:
    """Whether this drift check is fanned out (see the module; ``cfg``: the params' ``drift:`` block)."""
    return bool(
        cfg.window_hours and cfg.slice_hours and not services.dry_run and services.traces.reader.engine == "duckdb"
    )


def plan_slices(ctx: StepContext) -> list[dict[str, Any]]:
    """The slices of the run key's window (as :class:`WindowSlice` dicts); one empty slice when the
    check is not fanned out or the window has no rows (its drift check then reads the window)."""
    cfg = ctx.config.drift
    long = long_window(ctx, cfg) if fans_out(ctx, cfg) else None
    if long is None or long[3] == 0:
        return [{}]
    _, uri, window, total = long
    pack = ctx.load_pack()
    profile, reward_fn = default_profile(pack, "sandbox"), ctx.reward_choice(pack=pack).reward_fn
    baseline, _ = sandbox_baseline(ctx, pack, profile, cfg.baseline_episodes, reward_fn, ctx.config.seed)
    frozen = ctx.storage.write_parquet(baseline_uri(ctx), baseline)
    reader, every = ctx.traces.reader, plot_every(total)
    slices, offset = [], 0
    for i, (start, end) in enumerate(slice_bounds(window, float(cfg.slice_hours or 0))):
        rows = reader.count(uri, (start, end))
        sl = WindowSlice(i, start.isoformat(), end.isoformat(), offset, rows, every, frozen)
        slices.append(asdict(sl))
        offset += rows
    return slices


def slice_uri(ctx: StepServices, index: int, suffix: str) -> str:
    return ctx.uri(SLICE_DIR, ctx.scenario, ctx.run_key, f"{index:04d}{suffix}")


def summarise_slice(ctx: StepContext, obj: Any) -> dict[str, Any] | None:
    """A mapped task's work: the field counts of one slice, written under the run key; ``None`` for
    the plan's empty slice."""
    if obj == {}:
        return None
    sl = WindowSlice.parse(obj)
    cfg = ctx.config.drift
    baseline = ctx.storage.read_parquet(sl.baseline_uri)
    reader, uri = ctx.traces.reader, ctx.traces.scenario_uri(ctx.scenario)
    columns = drift_columns(reader.columns(uri), cfg)
    fields = tested_fields(cfg, baseline, columns)
    frames = reader.batches(uri, sl.window, [c for c in columns if c in fields], batch_rows=BATCH_ROWS)
    scan = scan_frames(prefetched(frames), baseline, fields, sl.every, cfg.cluster, False, sl.offset)
    if scan.rows != sl.rows:
        raise SliceError(
            f"drift slice {sl.index} [{sl.start}, {sl.end}): the plan counted {sl.rows} rows, the pass read "
            f"{scan.rows}; rows landed in the window after the plan — run the drift check again"
        )
    counts = to_npz(scan.fields, scan.rows)
    written = ctx.storage.write_bytes(slice_uri(ctx, sl.index, ".npz"), counts)
    plots = pd.concat(scan.plots, ignore_index=True) if scan.plots else pd.DataFrame()
    plots_uri = ctx.storage.write_parquet(slice_uri(ctx, sl.index, ".plots.parquet"), plots)
    return {
        "index": sl.index,
        "uri": written,
        "plots_uri": plots_uri,
        "rows": scan.rows,
        "baseline_uri": sl.baseline_uri,
    }
