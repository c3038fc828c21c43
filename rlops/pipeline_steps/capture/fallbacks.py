"""Rule-engine fallbacks in a captured interval: a share above ``capture.fallback_alert_share`` is an
incident.

A live agent whose policy client keeps falling back (a state of the wrong shape, a policy that
cannot be loaded, timeouts) still serves — rules — so nothing else would notice. Each capture
therefore counts, over the interval's accepted live rows that a policy client decided (``fallback``
not null), the share answered by the rule engine and the reasons (the code in front of
``fallback_reason``). Above the threshold, and with at least ``capture.fallback_alert_min_decisions``
decisions, the capture result carries an alert; the capture run in MLflow logs the share as a
metric and the alert as a tag, and ``rlops capture`` prints it.

``no_champion`` fallbacks are expected before the first promotion — the rule engine serves until
then — and are not counted towards the alert: those whose decision (``ts``) came before the
registry's first champion (:func:`~rlops.registry.aliases.first_champion_at`) plus
:data:`CHAMPION_PICKUP`, the time a policy client takes to follow an alias move, and all of them
while the registry has no champion at all. So re-capturing an hour that spans the first promotion
counts only the decisions after it. After that a ``no_champion`` fallback is an incident like any
other: the registry has a champion the agent does not see — a client on another tracking server or
model name serves rules for good. (Excusing every ``no_champion`` fallback, as the code says only
that the client saw no champion, would hide exactly that.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import pandas as pd

from rlops.common.policy_ref import policy_model_name
from rlops.registry import tags as T
from rlops.registry.aliases import first_champion_at
from rlops.trace_store.store import read_traces

if TYPE_CHECKING:
    from rlops.common.params_model import CaptureParams
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.registry.run_handle import RunHandle

COLUMNS = ("source", "fallback", "fallback_reason", "ts")
NO_CHAMPION = "no_champion"
UNSPECIFIED = "unspecified"
#: How long after an alias move a policy client may still serve what it had: it polls the registry
#: every 30 s by default, and the SDK's contract is that a move is picked up within a minute.
CHAMPION_PICKUP = timedelta(minutes=1)


@dataclass(frozen=True)
class FallbackSummary:
    """Live decisions of one interval and how many the rule engine answered, by reason code."""

    decisions: int = 0
    fallbacks: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    expected: int = 0
    """Fallbacks not counted towards the alert (``no_champion`` before the first champion)."""

    @property
    def share(self) -> float:
        counted = self.decisions - self.expected
        return (self.fallbacks - self.expected) / counted if counted > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "share": self.share}


def summarize(
    rows: pd.DataFrame, champion_exists: bool = True, champion_since: datetime | None = None
) -> FallbackSummary:
    """The fallback summary of trace rows (live rows whose ``fallback`` is set). ``no_champion``
    fallbacks are expected (not counted towards the alert) all of them without a champion
    (``champion_exists`` false), else those decided before ``champion_since`` + :data:`CHAMPION_PICKUP`
    (None: the first champion's time is not known, and every one counts)."""
    if rows.empty or "fallback" not in rows.columns:
        return FallbackSummary()
    live = rows[rows["source"].astype("string") == "live"] if "source" in rows.columns else rows
    decided = live[live["fallback"].notna()]
    fell = decided[decided["fallback"].astype(bool)]
    reasons = (
        fell["fallback_reason"]
        if "fallback_reason" in fell.columns
        else pd.Series([None] * len(fell), index=fell.index)
    )
    code_of = [UNSPECIFIED if r is None or pd.isna(r) else str(r).split(":", 1)[0].strip() for r in reasons]
    codes = Counter(code_of)
    expected = 0 if champion_exists else codes.get(NO_CHAMPION, 0)
    if champion_exists and champion_since is not None and codes.get(NO_CHAMPION) and "ts" in fell.columns:
        ts = pd.to_datetime(fell["ts"], utc=True, errors="coerce")
        before = (ts < pd.Timestamp(champion_since + CHAMPION_PICKUP)).to_numpy()
        expected = int(sum(1 for code, early in zip(code_of, before, strict=True) if code == NO_CHAMPION and early))
    return FallbackSummary(len(decided), len(fell), dict(sorted(codes.items())), expected)


def alert_text(summary: FallbackSummary, threshold: float, min_decisions: int) -> str | None:
    """The alert for a summary, or None when the share is within the threshold."""
    counted = summary.decisions - summary.expected
    if counted < max(min_decisions, 1) or summary.share <= threshold:
        return None
    reasons = ", ".join(f"{k} {v}" for k, v in sorted(summary.by_reason.items(), key=lambda kv: -kv[1]))
    return (
        f"rule-engine fallback share {summary.share:.1%} of {counted} live decisions is above "
        f"capture.fallback_alert_share={threshold:.1%} (reasons: {reasons}); the agent is serving rules, "
        "not the policy — check fallback_reason on the trace rows"
    )


def interval_rows(ctx: StepServices, partitions: list[str], columns: tuple[str, ...] = COLUMNS) -> pd.DataFrame:
    """The accepted rows this run key wrote (its own files in the partitions it touched), their ``columns``."""
    files: set[str] = set()
    for where in partitions:  # partition folders, or the files themselves
        files.update([where] if where.endswith(".parquet") else ctx.storage.list(where, suffix=".parquet"))
    frames = [
        read_traces(ctx.storage, uri)
        for uri in sorted(files)
        if uri.rsplit("/", 1)[-1].startswith(f"part-{ctx.run_key}-")
    ]
    frames = [f[[c for c in columns if c in f.columns]] for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(columns))


def check_fallbacks(
    services: StepServices, cfg: CaptureParams, partitions: list[str]
) -> tuple[dict[str, Any] | str, list[str]]:
    """``(fallbacks, alerts)`` of the rows a capture wrote to ``partitions``: the fallback summary
    and the alert its share raises (if any) over the ``capture:`` block's thresholds (``cfg``). The
    share is counted on the partitions written, so a dry run, which writes none, cannot compute it:
    its ``fallbacks`` says so instead of reporting no alert."""
    if services.dry_run:
        return (
            "not computed: a dry run writes no partitions, and the fallback share "
            "(and its alert) is counted on the partitions written"
        ), []
    threshold, min_decisions = cfg.fallback_alert_share, cfg.fallback_alert_min_decisions
    rows = interval_rows(services, list(partitions))
    summary = summarize(rows)
    if summary.by_reason.get(NO_CHAMPION):
        name = policy_model_name(services.scenario)
        try:
            champion = services.tracker.get_alias(name, "champion")
            since = first_champion_at(services.tracker, name) if champion is not None else None
        except Exception:  # noqa: BLE001 - without the registry, count them (the safe side)
            champion, since = "unknown", None
        summary = summarize(rows, champion_exists=champion is not None, champion_since=since)
    alert = alert_text(summary, threshold, min_decisions)
    return summary.to_dict(), [alert] if alert else []


def log_fallbacks(run: RunHandle, summary: dict[str, Any] | str | None, alerts: list[str]) -> None:
    """The fallback share as a metric of the capture run, and the alert (if any) as a tag."""
    if not isinstance(summary, dict):
        return
    run.log_metrics(
        {
            "fallback_share": float(summary["share"]),
            "fallback_decisions": float(summary["decisions"]),
            "fallback_rows": float(summary["fallbacks"]),
        },
        step=0,
    )
    alerts = [a for a in alerts if "fallback share" in a]
    if alerts:
        run.set_tags({T.ALERT_FALLBACK: alerts[0][:5000]})
