"""Drift step I/O: the HTML report and the storage/MLflow wrapper.

:func:`render_html` turns a :class:`~rlops.pipeline_steps.drift.stats.DriftReport` into one self-contained
HTML page (a summary sentence, a table, and per field an overlaid histogram as an embedded PNG)
that a business reader can open from MLflow or a browser. :func:`run_drift` reads the two
parquet windows through :class:`~rlops.storage.backend.Storage`, runs
:func:`~rlops.pipeline_steps.drift.stats.detect_drift`, writes ``report.json`` and ``report.html`` under
``out_uri`` (overwriting: a re-run of the same windows replaces its report) and logs both, with
one metric per field, to an MLflow run of the scenario's experiment.

Command line: ``rlops drift detect --baseline URI --target URI [--fail-on-drift] …``.
"""

from __future__ import annotations

import base64
import hashlib
import html
import io
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from rlops.common.params_sources import as_params
from rlops.pipeline_steps.drift.stats import MISSING, DriftReport, FieldDrift, detect_drift
from rlops.pipeline_steps.drift.window_detect import detect_drift_window
from rlops.pipeline_steps.infra.datasets import DRIFT, parquet_dataset
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.registry import tags as T
from rlops.registry.client import Tracker
from rlops.registry.datasets import log_dataset_inputs
from rlops.storage.backend import Storage, StorageNotFoundError
from rlops.trace_store.engine import QueryEngineConfig
from rlops.trace_store.query import TraceReader

_TOP_CATEGORIES = 12
_BINS = 40
_COLORS = ("#4C72B0", "#DD8452")  # baseline, target
_METRIC_UNSAFE = re.compile(r"[^A-Za-z0-9_\-. :/]")


@dataclass(frozen=True)
class DriftResult:
    """What :func:`run_drift` did (or, with ``dry_run``, would do); ``to_dict`` is the small
    summary a DAG task returns, ``report`` the full :class:`DriftReport`."""

    drifted_fields: list[str]
    n_fields: int
    summary: str
    report_uri: str
    html_uri: str
    run_id: str | None = None
    dry_run: bool = False
    report: DriftReport | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "report"}


# --------------------------------------------------------------------------- plots
def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80)  # margins set by the plot: no second layout pass
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _numeric_plot(ax: Any, b: np.ndarray, t: np.ndarray) -> None:
    both = np.concatenate([b, t])
    lo, hi = np.percentile(both, [0.5, 99.5]) if both.size else (0.0, 1.0)
    if not hi > lo:  # a constant field: widen so the single bar is visible
        lo, hi = lo - 0.5, hi + 0.5
    bins = np.linspace(lo, hi, _BINS + 1)
    for values, label, color in ((b, "baseline", _COLORS[0]), (t, "target", _COLORS[1])):
        counts, _ = np.histogram(values, bins=bins)  # the outer 0.5% tails are left out
        share = counts / max(values.size, 1)
        ax.stairs(
            share,
            bins,
            label=f"{label} (n={values.size:,})",
            color=color,
            fill=label == "baseline",
            alpha=0.35 if label == "baseline" else 1.0,
            linewidth=1.8,
        )
    ax.set_ylabel("share of rows")


