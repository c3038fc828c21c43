"""The timeline's report: one PNG a person would rather look at than read (live return, drift
p-values per field, alarms, retrains, promotions and rollbacks against simulated time), the same
facts as JSON, both logged to MLflow, and a plain-text table for the terminal."""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlops.registry import tags as T
from rlops.timeline.events import Event
from rlops.timeline.regret import draw as draw_regret
from rlops.timeline.world import Hour, TimelineConfig

SERIES = ("live_return", "reference_return", "oracle_return", "trained_return", "rules_return", "regret")
"""the hourly figures the timeline's MLflow run logs, one metric each per simulated hour"""


def plot(hours: list[Hour], events: list[Event], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [h.hour + 1 for h in hours]  # each hour is judged at its end
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(12, 9), sharex=True, gridspec_kw={"height_ratios": [2, 2, 1]})
    ret = [h.live_return if h.live_return is not None else math.nan for h in hours]
    se = [h.live_return_se or 0.0 for h in hours]
    ax1.errorbar(x, ret, yerr=[2 * s for s in se], marker="o", ms=3, lw=1.2, label="live mean return (±2 se)")
    ax1.set_ylabel("live return")

    draw_regret(ax1, hours)
    fields = sorted({f for h in hours for f in h.p_values})
    for f in fields:
        p = [max(h.p_values.get(f, math.nan) or 1e-300, 1e-300) for h in hours]
        shifted = any(f in h.drifted for h in hours)
        ax2.plot(
            x,
            p,
            lw=1.6 if shifted else 0.6,
            alpha=1.0 if shifted else 0.35,
            label=f.replace("state.", "") if shifted else None,
        )
    ax2.set_yscale("log")
    ax2.axhline(0.01, color="k", ls=":", lw=0.8)
    ax2.set_ylim(top=2.0)  # p-values live in (0, 1]
    ax2.set_ylabel("drift p-value per field")
    if any(f in h.drifted for h in hours for f in fields):
        ax2.legend(fontsize=7, loc="lower left", ncol=3)
    marks = {
        "alarm": ("v", "tab:red"),
        "retrain": ("s", "tab:orange"),
        "promoted": ("^", "tab:green"),
        "rollback": ("x", "k"),
        "kept": ("o", "tab:gray"),
    }
    rows = {"alarm": 4, "retrain": 3, "promoted": 2, "kept": 1, "rollback": 0}
    for h in hours:
        t = h.hour + 1
        if h.alarm:
            ax3.scatter([t], [rows["alarm"]], marker=marks["alarm"][0], color=marks["alarm"][1])
        for a in h.actions:
            kind = (
                "rollback"
                if a.startswith("rollback")
                else "promoted"
                if a.endswith("promoted")
                else "kept"
                if a.endswith("kept champion")
                else None
            )
            if "retrain" in a:
                ax3.scatter([t], [rows["retrain"]], marker=marks["retrain"][0], color=marks["retrain"][1])
            if kind:
                ax3.scatter([t], [rows[kind]], marker=marks[kind][0], color=marks[kind][1])
    ax3.set_yticks(list(rows.values()), [f"{k}" for k in rows])
    ax3.set_ylim(-0.7, 4.7)
    ax3.set_xlabel("simulated hour")
    for ax in (ax1, ax2, ax3):
        for e in events:
            ax.axvline(e.at_hour, color="tab:purple", ls="--", lw=0.9)
    for e in events:
        ax1.annotate(
            e.label(),
            (e.at_hour, 1.0),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            rotation=90,
            va="top",
            ha="right",
            color="tab:purple",
        )
    ax1.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def table(hours: list[dict[str, Any]] | list[Hour], metrics: dict[str, Any]) -> str:
    rows = [asdict(h) if isinstance(h, Hour) else h for h in hours]
    lines = [f"{'hour':>4} {'return':>7} {'alarm':>5} {'champion':>8}  drifted / actions"]
    for h in rows:
        r = "-" if h["live_return"] is None else f"{h['live_return']:.3f}"
        what = ", ".join(h["drifted"][:4]) + (" | " if h["drifted"] and h["actions"] else "") + "; ".join(h["actions"])
        lines.append(f"{h['hour']:>4} {r:>7} {'yes' if h['alarm'] else '':>5} {str(h['champion']):>8}  {what}")
    lines.append("")
    lines += [f"{k:<24} {v}" for k, v in metrics.items()]
    return "\n".join(lines)


def write_report(
    ctx: Any, cfg: TimelineConfig, events: list[Event], hours: list[Hour], metrics: dict[str, Any], root: Path
) -> dict[str, Any]:
    """Write ``timeline.png`` and ``timeline.json`` under ``root`` and log both to MLflow."""
    png = plot(
        hours,
        events,
        root / "timeline.png",
        f"{cfg.scenario}: {cfg.hours} simulated hours, {cfg.episodes_per_tick} episodes / 15 min",
    )
    doc = {
        "config": asdict(cfg),
        "events": [asdict(e) for e in events],
        "metrics": metrics,
        "hours": [asdict(h) for h in hours],
    }
    path = root / "timeline.json"
    path.write_text(json.dumps(doc, indent=2, default=str))
    with ctx.tracker.start_run(f"timeline-{cfg.hours}h", tags={T.STEP: T.SIMULATE}) as run:
        flat = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        flat["bad_candidate_promoted"] = float(bool(metrics.get("bad_candidate_promoted")))
        run.log_metrics(flat, step=0)
        for h in hours:  # the regret series: per simulated hour
            series = {k: getattr(h, k) for k in SERIES}
            if series["regret"] is not None:
                run.log_metrics({k: float(v) for k, v in series.items() if v is not None}, step=h.hour)
        run.log_artifact(png)
        run.log_artifact(path)
        run_id = run.run_id
    return {"png": str(png), "json": str(path), "run_id": run_id, "hours": doc["hours"]}
