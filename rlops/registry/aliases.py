"""Moving ``champion`` / ``previous`` of a registered model as one step.

Promotion moves ``champion`` and keeps the old one as ``previous``; every version that was champion
is remembered, oldest first, in the registered-model tag ``rlops.champion.history``, signed like an
alias move (:func:`~rlops.registry.alias_records.history_tags`). Rollback points ``champion`` back at
the most recent of them and ``previous`` at the one before, so rolling back again walks further back
through the history (never forward to a demoted version) until it is exhausted. Rollback only ever
restores a version rlops itself made champion: a history written or edited in the MLflow UI does
not verify, and a version it names that rlops cannot vouch for is refused. If MLflow fails half-way
the prior aliases are put back, so the registry never shows a half-moved champion. Reached through
:meth:`Tracker.move_champion` and :meth:`Tracker.rollback`.

A version an alias moves off has its promotion outcome rewritten (``previous``, ``retired``,
``rolled_back``) and its challenger share ``traffic_fraction`` set to 0, so neither a person nor an
agent reads a fate or a share the version no longer has. A process whose registry key is not the
deployment's moves nothing (:func:`~rlops.registry.alias_records.require_key`).

The first promotion also records its time (``rlops.champion.first_at``): the rule engine serves an
agent until then, so its ``no_champion`` fallbacks before that moment are expected
(:func:`first_champion_at`, read by the capture's fallback alert).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rlops.common.errors import UserError
from rlops.registry import tags as K
from rlops.registry.alias_records import (
    RegistryKeyMismatch,
    history_tags,
    record_state,
    require_key,
    verified_history,
    verified_version,
)
from rlops.registry.client import CHAMPION, PREVIOUS, TrackingError

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlops.registry.client import Tracker


@dataclass(frozen=True)
class AliasState:
    """``champion`` and ``previous`` of a registered model after an alias change."""

    name: str
    champion: str | None
    previous: str | None


def move_aliases(tracker: Tracker, name: str, target: dict[str, str | None], why: str) -> AliasState:
    """Set ``champion``/``previous`` to ``target`` (None deletes); restore on failure."""
    before = {a: tracker.get_alias(name, a) for a in (CHAMPION, PREVIOUS)}
    order = [PREVIOUS, CHAMPION]  # previous first: champion is never lost, only duplicated
    try:
        for alias in order:
            if target[alias] == before[alias]:
                continue
            if target[alias] is None:
                tracker.delete_alias(name, alias)
            else:
                tracker.set_alias(name, alias, str(target[alias]))
    except RegistryKeyMismatch:  # refused before anything was written: nothing to put back
        raise
    except Exception as exc:
        restore_err = ""
        for alias in order:
            try:
                if before[alias] is None:
                    tracker.delete_alias(name, alias)
                else:
                    tracker.set_alias(name, alias, str(before[alias]))
            except Exception as rexc:  # noqa: BLE001 - reported below
                restore_err += f" Restoring {alias!r} to {before[alias]} also failed: {rexc}."
        raise TrackingError(
            f"{why} for {name!r} failed: {exc}. Aliases were "
            + (
                "NOT fully restored:" + restore_err
                if restore_err
                else f"restored to champion={before[CHAMPION]}, previous={before[PREVIOUS]}."
            )
        ) from exc
    return AliasState(name, target[CHAMPION], target[PREVIOUS])


class NoEarlierChampion(TrackingError):
    """Rollback has nothing to go back to."""


@dataclass(frozen=True)
class History:
    """The champion history as the registry shows it and the part of it rlops vouches for."""

    recorded: list[str]
    """The tag's versions, oldest first (without a readable tag: the ``previous`` alias)."""
    signed: list[str]
    """The versions rlops made champion: the whole tag when its signature verifies, else at most
    the ``previous`` alias that rlops' own signed record says it set."""