def _category_plot(ax: Any, b: pd.Series, t: pd.Series) -> None:
    def shares(col: pd.Series) -> pd.Series:
        s = col.astype(object).where(col.notna(), MISSING).astype(str).value_counts()
        return s / max(int(s.sum()), 1)

    sb, st = shares(b), shares(t)
    cats = sb.add(st, fill_value=0).sort_values(ascending=False).index[:_TOP_CATEGORIES]
    x = np.arange(len(cats))
    ax.bar(x - 0.2, sb.reindex(cats, fill_value=0).to_numpy(), 0.4, label="baseline", color=_COLORS[0])
    ax.bar(x + 0.2, st.reindex(cats, fill_value=0).to_numpy(), 0.4, label="target", color=_COLORS[1])
    ax.set_xticks(x, [c if len(c) <= 18 else c[:17] + "…" for c in cats], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("share of rows")


def field_plot(f: FieldDrift, baseline: pd.DataFrame, target: pd.DataFrame) -> str:
    """Base64 PNG of one field's baseline vs target distribution."""
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in workers

    fig = Figure(figsize=(6.4, 2.6))
    ax = fig.add_subplot()
    # fixed margins (room for the y label, the title and the slanted category names): the cost of
    # a page is its plots, and "tight" bounding boxes draw each one twice
    fig.subplots_adjust(left=0.1, right=0.98, top=0.88, bottom=0.17 if f.test == "ks" else 0.33)
    if f.test == "ks":
        b = baseline[f.field].to_numpy(dtype=np.float64, na_value=np.nan)
        t = target[f.field].to_numpy(dtype=np.float64, na_value=np.nan)
        _numeric_plot(ax, b[np.isfinite(b)], t[np.isfinite(t)])
    else:
        _category_plot(ax, baseline[f.field], target[f.field])
    verdict = "DRIFTED" if f.drifted else "stable"
    measure = "KS distance" if f.test == "ks" else "share moved"
    ax.set_title(
        f"{f.field} — {verdict} ({measure} {f.effect:.3f}, p = {_fmt_p(f.p_value)})",
        fontsize=10,
        color="#B00020" if f.drifted else "#222222",
    )
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    return _png(fig)


# --------------------------------------------------------------------------- HTML
_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;
color:#222;max-width:1100px}h1{margin-bottom:.2rem}.sub{color:#555;margin-top:0}
.summary{font-size:1.25rem;padding:.8rem 1rem;border-radius:6px;background:#f3f6fb}
.summary.alert{background:#fdecee}table{border-collapse:collapse;margin:1rem 0;width:100%}
th,td{padding:.35rem .6rem;border-bottom:1px solid #e3e3e3;text-align:right}
th:first-child,td:first-child{text-align:left}tr.drifted td{background:#fdecee}
.field{margin:1.4rem 0}.note{color:#555;font-size:.92rem}img{max-width:100%}"""


def _fmt_p(p: float) -> str:
    return "—" if not np.isfinite(p) else ("< 1e-300" if p < 1e-300 else f"{p:.3g}")


def render_html(
    report: DriftReport,
    baseline: pd.DataFrame,
    target: pd.DataFrame,
    title: str = "Drift report",
    plots_for: str = "all",
    plot_note: str = "",
) -> str:
    """The report as one self-contained HTML page (plots embedded as base64 PNG; ``plots_for``
    ``drifted``: histograms of the flagged fields only, for reports written every hour)."""
    esc = html.escape
    meta = report.meta or {}
    sub = " · ".join(
        f"{esc(str(k))}: {esc(str(v))}" for k, v in meta.items() if k in ("scenario", "baseline", "target", "created")
    )
    rows, plots = [], []
    for f in report.tested:
        effect_label = "KS distance" if f.test == "ks" else "share moved (TV)"
        rows.append(
            f"<tr class='{'drifted' if f.drifted else ''}'><td>{esc(f.field)}</td>"
            f"<td>{'yes' if f.drifted else 'no'}</td><td>{f.effect:.4f}</td>"
            f"<td>{esc(effect_label)}</td><td>{_fmt_p(f.p_value)}</td>"
            + (f"<td>{_fmt_p(f.p_adjusted)}</td>" if report.bh else "")
            + f"<td>{f.n_baseline:,} / {f.n_target:,}</td></tr>"
        )
        if plots_for == "all" or f.drifted:
            plots.append(
                f"<div class='field'><img alt='{esc(f.field)}' src='data:image/png;base64,"
                f"{field_plot(f, baseline, target)}'></div>"
            )
    errors = "".join(
        f"<tr><td>{esc(f.field)}</td><td style='text-align:left'>{esc(f.error or '')}</td></tr>" for f in report.errors
    )
    alert = " alert" if report.drifted_fields else ""
    bh_head = "<th>p-value after BH</th>" if report.bh else ""
    return f"""<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">
<title>{esc(title)}</title><style>{_CSS}</style></head><body>
<h1>{esc(title)}</h1><p class="sub">{sub}</p>
<p class="summary{alert}">{esc(report.summary)}</p>
<p class="note">Each field of the recent traffic (<b>target</b>) is compared with the reference
window (<b>baseline</b>). A field is flagged only when the difference is both statistically
clear (p-value below {report.threshold:g}) and large enough to matter (effect at least
{report.min_effect:g}). The effect is the largest gap between the two cumulative distributions
for numbers, and the share of rows that would have to change category for categories.</p>
<table><thead><tr><th>Field</th><th>Drifted</th><th>Effect</th><th>Effect measure</th>
<th>p-value</th>{bh_head}<th>Rows (baseline / target)</th></tr></thead>
<tbody>{"".join(rows)}</tbody></table>
{f"<h2>Fields that could not be compared</h2><table>{errors}</table>" if errors else ""}
<h2>Distributions</h2>{f'<p class="note">{esc(plot_note)}</p>' if plot_note else ""}{"".join(plots)}
</body></html>"""


# --------------------------------------------------------------------------- wrapper
def _default_out(storage: Any, report_dir: str, baseline_uri: str, target_uri: str) -> str:
    key = hashlib.sha1(f"{baseline_uri}|{target_uri}".encode()).hexdigest()[:12]
    out: str = storage.join(report_dir, key)
    return out


def run_drift(
    params: Mapping[str, Any],
    baseline_uri: str,
    target_uri: str,
    out_uri: str | None = None,
    *,
    fields: Sequence[str] | None = None,
    threshold: float | None = None,
    min_effect: float | None = None,
    bh: bool | None = None,
    dry_run: bool = False,
    track: bool = True,
    scenario: str | None = None,
    ctx: Any = None,
    baseline_fit_n: float | None = None,
    target_rows: pd.DataFrame | None = None,
    target_summary: Any = None,
    baseline_rows: pd.DataFrame | None = None,
    decisions: bool = False,
) -> DriftResult:
    """Read both windows, test them, write ``report.json``/``report.html`` under ``out_uri``
    (default ``<storage.root>/<drift.report_dir>/<hash of the two URIs>``) and log them to
    MLflow. Arguments left ``None`` come from the typed ``drift`` block of ``params`` (the params
    document, typed or raw; with ``ctx``, the context's resolved params). ``dry_run``
    tests and reports what it would write, but writes and logs nothing. With ``ctx`` (a
    :class:`~rlops.pipeline_steps.infra.context.StepContext`) the MLflow run nests under its pass.
    ``drift.cluster`` names the column whose rows are one unit (the episode), ``baseline_fit_n``
    how many episodes a fitted baseline was estimated from (see :mod:`rlops.pipeline_steps.drift.stats`).
    ``target_rows``: the target already read (a trace-store window read by DuckDB); ``target_uri``
    then only names it in the report. ``target_summary``: a long window summarised instead
    (:class:`~rlops.pipeline_steps.drift.window.WindowSummary`; the histograms drawn from its sample).
    ``baseline_rows``: the baseline already in hand (a dry run's, which is never written to
    ``baseline_uri``); ``baseline_uri`` then only names it in the report."""
    config = ctx.config if ctx is not None else as_params(params)
    cfg = config.drift
    storage = ctx.storage if ctx is not None else Storage.from_params(config)
    window_read = target_rows is not None or target_summary is not None  # its URI names more than was read
    fields = fields if fields is not None else cfg.fields
    baseline = baseline_rows if baseline_rows is not None else storage.read_parquet(baseline_uri)
    unit = cfg.cluster
    threshold = float(threshold if threshold is not None else cfg.threshold)
    min_effect = float(min_effect if min_effect is not None else cfg.min_effect)
    bh = bool(bh if bh is not None else cfg.bh)
    if target_summary is not None:
        report = detect_drift_window(
            baseline, target_summary, threshold, min_effect, bh, fields, unit, baseline_fit_n=baseline_fit_n
        )
        target = target_summary.plot_rows
    elif target_rows is None:  # live traces: read as every trace-store read is (DuckDB unless trace_store.engine)
        reader = TraceReader(storage, QueryEngineConfig.from_params(params))
        if not reader.files(target_uri):
            raise StorageNotFoundError(
                f"read_parquet: no parquet file at or under {target_uri} (quarantine partitions are not read)",
                op="read_parquet",
                uri=target_uri,
            )
        target_rows = reader.read(target_uri)
    if target_summary is None:
        assert target_rows is not None
        target = target_rows
        clusters = (baseline[unit], target[unit]) if unit and unit in baseline and unit in target else None
        report = detect_drift(
            baseline,
            target,
            threshold=threshold,
            min_effect=min_effect,
            bh=bh,
            fields=fields,
            workers=cfg.workers,
            clusters=clusters,
            baseline_fit_n=baseline_fit_n,
            decisions=decisions,
        )
    scenario = scenario or (ctx.scenario if ctx is not None else config.scenario)
    report.meta.update(
        scenario=scenario,
        baseline=baseline_uri,
        target=target_uri,
        created=pd.Timestamp.now(tz="UTC").isoformat(timespec="seconds"),
    )
    out = (out_uri or _default_out(storage, cfg.report_dir, baseline_uri, target_uri)).rstrip("/")
    json_uri, html_uri = f"{out}/report.json", f"{out}/report.html"
    result = DriftResult(
        report.drifted_fields, len(report.tested), report.summary, json_uri, html_uri, dry_run=dry_run, report=report
    )
    if dry_run:
        return result
    note = (
        f"The target's histograms are drawn from one row in every {target_summary.plot_every:,} of its "
        f"{target_summary.rows:,} rows ({len(target):,} rows); the tests above count every row."
        if target_summary is not None and target_summary.plot_every > 1
        else ""
    )
    page = render_html(
        report, baseline, target, title=f"Drift report — {scenario}", plots_for=cfg.plots, plot_note=note
    )
    report_json = report.to_json()
    storage.write_text(json_uri, report_json)
    storage.write_text(html_uri, page)
    if not track:
        return result

    with _drift_run(params, scenario, ctx) as run:
        log_dataset_inputs(
            run,
            [
                parquet_dataset(storage, baseline_uri, "drift-baseline"),
                parquet_dataset(storage, target_uri, "drift-target") if not window_read else None,
            ],
            DRIFT,
        )
        run.log_params(
            {
                "baseline": baseline_uri,
                "target": target_uri,
                "threshold": report.threshold,
                "min_effect": report.min_effect,
                "bh": report.bh,
                "report_uri": json_uri,
            }
        )
        metrics = {"drift.n_fields": float(len(report.tested)), "drift.n_drifted": float(len(report.drifted_fields))}
        for f in report.tested:
            name = _METRIC_UNSAFE.sub("_", f.field)  # MLflow's allowed metric-name characters
            metrics[f"drift_effect/{name}"] = f.effect
            metrics[f"drift_p/{name}"] = f.p_adjusted
        run.log_metrics(metrics, step=0)
        run.log_text(report_json, "drift/report.json")
        run.log_text(page, "drift/report.html")
        run_id = run.run_id
    return replace(result, run_id=run_id)


def _drift_run(params: Mapping[str, Any], scenario: str | None, ctx: Any) -> Any:
    """The MLflow run of a drift report: a step of the pass with a context, else a run of its own."""
    if ctx is not None:
        return step_run(ctx, T.DRIFT)

    tracker = Tracker.from_params(params, scenario=scenario)
    return tracker.start_run(
        f"{T.DRIFT} · {tracker.scenario} · ad hoc", tags={T.STEP: T.DRIFT, T.SCENARIO: tracker.scenario}
    )
