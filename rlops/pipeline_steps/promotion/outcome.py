"""What a promotion or a rollback hands back (:class:`PromotionOutcome`): what happened
(:class:`PromotionStatus`), why, and the fields that apply to it — the evaluation's verdict once the
candidate was judged, the share it serves once staged, the aliases once they moved. Fields that do
not apply to what happened are None.

:meth:`PromotionOutcome.as_dict` is what leaves the process: the JSON of ``rlops model promote |
rollback --json``, the XCom of the promotion tasks, the webhook receiver's answer. A promotion's
JSON always has ``scenario``, ``candidate``, ``staged``, ``promoted``, ``action``, ``dry_run`` and
``reason``; any other key appears only where it applies (``passed`` and the gate verdict once the
candidate was evaluated, ``champion`` and ``previous`` once an alias moved — with a None value
where there is no such version). ``promoted`` / ``action`` and, for a promotion requested through
an alias, ``outcome`` / ``version`` / ``requested_by`` are derived from the status and the
requester rather than stored twice. A rollback's JSON has the keys of a rollback only."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from rlops.common.step_result import StepResult

if TYPE_CHECKING:
    from rlops.pipeline_steps.promotion.evaluate_report import EvaluationReport
    from rlops.pipeline_steps.promotion.guard import ChampionCheck
    from rlops.pipeline_steps.stress.version import VersionStress


class PromotionStatus(StrEnum):
    """What a promotion or a rollback did."""

    CHAMPION = "champion"
    """Every gate passed and the candidate is the champion (the old one is ``previous``)."""
    STAGED = "staged"
    """Every gate passed and the candidate serves a stage of the roll-out as ``challenger``."""
    WOULD_PROMOTE = "would_promote"
    """A dry run: every gate passed and the candidate would become champion."""
    WOULD_STAGE = "would_stage"
    """A dry run: every gate passed and the candidate would be staged as challenger."""
    REFUSED = "refused"
    """A gate failed: the champion stays."""
    CHAMPION_MOVED = "champion_moved"
    """The gates passed, but the champion changed during the evaluation: the move was refused."""
    BUSY = "busy"
    """Another promotion of the model held the lock for longer than the wait allowed."""
    FAILED = "failed"
    """MLflow or storage failed (checking the champion, the evaluation, the stress test, the move):
    the aliases are as they were."""
    NOT_PROMOTABLE = "not_promotable"
    """The version cannot be a candidate (e.g. it is the champion already, or no such version)."""
    ROLLED_BACK = "rolled_back"
    """``champion`` moved back to the most recent earlier champion."""
    WOULD_ROLL_BACK = "would_roll_back"
    """A dry run of a rollback: ``would_restore`` names the version it would restore."""


#: The statuses of a rollback; every other status is a promotion's.
ROLLBACKS = frozenset({PromotionStatus.ROLLED_BACK, PromotionStatus.WOULD_ROLL_BACK})
#: The ``action`` key of a promotion by status (every other status: ``none``).
ACTIONS = {
    PromotionStatus.CHAMPION: "champion",
    PromotionStatus.STAGED: "challenger",
    PromotionStatus.WOULD_PROMOTE: "would_promote",
    PromotionStatus.WOULD_STAGE: "would_stage",
}


@dataclass(frozen=True)
class PromotionOutcome(StepResult):
    """One promotion of a candidate (``rlops model promote``, a retrain, a request through an alias)
    or one rollback of the champion (``rlops model rollback``)."""

    status: PromotionStatus
    """What happened."""
    scenario: str
    reason: str
    """Why, in words (a promotion: the gates' verdict and what moved; a failure: the error)."""
    dry_run: bool
    """Nothing was written: the status says what would have happened."""
    candidate: str | None = None
    """The version judged (None: a rollback)."""
    staged: bool = False
    """Whether the promotion was asked to stage the candidate as challenger first (a staged first
    champion is still made champion at once; False for a rollback)."""
    passed: bool | None = None
    """Whether every gate passed (None: the candidate was not evaluated). False also when the gates
    passed but the champion moved during the evaluation (``champion_moved``)."""
    failed_gates: list[str] | None = None
    """The gates that failed (None: not evaluated)."""
    baseline: str | None = None
    """What the candidate was compared with: ``champion v<N>`` or ``rules`` (None: not evaluated)."""
    report_uri: str | None = None
    """Where the gate table was written (None: not evaluated, or a dry run, which writes none)."""
    eval_run_id: str | None = None
    """The MLflow run of the evaluation (None: not evaluated, or a dry run)."""
    gates: list[dict[str, Any]] | None = None
    """The gate table, one row per gate (None: not evaluated, or a promotion requested through an
    alias, whose gate table is in the version's description and at ``report_uri``)."""
    traffic_fraction: float | None = None
    """The share of traffic the candidate serves — would serve, on a dry run — (1.0: champion; None:
    it serves no new share)."""
    traffic_segment: str | None = None
    """The segment ``traffic_fraction`` applies to (a segment stage; None: all traffic)."""
    champion: str | None = None
    """Staged: the champion the challenger serves beside (None: none yet, the rule engine). Champion:
    the candidate. A rollback: the champion after it (a dry run: the champion now)."""
    champion_in_min: float | None = None
    """Staged: the least minutes before the challenger can become champion."""
    previous: str | None = None
    """Champion, rolled back: the ``previous`` alias after the move (None: no earlier champion left)."""
    rolled_back_from: str | None = None
    """Rolled back: the champion the rollback demoted."""
    would_restore: str | None = None
    """A dry-run rollback: the version it would make champion again."""
    lock_wait_s: float | None = None
    """Seconds spent waiting for the promotion lock (None: the lock was not taken)."""
    champion_check: ChampionCheck | None = None
    """A champion set by hand outside rlops, found and handled first (None: none was)."""
    warning: str | None = None
    """Bookkeeping that failed after the outcome stood (a tag, the MLflow record of the promotion)."""
    stress: VersionStress | None = None
    """A request through an alias: the stress verdict of the version it was gated on (None: the
    gates ask for none, or the stress test did not complete)."""
    requested_by: str | None = None
    """A request through an alias: who asked (``mlflow-ui-alias``, ``manual-champion``, ``airflow``
    …; None: not a request)."""

    @classmethod
    def refused(cls, report: EvaluationReport, candidate: str, staged: bool) -> PromotionOutcome:
        """``candidate`` refused by the gates of ``report``, with the verdict every outcome of an
        evaluated candidate carries (one that passes takes its status and reason from what moved)."""
        return cls(
            PromotionStatus.REFUSED,
            report.scenario,
            f"gate(s) failed: {', '.join(report.failed_gates)}; champion unchanged",
            report.dry_run,
            candidate,
            staged,
            passed=report.passed,
            failed_gates=report.failed_gates,
            baseline=report.baseline,
            report_uri=report.report_uri,
            eval_run_id=report.eval_run_id,
            gates=report.gates,
        )

    @property
    def promoted(self) -> bool:
        """The candidate is the champion now."""
        return self.status is PromotionStatus.CHAMPION

    @property
    def action(self) -> str:
        """What the promotion did to the aliases: ``champion``, ``challenger``, ``would_promote``,
        ``would_stage`` or ``none``."""
        return ACTIONS.get(self.status, "none")

    @property
    def outcome(self) -> str:
        """The outcome of a request through an alias, as tagged on the version: ``champion``,
        ``challenger`` or ``rejected``."""
        return self.action if self.action in ("champion", "challenger") else "rejected"

    def as_dict(self) -> dict[str, Any]:
        """The JSON of this outcome, with the keys it has always had (see the module docstring)."""
        if self.status in ROLLBACKS:
            return self._rollback_dict()
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "candidate": self.candidate,
            "staged": self.staged,
            "promoted": self.promoted,
            "action": self.action,
            "dry_run": self.dry_run,
        }
        if self.passed is not None:
            out.update(
                passed=self.passed,
                failed_gates=list(self.failed_gates or []),
                baseline=self.baseline,
                report_uri=self.report_uri,
                eval_run_id=self.eval_run_id,
            )
        if self.gates is not None:
            out["gates"] = [dict(g) for g in self.gates]
        if self.traffic_fraction is not None:
            out["traffic_fraction"] = self.traffic_fraction
        if self.traffic_segment:
            out["traffic_segment"] = self.traffic_segment
        if self.status in (PromotionStatus.STAGED, PromotionStatus.CHAMPION):
            out["champion"] = self.champion
        if self.status is PromotionStatus.STAGED:
            out["champion_in_min"] = self.champion_in_min
        if self.status is PromotionStatus.CHAMPION:
            out["previous"] = self.previous
        out["reason"] = self.reason
        if self.lock_wait_s is not None:
            out["lock_wait_s"] = self.lock_wait_s
        if self.champion_check is not None:
            out["champion_check"] = self.champion_check.to_dict()
        if self.warning is not None:
            out["warning"] = self.warning
        if self.stress is not None:
            out["stress"] = self.stress.to_dict()
        if self.requested_by is not None:
            out.update(outcome=self.outcome, version=self.candidate, requested_by=self.requested_by)
        return out

    def _rollback_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"scenario": self.scenario, "dry_run": self.dry_run}
        if self.status is PromotionStatus.WOULD_ROLL_BACK:
            out.update(champion=self.champion, would_restore=self.would_restore)
        else:
            out.update(rolled_back_from=self.rolled_back_from, champion=self.champion, previous=self.previous)
        out["reason"] = self.reason
        return out


__all__ = ["ACTIONS", "ROLLBACKS", "PromotionOutcome", "PromotionStatus"]