def read_history(tracker: Tracker, name: str) -> History:
    """The champion history of ``name`` (:class:`History`)."""
    tags = tracker.model_tags(name)
    verified = verified_history(tags, name)
    if verified is not None:
        return History(verified, verified)
    try:
        raw = json.loads(tags.get(K.CHAMPION_HISTORY) or "[]")
        recorded = [str(v) for v in raw] if isinstance(raw, list) else []
    except (ValueError, TypeError):
        recorded = []
    previous = tracker.get_alias(name, PREVIOUS)
    if not recorded:  # a registry older than this record has at most its 'previous' to go back to
        recorded = [previous] if previous else []
    vouched = previous is not None and verified_version(tags, name, PREVIOUS) == previous
    return History(recorded, [previous] if vouched and previous is not None else [])


def champion_history(tracker: Tracker, name: str) -> list[str]:
    """Versions rlops made champion before the current one, oldest first; versions a history written
    outside rlops names are left out."""
    return read_history(tracker, name).signed


def _write_history(tracker: Tracker, name: str, history: list[str]) -> None:
    def write(c: MlflowClient) -> None:
        for k, v in history_tags(name, history, c.get_registered_model(name).tags).items():
            c.set_registered_model_tag(name, k, v)

    tracker._call(f"record the champion history of {name!r}", write)


def _set_model_tag(tracker: Tracker, name: str, key: str, value: str) -> None:
    tracker._call(f"tag {name!r} {key}", lambda c: c.set_registered_model_tag(name, key, value))


def _tag_time(value: str | None) -> datetime | None:
    """A time tag (ISO 8601) as UTC; None when absent or unreadable (tags are editable by hand)."""
    try:
        t = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00")) if value else None
    except ValueError:
        return None
    return None if t is None else (t if t.tzinfo else t.replace(tzinfo=UTC))


def first_champion_at(tracker: Tracker, name: str) -> datetime | None:
    """When ``name`` first had a champion, as well as the registry records it: the time of rlops'
    first promotion (tag ``rlops.champion.first_at``), never later than the current champion's own
    promotion (``rlops.promotion.at`` or ``promoted_at``). A registry promoted before that record
    gives the earliest promotion time tagged on a version of its champion history instead — no
    earlier than the first promotion, so a little of its traffic may pass for before it. None:
    no champion time recorded."""
    tags = tracker.model_tags(name)
    recorded = _tag_time(tags.get(K.CHAMPION_FIRST_AT))
    versions = [tracker.get_alias(name, CHAMPION)]
    if recorded is None:
        versions += read_history(tracker, name).recorded
    times = [recorded] if recorded else []
    for version in dict.fromkeys(v for v in versions if v):
        vtags = tracker.model_version_tags(name, version)
        times += [t for t in (_tag_time(vtags.get(K.PROMOTION_AT)), _tag_time(vtags.get(K.VERSION.PROMOTED_AT))) if t]
    return min(times) if times else None


def rollback_plan(tracker: Tracker, name: str) -> tuple[str, list[str]]:
    """The version a rollback of ``name`` restores and the history left before it, oldest first.
    Refused (:class:`~rlops.common.errors.UserError`) when the version to restore is not one rlops
    made champion — a ``previous`` alias or a champion history written outside rlops — and
    :class:`NoEarlierChampion` when there is none."""
    current, previous = tracker.get_alias(name, CHAMPION), tracker.get_alias(name, PREVIOUS)
    tags = tracker.model_tags(name)
    if (
        previous is not None
        and record_state(tags, name, PREVIOUS) != "absent"
        and verified_version(tags, name, PREVIOUS) != previous
    ):
        raise UserError(
            f"cannot roll back {name}: 'previous' points at v{previous}, which was set outside "
            "rlops; rollback only returns to a version rlops itself replaced. Set the alias "
            f"'challenger' on v{previous} to put it through the gates instead"
        )
    history = read_history(tracker, name)
    recorded = [v for v in history.recorded if v != current]
    if not recorded:
        raise NoEarlierChampion(
            f"cannot roll back {name!r}: it has no 'previous' alias and no earlier champion "
            f"(champion is {current}); promote a version explicitly instead"
        )
    target = recorded[-1]
    if target not in history.signed:
        raise UserError(
            f"cannot roll back {name}: v{target} is not a version rlops made champion (neither rlops' "
            f"signed champion history, tag {K.CHAMPION_HISTORY!r}, nor its signed 'previous' names it: "
            f"it was written outside rlops); nothing was changed. Set the alias 'challenger' on "
            f"v{target} to put it through the gates instead"
        )
    return target, [v for v in history.signed if v not in (target, current)]


