"""The alias moves of a staged roll-out, shared by the promotion flow
(:mod:`rlops.pipeline_steps.promotion.flow`) and the roll-out step
(:mod:`rlops.pipeline_steps.promotion.rollout`): a version staged as ``challenger`` at a share
(:func:`stage_challenger`), made champion (:func:`finish`), withdrawn after a failed live gate
(:func:`withdraw_challenger`) or taken off traffic (:func:`stop_serving`).

Tags first, alias second: a policy client that sees an alias always reads the share it serves.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from rlops.registry import tags as T
from rlops.registry.aliases import float_or_zero, move_champion
from rlops.registry.client import CHALLENGER, TrackingError, policy_model_name

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.pipeline_steps.promotion.stages import Stage

TRAFFIC_TAG = T.VERSION.TRAFFIC_FRACTION


def now_text() -> str:
    """Now, as the outcome and promotion tags write it (UTC, to the second)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def stage_challenger(ctx: StepServices, version: str, fraction: float, reason: str, stage: Stage | None = None) -> None:
    """Serve ``version`` to ``fraction`` of traffic as ``challenger`` — of the segment of ``stage``
    when it names one (:mod:`rlops.pipeline_steps.promotion.stages`). Tags first, alias second: a
    client that sees the alias always reads the new share. A challenger it replaces stops serving
    (share 0; outcome ``withdrawn`` when rlops had staged it)."""
    name = policy_model_name(ctx.scenario)
    serve = stage.tags() if stage is not None else {TRAFFIC_TAG: fraction, T.VERSION.TRAFFIC_SEGMENT: ""}
    ctx.tracker.set_model_version_tags(
        name,
        version,
        {**serve, T.ROLLOUT_STAGE_STARTED: ctx.key.end.isoformat(), T.ROLLOUT_REASON: reason[:5000]},
    )
    replaced = ctx.tracker.get_alias(name, CHALLENGER)
    if replaced != version:
        staged_by_rlops = replaced is not None and ctx.tracker.alias_written_by_rlops(name, CHALLENGER) == replaced
        ctx.tracker.set_alias(name, CHALLENGER, version)
        if replaced is not None:
            stop_serving(ctx, replaced)
        if staged_by_rlops:  # a hand-set one is a request in flight: its promotion writes its outcome
            ctx.tracker.record_outcome(
                name, str(replaced), T.OUTCOME_WITHDRAWN, f"replaced as challenger by v{version}"
            )


def finish(ctx: StepServices, version: str, reason: str) -> PromotionOutcome:
    """Make ``version`` the champion (the old one becomes ``previous``) and retire its
    ``challenger`` alias; ``reason`` is tagged on the version."""
    name = policy_model_name(ctx.scenario)
    state = move_champion(ctx.tracker, name, version)
    warning = None
    try:
        ctx.tracker.set_model_version_tags(
            name,
            version,
            {
                TRAFFIC_TAG: 1.0,
                T.VERSION.TRAFFIC_SEGMENT: "",
                "promoted_at": now_text(),
                T.ROLLOUT_REASON: reason[:5000],
            },
        )
        # read after the move, not before: a challenger alias set in the UI a moment earlier (the
        # webhook that asked for this promotion) may reach the registry's reads only now
        if ctx.tracker.get_alias(name, CHALLENGER) == version:
            ctx.tracker.delete_alias(name, CHALLENGER)
    except TrackingError as exc:  # the champion moved; only bookkeeping is behind
        warning = f"champion moved, but updating the challenger alias/tags failed: {exc}"
    return PromotionOutcome(
        PromotionStatus.CHAMPION,
        ctx.scenario,
        reason,
        ctx.dry_run,
        version,
        traffic_fraction=1.0,
        champion=state.champion,
        previous=state.previous,
        warning=warning,
    )


def withdraw_challenger(ctx: StepServices, version: str, reason: str) -> None:
    """Stop serving ``version`` as challenger (a failed live gate): share 0 and alias removed,
    why tagged, outcome ``withdrawn``."""
    name = policy_model_name(ctx.scenario)
    ctx.tracker.set_model_version_tags(name, version, {TRAFFIC_TAG: 0.0, T.ROLLOUT_REASON: reason[:5000]})
    if ctx.tracker.get_alias(name, CHALLENGER) == version:
        ctx.tracker.delete_alias(name, CHALLENGER)
    ctx.tracker.record_outcome(name, version, T.OUTCOME_WITHDRAWN, reason)


def stop_serving(ctx: StepServices, version: str, reason: str | None = None) -> None:
    """``version`` serves no challenger share any more (its gates failed, it was rejected):
    ``traffic_fraction`` 0 where it was set; given a ``reason``, a challenger alias rlops staged on
    it is withdrawn. A hand-set one is the requested promotion's to remove
    (:func:`promote_from_alias`), which writes the version's outcome last."""
    name = policy_model_name(ctx.scenario)
    if float_or_zero(ctx.tracker.model_version_tags(name, version).get(TRAFFIC_TAG)) != 0.0:
        ctx.tracker.set_model_version_tags(name, version, {TRAFFIC_TAG: 0.0})
    if (
        reason is not None
        and ctx.tracker.get_alias(name, CHALLENGER) == version
        and ctx.tracker.alias_written_by_rlops(name, CHALLENGER) == version
    ):
        withdraw_challenger(ctx, version, reason)
