"""Aliases set around rlops: a promotion requested from the MLflow UI, and a hand-set champion.

rlops records, as the registered-model tag ``rlops.alias.<alias>``, the version it last pointed an
alias at (:meth:`Tracker.set_alias`). Anything else is a change made around rlops:

* ``challenger`` set on a version by hand (the MLflow UI, its REST API) is a *request*:
  :func:`promote_from_alias` runs the gated promotion of that version (staged 5 → 15 → 100% when
  ``promotion.staged``) and writes the outcome back on the version — tags
  ``rlops.promotion.outcome`` / ``rlops.promotion.reason`` and the gate summary in its
  description. A candidate that fails keeps nothing: its hand-set ``challenger`` alias is removed,
  so no serving client sends it traffic.
* ``champion`` set by hand never stands: :func:`check_champion` (run at the start of every
  promotion and by the webhook on ``champion`` events) puts the champion rlops promoted back, tags
  the hand-picked version with why, and — with ``promotion.manual_champion: regate``, the default —
  evaluates it as a candidate, so a legitimate choice still goes through, through the gates.
  ``revert`` only puts the old champion back (for teams where the UI must never be a way in).

A registry whose champion predates this bookkeeping (no ``rlops.alias.champion`` tag at all) has
its champion adopted as rlops' own on the first check, rather than reverted.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any

from rlops.pipeline_steps.infra import tags as T
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.registry import CHALLENGER, CHAMPION, TrackingError, policy_model_name

log = logging.getLogger(__name__)

REGATE, REVERT = "regate", "revert"
UI_REQUEST, MANUAL = "mlflow-ui-alias", "manual-champion"


@dataclass(frozen=True)
class ChampionCheck:
    """What the hand-set-champion check found and did."""

    scenario: str
    champion: str | None        # the champion alias after the check
    hand_set: str | None        # the version someone set by hand, if any
    action: str                 # none | adopted | reverted | regated
    reason: str
    promotion: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def manual_mode(ctx: StepContext) -> str:
    return ctx.config.promotion.manual_champion  # regate | revert, checked by the params model


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def check_champion(ctx: StepContext) -> ChampionCheck:
    """Detect a ``champion`` alias set outside rlops and handle it per ``promotion.manual_champion``."""
    name, tracker = policy_model_name(ctx.scenario), ctx.tracker
    mode = manual_mode(ctx)  # a bad setting fails every promotion, not only the first hand-set champion
    current = tracker.get_alias(name, CHAMPION)
    tags = tracker.model_tags(name)
    key = T.alias_written(CHAMPION)
    recorded = tags.get(key) or None
    if current is None or current == recorded:
        return ChampionCheck(ctx.scenario, current, None, "none", "the champion is the one rlops promoted")
    if key not in tags:  # the registry predates the bookkeeping: this champion is rlops' own
        tracker.set_alias(name, CHAMPION, current)
        return ChampionCheck(ctx.scenario, current, None, "adopted",
                             f"no record of rlops' champion yet: v{current} adopted as the gated champion")
    if ctx.dry_run:
        return ChampionCheck(ctx.scenario, current, current, f"would_{mode}",
                             f"dry run: champion v{current} was set outside rlops (rlops' champion: "
                             f"{'v' + recorded if recorded else 'none'})")
    if recorded is not None:
        tracker.set_alias(name, CHAMPION, recorded)
    else:
        tracker.delete_alias(name, CHAMPION)
    reason = (f"the champion alias was set to v{current} outside rlops at {_now()}; put back to "
              f"{'v' + recorded if recorded else 'no champion'} (promotion.manual_champion={mode})")
    tracker.set_model_version_tags(name, current, {T.MANUAL_CHAMPION_REASON: reason,  # the verdict tag last
                                                   T.MANUAL_CHAMPION: "regated" if mode == REGATE else "reverted"})
    log.warning("%s: %s", name, reason)
    if mode == REVERT:
        return ChampionCheck(ctx.scenario, recorded, current, "reverted", reason)
    outcome = promote_from_alias(ctx, current, requested_by=MANUAL)
    after = tracker.get_alias(name, CHAMPION)
    return ChampionCheck(ctx.scenario, after, current, "regated",
                         f"{reason}; re-gated: {outcome['reason']}", promotion=outcome)


def promote_from_alias(ctx: StepContext, version: str, requested_by: str = UI_REQUEST,
                       staged: bool | None = None) -> dict[str, Any]:
    """The gated promotion of ``version`` requested through an alias; the outcome is written back
    on the version as tags (and the gate summary in its description, by the evaluation)."""
    from rlops.pipeline_steps.promotion.evaluate import promote
    name, tracker = policy_model_name(ctx.scenario), ctx.tracker
    version = str(version)
    if staged is None:
        staged = ctx.config.promotion.staged
    try:
        res = promote(ctx, version, staged=staged)
    except ValueError as exc:  # e.g. already the champion, no such version
        res = {"action": "none", "promoted": False, "reason": str(exc).strip("'\"")}
    action = str(res.get("action"))
    outcome = {"champion": "champion", "challenger": "challenger"}.get(action, "rejected")
    if outcome == "rejected":
        try:  # a hand-set challenger that did not pass must not be served traffic
            if tracker.get_alias(name, CHALLENGER) == version and \
                    tracker.alias_written_by_rlops(name, CHALLENGER) != version:
                tracker.delete_alias(name, CHALLENGER)
        except TrackingError as exc:
            res["reason"] = f"{res.get('reason')}; removing the challenger alias failed: {exc}"
    if not ctx.dry_run:
        try:
            # The outcome tag last: whoever waits for it then finds the others written.
            tracker.set_model_version_tags(name, version, {
                T.PROMOTION_REASON: str(res.get("reason"))[:5000], T.PROMOTION_REQUESTED_BY: requested_by,
                T.PROMOTION_AT: _now(), T.PROMOTION_OUTCOME: outcome})
        except TrackingError as exc:
            res["warning"] = f"writing the outcome tags failed: {exc}"
    return {**{k: v for k, v in res.items() if k != "gates"}, "outcome": outcome, "version": version,
            "requested_by": requested_by}