def move_champion(tracker: Tracker, name: str, new_version: str) -> AliasState:
    """Make ``new_version`` the champion and keep the current one as ``previous`` (and at the
    end of the champion history)."""
    new_version = str(new_version)
    require_key(tracker, name)
    tracker._call(f"get {name!r} v{new_version}", lambda c: c.get_model_version(name, new_version))
    current = tracker.get_alias(name, CHAMPION)
    if current == new_version:
        return AliasState(name, current, tracker.get_alias(name, PREVIOUS))
    before_previous = tracker.get_alias(name, PREVIOUS)
    first = current is None and not read_history(tracker, name).recorded
    history = [v for v in champion_history(tracker, name) if v != new_version]
    if current is not None:
        history = [v for v in history if v != current] + [current]
    state = move_aliases(
        tracker,
        name,
        {CHAMPION: new_version, PREVIOUS: history[-1] if history else None},
        f"moving champion to v{new_version}",
    )
    _write_history(tracker, name, history)
    if first and not tracker.model_tags(name).get(K.CHAMPION_FIRST_AT):
        _set_model_tag(tracker, name, K.CHAMPION_FIRST_AT, datetime.now(UTC).isoformat(timespec="seconds"))
    tracker.record_outcome(
        name,
        new_version,
        K.OUTCOME_CHAMPION,
        f"promoted to champion (previous: {'v' + current if current else 'none'})",
    )
    if current is not None:
        _moved_off(tracker, name, current, K.OUTCOME_PREVIOUS, f"champion until v{new_version} replaced it")
    if before_previous is not None and before_previous not in (state.champion, state.previous):
        _moved_off(
            tracker,
            name,
            before_previous,
            K.OUTCOME_RETIRED,
            f"no longer 'previous' (v{state.previous} is); still in the champion history",
        )
    return state


def _moved_off(tracker: Tracker, name: str, version: str, outcome: str, reason: str) -> None:
    """An alias left ``version``: its outcome says what it is now, and it serves no challenger share."""
    if float_or_zero(tracker.model_version_tags(name, version).get(K.VERSION.TRAFFIC_FRACTION)) != 0.0:
        tracker.set_model_version_tags(name, version, {K.VERSION.TRAFFIC_FRACTION: 0.0})
    tracker.record_outcome(name, version, outcome, reason)


def float_or_zero(text: str | None) -> float:
    """A share tag as a number; a missing or unreadable one counts as 0 (an agent serves it none)."""
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def rollback(tracker: Tracker, name: str, reason: str | None = None) -> AliasState:
    """Point ``champion`` back at the most recent earlier champion and ``previous`` at the one
    before it (None once the history is exhausted). The demoted version is tagged
    ``rlops.rolled_back`` (with ``reason``) and leaves the history, so a second rollback goes
    further back instead of bouncing to it."""
    require_key(tracker, name)
    current, previous = tracker.get_alias(name, CHAMPION), tracker.get_alias(name, PREVIOUS)
    target, rest = rollback_plan(tracker, name)
    state = move_aliases(tracker, name, {CHAMPION: target, PREVIOUS: rest[-1] if rest else None}, "rollback")
    _write_history(tracker, name, rest)
    if current is not None and current != target:
        tracker.set_model_version_tags(
            name, current, {K.ROLLED_BACK: "true", K.ROLLED_BACK_REASON: (reason or "rolled back")[:5000]}
        )
    tracker.record_outcome(
        name, target, K.OUTCOME_CHAMPION, f"champion again: rolled back from {'v' + current if current else 'none'}"
    )
    if current is not None and current != target:
        _moved_off(tracker, name, current, K.OUTCOME_ROLLED_BACK, reason or f"rolled back to v{target}")
    if state.previous is not None and state.previous != previous:
        tracker.record_outcome(
            name, state.previous, K.OUTCOME_PREVIOUS, f"'previous' again after the rollback to v{target}"
        )
    return state
