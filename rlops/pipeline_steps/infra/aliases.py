"""Moving ``champion`` / ``previous`` of a registered model as one step.

Promotion moves ``champion`` and keeps the old one as ``previous``; rollback points ``champion``
back at ``previous``. If MLflow fails half-way the prior aliases are put back, so the registry
never shows a half-moved champion. The functions take the :class:`Tracker` they move the aliases
with (the registry module knows nothing of them, so the two do not import each other).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlops.pipeline_steps.infra import tags as K
from rlops.pipeline_steps.infra.registry import CHAMPION, PREVIOUS, TrackingError

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.registry import Tracker


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
            + ("NOT fully restored:" + restore_err if restore_err else
               f"restored to champion={before[CHAMPION]}, previous={before[PREVIOUS]}.")
        ) from exc
    return AliasState(name, target[CHAMPION], target[PREVIOUS])


def move_champion(tracker: Tracker, name: str, new_version: str) -> AliasState:
    """Make ``new_version`` the champion and keep the current one as ``previous``."""
    new_version = str(new_version)
    tracker._call(f"get {name!r} v{new_version}", lambda c: c.get_model_version(name, new_version))
    current = tracker.get_alias(name, CHAMPION)
    if current == new_version:
        return AliasState(name, current, tracker.get_alias(name, PREVIOUS))
    previous = current if current is not None else tracker.get_alias(name, PREVIOUS)
    return move_aliases(tracker, name, {CHAMPION: new_version, PREVIOUS: previous},
                        f"moving champion to v{new_version}")


def rollback(tracker: Tracker, name: str) -> AliasState:
    """Point ``champion`` back at ``previous`` and clear ``previous`` (so a second
    rollback cannot bounce back to the bad version). The demoted version is tagged."""
    previous, current = tracker.get_alias(name, PREVIOUS), tracker.get_alias(name, CHAMPION)
    if previous is None:
        raise TrackingError(f"cannot roll back {name!r}: it has no 'previous' alias "
                            f"(champion is {current}); promote a version explicitly instead")
    state = move_aliases(tracker, name, {CHAMPION: previous, PREVIOUS: None}, "rollback")
    if current is not None and current != previous:
        tracker.set_model_version_tags(name, current, {K.ROLLED_BACK: "true"})
    return state
