"""Aliases set around rlops: a promotion requested from the MLflow UI, and a hand-set champion.

rlops records, as the registered-model tag ``rlops.alias.<alias>``, the version it last pointed an
alias at (:meth:`Tracker.set_alias`). Anything else is a change made around rlops:

* ``challenger`` set on a version by hand (the MLflow UI, its REST API) is a *request*: the gated
  promotion of that version (:func:`rlops.pipeline_steps.promotion.flow.promote_from_alias`).
* ``champion`` set by hand never stands: :func:`restore_champion` puts the champion rlops promoted
  back and tags the hand-picked version with why. Whether the hand-picked version is then
  evaluated as a candidate (``promotion.manual_champion: regate``, the default) or only reverted
  (``revert``) is the promotion flow's decision
  (:func:`rlops.pipeline_steps.promotion.flow.check_champion`).

This module only reads and puts back aliases; it never evaluates or promotes, so the promotion
flow can use it without either depending on the other.

A registry whose champion predates this bookkeeping (no ``rlops.alias.champion`` tag at all) has
its champion adopted as rlops' own on the first check, rather than reverted.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rlops.pipeline_steps.infra.services import StepServices
from rlops.registry import tags as T
from rlops.registry.alias_records import record_state, verified_version
from rlops.registry.client import CHALLENGER, CHAMPION, TrackingError, policy_model_name

if TYPE_CHECKING:
    from rlops.pipeline_steps.promotion.outcome import PromotionOutcome

log = logging.getLogger(__name__)

REGATE, REVERT = "regate", "revert"
UI_REQUEST, MANUAL = "mlflow-ui-alias", "manual-champion"


@dataclass(frozen=True)
class ChampionCheck:
    """What the hand-set-champion check found and did."""

    scenario: str
    champion: str | None  # the champion alias after the check
    hand_set: str | None  # the version someone set by hand, if any
    action: str  # none | adopted | reverted | regated
    reason: str
    promotion: PromotionOutcome | None = None
    """The re-gating of the hand-set version as a candidate (``regated``; None: not re-gated)."""

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["promotion"] = self.promotion.as_dict() if self.promotion is not None else None
        return out


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def restore_champion(ctx: StepServices, mode: str) -> ChampionCheck:
    """Detect a ``champion`` alias set outside rlops and put rlops' own champion back; the
    hand-set version is tagged with why (``rlops.manual_champion``). ``mode`` is
    ``promotion.manual_champion`` (``regate`` or ``revert``, checked by the params model). Action
    ``none``, ``adopted``, ``reverted`` (``hand_set`` names the version to re-gate when the mode
    says so) or ``would_<mode>`` on a dry run. A process whose registry key is not the deployment's
    cannot tell rlops' champion from a hand-set one: it raises ``RegistryKeyMismatch`` and puts back
    nothing."""
    name, tracker = policy_model_name(ctx.scenario), ctx.tracker
    current = tracker.get_alias(name, CHAMPION)
    tags = tracker.model_tags(name)
    state = record_state(tags, name, CHAMPION)  # a record without rlops' signature is not rlops' own
    recorded = verified_version(tags, name, CHAMPION)
    if current is None or current == recorded:
        return ChampionCheck(ctx.scenario, current, None, "none", "the champion is the one rlops promoted")
    if state == "absent":  # the registry predates the bookkeeping: this champion is rlops' own
        tracker.set_alias(name, CHAMPION, current)
        return ChampionCheck(
            ctx.scenario,
            current,
            None,
            "adopted",
            f"no record of rlops' champion yet: v{current} adopted as the gated champion",
        )
    if ctx.dry_run:
        return ChampionCheck(
            ctx.scenario,
            current,
            current,
            f"would_{mode}",
            f"dry run: champion v{current} was set outside rlops (rlops' champion: "
            f"{'v' + recorded if recorded else 'none'})",
        )
    if recorded is not None:
        tracker.set_alias(name, CHAMPION, recorded)
    else:
        tracker.delete_alias(name, CHAMPION)
    reason = (
        f"the champion alias was set to v{current} outside rlops at {_now()}; put back to "
        f"{'v' + recorded if recorded else 'no champion'} (promotion.manual_champion={mode})"
    )
    tracker.set_model_version_tags(
        name,
        current,
        {
            T.MANUAL_CHAMPION_REASON: reason,  # the verdict tag last
            T.MANUAL_CHAMPION: "regated" if mode == REGATE else "reverted",
        },
    )
    log.warning("%s: %s", name, reason)
    return ChampionCheck(ctx.scenario, recorded, current, "reverted", reason)


def withdraw_hand_set_challenger(ctx: StepServices, version: str) -> str | None:
    """A hand-set ``challenger`` that did not pass must not be served traffic: remove the alias
    when it still points at ``version`` and rlops did not set it. Returns an error text, if any."""
    name, tracker = policy_model_name(ctx.scenario), ctx.tracker
    try:
        hand_set = tracker.alias_written_by_rlops(name, CHALLENGER) != version
        if hand_set and tracker.get_alias(name, CHALLENGER) == version:
            tracker.delete_alias(name, CHALLENGER)
    except TrackingError as exc:
        return f"removing the challenger alias failed: {exc}"
    return None
