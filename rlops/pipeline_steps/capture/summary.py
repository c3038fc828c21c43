"""What a capture hands back (:class:`CaptureSummary`): the interval, the source, the balanced row
counts (in = accepted + quarantined), where the rows went, why rows were quarantined, and the live
fallback share with its alert. :meth:`CaptureSummary.as_dict` is the JSON ``rlops capture --json``
prints and the capture DAG's task pushes to XCom."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlops.common.step_result import StepResult


@dataclass(frozen=True)
class CaptureSummary(StepResult):
    """One interval captured into the trace store."""

    scenario: str
    run_key: str
    interval: list[str]
    """The run key's ``[start, end)`` (ISO 8601)."""
    dry_run: bool
    source: str
    """``landing_zone``, ``simulation:<profile>``, ``mlflow:<experiment>`` or ``otlp:<file>``."""
    rows_in: int
    rows_accepted: int
    rows_quarantined: int
    partitions: list[str]
    """The trace-store partitions written (a dry run: that would be written)."""
    quarantine_partitions: list[str] = field(default_factory=list)
    """Where the quarantined rows went (a dry run: would go)."""
    quarantine_uri: str | None = None
    quarantine_reasons: list[dict[str, Any]] = field(default_factory=list)
    """The quarantined rows by kind of reason, most first: ``{reason, rows, example}``
    (:mod:`rlops.pipeline_steps.capture.input_checks`)."""
    warnings: list[str] = field(default_factory=list)
    """What the capture wants read, e.g. why an interval had no rows (exit 0)."""
    fallbacks: dict[str, Any] | str | None = None
    """The live fallback share of the rows written (a dry run says why it is not computed)."""
    alerts: list[str] = field(default_factory=list)
    """Incidents to act on: a fallback share over ``capture.fallback_alert_share``."""
    exploration: dict[str, Any] | str | None = None
    """The live cost of exploration in the rows written (:mod:`rlops.pipeline_steps.capture.exploration`),
    or why it was not measured."""
    files_skipped: list[str] | None = None
    """Landing zone: files not read (not ``.jsonl`` or ``.jsonl.gz``)."""
    spans_skipped: int | None = None
    """MLflow or OTLP traces: spans that are not agent decisions."""
    manifest_uri: str | None = None
    """MLflow or OTLP traces: the landing-zone manifest of the files written."""
    policy_version: str | None = None
    """Simulation: the policy that decided (``rules`` while there is no champion)."""
    episodes: int | None = None
    """Simulation: episodes rolled."""
    sample_rate: float | None = None
    """Simulation: the share of episodes recorded."""

    def __post_init__(self) -> None:
        if self.rows_in != self.rows_accepted + self.rows_quarantined:  # the invariant every capture keeps
            raise RuntimeError(
                f"capture lost rows: {self.rows_in} in, {self.rows_accepted} accepted, "
                f"{self.rows_quarantined} quarantined"
            )

    def as_dict(self) -> dict[str, Any]:
        """The fields, without those of the other sources (None)."""
        source_only = ("files_skipped", "spans_skipped", "manifest_uri", "policy_version", "episodes", "sample_rate")
        return {k: v for k, v in super().as_dict().items() if not (k in source_only and v is None)}


__all__ = ["CaptureSummary"]
