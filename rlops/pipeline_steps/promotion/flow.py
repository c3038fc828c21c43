"""The promotion flow: gated promotion, staged roll-out and rollback of policy versions — with the
moves it shares with the roll-out step (:mod:`rlops.pipeline_steps.promotion.alias_moves`), the one
place that moves the ``champion``/``challenger``/``previous`` aliases.

``rlops model promote --candidate V`` (and every retrain DAG) runs :func:`promote`: the candidate
is judged by :func:`rlops.pipeline_steps.promotion.evaluate.evaluate_candidate` and, when every gate
passes, the alias ``champion`` moves to V (the old champion becomes ``previous`` and joins the
champion history; MLflow failing half-way puts the aliases back). Staged (the retrain DAGs'
default, ``rollout.staged``), a passing candidate first becomes ``challenger`` at the first share of
``evaluate.rollout_stages`` (5% → 15% → 100%); the roll-out DAG
(:mod:`rlops.pipeline_steps.promotion.rollout`) advances it on its live A/B gates. A failing gate,
an unreachable MLflow or storage leaves every alias as it was; the result says why. The first
champion of a pack (none yet: the rule engine serves) rolls out staged too
(``rollout.staged_first_champion``, true by default), its live A/B against the rule engine the
last word. Whatever was asked, a candidate whose evidence is insufficient
(:mod:`rlops.pipeline_steps.promotion.evidence`: no off-policy verdict and no live A/B yet) goes at
most to the first (canary) stage. A staged result says how long the roll-out takes at the least
before the challenger can become champion.

A version that fails its gates, is withdrawn or stops being challenger serves no traffic: its
``traffic_fraction`` tag goes to 0 and its outcome tag says what happened.

A ``champion`` set by hand outside rlops is handled first (:func:`check_champion`): put back by
:mod:`rlops.pipeline_steps.promotion.guard`, then re-gated here as a candidate when
``promotion.manual_champion`` says ``regate``. ``challenger`` set by hand is a request:
:func:`promote_from_alias`, which also runs the stress test of the requested version when it has
no passing report of its own (:mod:`rlops.pipeline_steps.stress.version`).

``rlops model rollback`` runs :func:`rollback`: ``champion`` walks back through the history.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from rlops.common.arguments import MAX_EPISODES, count
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import step_run
from rlops.pipeline_steps.infra.services import StepServices
from rlops.pipeline_steps.promotion.alias_moves import finish, now_text, stage_challenger, stop_serving
from rlops.pipeline_steps.promotion.guard import (
    MANUAL,
    REGATE,
    UI_REQUEST,
    ChampionCheck,
    restore_champion,
    withdraw_hand_set_challenger,
)
from rlops.pipeline_steps.promotion.lock import ChampionMoved, PromotionBusy, check_unchanged, lock_path, promotion_lock
from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from rlops.pipeline_steps.promotion.request import EvaluateRequest, PromoteRequest
from rlops.pipeline_steps.promotion.stages import (
    Stage,
    champion_eta,
    current_stage,
    minutes_to_champion_at,
    rollout_plan,
)
from rlops.pipeline_steps.promotion.stages import next_stage as plan_next
from rlops.pipeline_steps.stress.version import VersionStress, stress_version
from rlops.registry import tags as T
from rlops.registry.alias_records import RegistryKeyMismatch, require_key
from rlops.registry.aliases import NoEarlierChampion, rollback_plan
from rlops.registry.aliases import rollback as rollback_champion
from rlops.registry.client import CHALLENGER, CHAMPION, TrackingError, policy_model_name
from rlops.storage.backend import StorageError

if TYPE_CHECKING:
    from rlops.common.params_operations import RolloutParams
    from rlops.common.params_promotion import EvaluateParams
    from rlops.pipeline_steps.promotion.evaluate_report import EvaluationReport

log = logging.getLogger(__name__)


# --------------------------------------------------------------------------- hand-set aliases
def check_champion(ctx: StepContext) -> ChampionCheck:
    """Put a hand-set champion back (:func:`~rlops.pipeline_steps.promotion.guard.restore_champion`)
    and, with ``promotion.manual_champion: regate``, run it through the gates as a candidate."""
    mode = ctx.config.promotion.manual_champion  # a bad setting fails every promotion, not only a hand-set one
    check = restore_champion(ctx, mode)
    if check.action != "reverted" or check.hand_set is None or mode != REGATE:
        return check
    outcome = promote_from_alias(ctx, check.hand_set, requested_by=MANUAL)
    after = ctx.tracker.get_alias(policy_model_name(ctx.scenario), CHAMPION)
    return ChampionCheck(
        ctx.scenario,
        after,
        check.hand_set,
        "regated",
        f"{check.reason}; re-gated: {outcome.reason}",
        promotion=outcome,
    )


def promote_requested(ctx: StepContext, request: PromoteRequest) -> PromotionOutcome:
    """The promote DAG's step: the gated promotion of the version its run's request names, for whom
    it names (:func:`promote_from_alias`), staged as it says (None: params ``promotion.staged``)."""
    return promote_from_alias(ctx, request.candidate, requested_by=request.requested_by, staged=request.staged)


def promote_from_alias(
    ctx: StepContext, version: str, requested_by: str = UI_REQUEST, staged: bool | None = None
) -> PromotionOutcome:
    """The gated promotion of ``version`` requested through an alias; the outcome is written back
    on the version as tags (and the gate summary in its description, by the evaluation). The
    version's own stress test is run first when it has no passing report (a version trained by
    ``rlops train policy`` never had one), and the ``stress_test`` gate judges that verdict. A
    process whose registry key is not the deployment's changes nothing and raises. The result
    names the requester and leaves out the gate table (it is in the version's description)."""
    name, tracker = policy_model_name(ctx.scenario), ctx.tracker
    version = str(version)
    require_key(tracker, name)  # before the stress test tags anything
    if staged is None:
        staged = ctx.config.promotion.staged
    stress: VersionStress | None = None
    try:
        stress = stress_version(ctx, version) if _gated_on_stress(ctx, ctx.config.evaluate, version) else None
        with tracker.on_behalf_of(requested_by):  # the outcome tags of an alias move name the requester
            # this function writes the outcome tags itself, last, after the alias is dealt with
            res = promote(
                ctx, version, staged=staged, stress_verdict=stress.verdict if stress else None, tag_refusal=False
            )
    except RegistryKeyMismatch:
        raise
    except ValueError as exc:  # e.g. already the champion, no such version
        reason = str(exc).strip("'\"")
        res = PromotionOutcome(PromotionStatus.NOT_PROMOTABLE, ctx.scenario, reason, ctx.dry_run, version, staged)
    except (TrackingError, StorageError) as exc:  # the stress test could not complete
        reason = f"stress test of v{version} failed to run: {exc}"
        res = PromotionOutcome(PromotionStatus.FAILED, ctx.scenario, reason, ctx.dry_run, version, staged)
    res = replace(res, gates=None, stress=stress, requested_by=requested_by)
    if res.outcome == "rejected":
        problem = withdraw_hand_set_challenger(ctx, version)
        if problem:
            res = replace(res, reason=f"{res.reason}; {problem}")
    if not ctx.dry_run:
        try:
            if res.outcome == "rejected" and tracker.get_alias(name, CHAMPION) == version:
                return res  # refused as the champion already: its outcome and share stay the champion's
            if res.outcome == "rejected":
                stop_serving(ctx, version)
            # The outcome tag last: whoever waits for it then finds the others written.
            tracker.set_model_version_tags(
                name,
                version,
                {
                    T.PROMOTION_REASON: res.reason[:5000],
                    T.PROMOTION_REQUESTED_BY: requested_by,
                    T.PROMOTION_AT: now_text(),
                    T.PROMOTION_OUTCOME: res.outcome,
                },
            )
        except TrackingError as exc:
            res = replace(res, warning=f"writing the outcome tags failed: {exc}")
    return res


def _gated_on_stress(services: StepServices, settings: EvaluateParams, version: str) -> bool:
    """Whether the promotion of ``version`` is gated on a stress verdict of its own (not when the
    gate does not ask for one — ``evaluate.require_stress_test`` is off — or the version is the
    champion already, which the evaluation refuses anyway)."""
    if not settings.require_stress_test:
        return False
    return services.tracker.get_alias(policy_model_name(services.scenario), CHAMPION) != version


# --------------------------------------------------------------------------- promote
def promote(
    ctx: StepContext,
    candidate: str,
    staged: bool = False,
    episodes: int | None = None,
    stress_verdict: str | None = None,
    tag_refusal: bool = True,
) -> PromotionOutcome:
    """Evaluate and, when every gate passes, promote (or stage as challenger; ``stress_verdict``:
    see :func:`~rlops.pipeline_steps.promotion.evaluate.evaluate_candidate`). A champion set by
    hand outside rlops is handled first (:func:`check_champion`, before the lock: its re-gating is
    a promotion of its own). One promotion of a model at a time
    (:mod:`rlops.pipeline_steps.promotion.lock`): the evaluation and the alias move happen under
    one lock, and the move is refused if the champion changed meanwhile. The outcome is recorded
    as the pass's ``promote`` step run; a refused candidate is tagged ``rejected`` with the reason
    unless ``tag_refusal`` is off (a request through an alias writes its outcome tags last itself)."""
    candidate = str(candidate)
    if episodes is not None:  # before anything touches the registry
        count("--episodes", episodes, maximum=MAX_EPISODES)
    try:
        check = check_champion(ctx)
    except (TrackingError, StorageError) as exc:
        reason = f"checking the champion failed, nothing changed: {exc}"
        return PromotionOutcome(PromotionStatus.FAILED, ctx.scenario, reason, ctx.dry_run, candidate, staged)
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate

    settings = ctx.config.evaluate
    path = lock_path(ctx.local_dir("locks"), str(ctx.tracker.tracking_uri), policy_model_name(ctx.scenario))
    try:
        with promotion_lock(path, settings.lock_timeout_s) as waited:
            plan = rollout_plan(settings)
            try:
                report = evaluate_candidate(ctx, EvaluateRequest(candidate, episodes), stress_verdict)
            except (TrackingError, StorageError) as exc:
                reason = f"evaluation could not complete, nothing changed: {exc}"
                judged = PromotionOutcome(PromotionStatus.FAILED, ctx.scenario, reason, ctx.dry_run, candidate, staged)
            else:
                judged = _act_on_evaluation(ctx, report, candidate, plan, ctx.config.rollout, staged, tag_refusal)
            out = replace(judged, lock_wait_s=round(waited, 3))
    except PromotionBusy as exc:
        out = PromotionOutcome(PromotionStatus.BUSY, ctx.scenario, str(exc), ctx.dry_run, candidate, staged)
    if check.action != "none":
        out = replace(out, champion_check=check)
    if not ctx.dry_run:
        out = _track_promotion(ctx, out)
    return out


def _track_promotion(ctx: StepServices, out: PromotionOutcome) -> PromotionOutcome:
    """Record the promotion as the pass's ``promote`` step run; ``out`` with a warning when MLflow
    failed to take the record."""
    try:
        with step_run(
            ctx,
            T.PROMOTE,
            label=f"v{out.candidate}",
            extra_tags={
                T.CANDIDATE: str(out.candidate),
                T.PASSED: str(bool(out.passed)).lower(),
                T.PROMOTION_ACTION: out.action,
            },
        ) as run:
            run.log_params({"reason": out.reason[:500], "staged": out.staged})
            run.log_metrics(
                {"promoted": float(out.promoted), "traffic_fraction": float(out.traffic_fraction or 0.0)}, step=0
            )
    except TrackingError as exc:  # the promotion's own outcome stands; only its record is missing
        if out.warning is None:
            return replace(out, warning=f"recording the promotion in MLflow failed: {exc}")
    return out


def _act_on_evaluation(
    services: StepServices,
    report: EvaluationReport,
    candidate: str,
    plan: list[Stage],
    rollout: RolloutParams,
    staged: bool,
    tag_refusal: bool = True,
) -> PromotionOutcome:
    """Move the aliases as the evaluation ``report`` of ``candidate`` allows (under the promotion
    lock): refuse it, stage it at the next stage of ``plan`` (each stage serving the ``rollout:``
    block's minimum), or make it the champion."""
    name = policy_model_name(services.scenario)
    judged = PromotionOutcome.refused(report, candidate, staged)  # unless it passes and moves (below)
    if not report.passed:
        if not services.dry_run:
            try:
                stop_serving(services, candidate, judged.reason)
                if tag_refusal:  # the registry's version list then tells a refused candidate from one never judged
                    services.tracker.record_outcome(name, candidate, T.OUTCOME_REJECTED, judged.reason)
            except TrackingError as exc:
                return replace(judged, reason=f"{judged.reason}; recording the refusal on v{candidate} failed: {exc}")
        return judged
    mlflow_failed = "MLflow failed during promotion; aliases left as they were"
    try:
        check_unchanged(report.champion_version, services.tracker.get_alias(name, CHAMPION), name)
    except ChampionMoved as exc:
        return replace(judged, status=PromotionStatus.CHAMPION_MOVED, passed=False, reason=str(exc))
    except TrackingError as exc:
        return replace(judged, status=PromotionStatus.FAILED, reason=f"{mlflow_failed}: {exc}")
    try:
        challenger = services.tracker.get_alias(name, CHALLENGER)
        stage, why = plan[-1], "all gates pass"
        first = report.champion_version is None and not rollout.staged_first_champion
        current = None
        if challenger == candidate:
            current = current_stage(plan, services.tracker.model_version_tags(name, candidate))
        if report.hold:
            # Missing evidence is not a pass: at most the canary stage, whose live A/B decides the rest.
            stage = current if current is not None else plan[0]
            why = f"all gates pass; held at the canary stage: {report.hold}"
        elif staged and first:
            why = (
                "all gates pass; first champion of the pack, not staged: there is no champion to run a live "
                "A/B against and the gates compared it with the rule engine (rollout.staged_first_champion: false)"
            )
        elif staged:
            stage = plan_next(plan, current)
        if report.hold and stage.final:
            reason = f"{why}, but evaluate.rollout_stages has no stage below 100%; champion unchanged"
            return replace(judged, passed=False, reason=reason)
        nxt = stage.share if not stage.final else 1.0
        eta = champion_eta(plan, stage, rollout.min_stage_minutes) if not stage.final else ""
        if services.dry_run:
            what = "champion" if stage.final else f"challenger at {stage.describe()}; {eta}"
            return replace(
                judged,
                status=PromotionStatus.WOULD_PROMOTE if stage.final else PromotionStatus.WOULD_STAGE,
                traffic_fraction=nxt,
                traffic_segment=stage.segment,
                reason=f"dry run: {why}; v{candidate} would become {what}",
            )
        if not stage.final:
            stage_challenger(services, candidate, nxt, f"{why}; staged at {stage.describe()}", stage)
            reason = f"{why}; v{candidate} serves {stage.describe()} as challenger; {eta}"
            log.info("%s: %s", name, reason)
            return replace(
                judged,
                status=PromotionStatus.STAGED,
                traffic_fraction=nxt,
                traffic_segment=stage.segment,
                champion=report.champion_version,
                champion_in_min=minutes_to_champion_at(plan, stage, rollout.min_stage_minutes),
                reason=reason,
            )
        done = finish(services, candidate, why)
    except TrackingError as exc:
        return replace(judged, status=PromotionStatus.FAILED, reason=f"{mlflow_failed}: {exc}")
    out = replace(
        judged,
        status=done.status,
        champion=done.champion,
        previous=done.previous,
        traffic_fraction=done.traffic_fraction,
        warning=done.warning,
        reason=f"{why}; v{candidate} is the champion",
    )
    log.info("%s: %s", name, out.reason)
    return out


# --------------------------------------------------------------------------- rollback
def rollback(ctx: StepServices, reason: str | None = None) -> PromotionOutcome:
    """Point ``champion`` back at the most recent earlier champion (``previous`` at the one
    before; see :func:`rlops.registry.aliases.rollback`); the demoted version is
    tagged ``rlops.rolled_back`` with ``reason``."""
    name = policy_model_name(ctx.scenario)
    current = ctx.tracker.get_alias(name, CHAMPION)
    try:
        target, _ = rollback_plan(ctx.tracker, name)  # a dry run refuses what the rollback would
    except NoEarlierChampion:
        raise ValueError(
            f"cannot roll back {name}: there is no 'previous' version (champion is {current}); "
            "promote a version explicitly instead"
        ) from None
    if ctx.dry_run:
        return PromotionOutcome(
            PromotionStatus.WOULD_ROLL_BACK,
            ctx.scenario,
            f"dry run: champion would move from v{current} back to v{target}",
            True,
            champion=current,
            would_restore=target,
        )
    state = rollback_champion(ctx.tracker, name, reason)
    return PromotionOutcome(
        PromotionStatus.ROLLED_BACK,
        ctx.scenario,
        reason or f"champion restored to v{state.champion}",
        False,
        champion=state.champion,
        previous=state.previous,
        rolled_back_from=current,
    )
