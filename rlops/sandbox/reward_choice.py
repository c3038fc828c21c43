"""Which reward function applies — one rule, used by every command, step and DAG task.

In order: the one asked for explicitly (``--reward-fn``, a DAG run's ``reward_fn``), the pack's own
``params.yaml`` (``reward_fn: v1``), the project's ``params.yaml`` when the pack has that version,
and otherwise the newest version in the pack. The choice carries the label a person reads
(``reward_fn``, e.g. ``v1``) and the sha256 of the source that was loaded (``reward_fn_sha256``):
two named fields, never one name for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rlops.common.errors import UserError

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack
    from rlops.sandbox.reward import RewardFunction


@dataclass(frozen=True)
class RewardChoice:
    """The reward function that applies, and why."""

    reward_fn: str
    reward_fn_sha256: str
    source: str

    def as_fields(self) -> dict[str, str]:
        return {"reward_fn": self.reward_fn, "reward_fn_sha256": self.reward_fn_sha256}


def label_of(text: str) -> str:
    """``v1`` from ``v1``, ``reward_v1`` or ``reward_v1.py``."""
    return Path(str(text)).stem.removeprefix("reward_")


def choose_label(
    pack_name: str,
    available: list[str],
    explicit: str | None = None,
    pack_default: str | None = None,
    configured: str | None = None,
) -> tuple[str, str]:
    """``(label, source)`` of the reward function that applies among the pack's ``available`` labels
    (see the module docstring): the rule itself, for a loaded pack and for a pack's files alike."""
    ordered = sorted(available, key=_version_key)
    if not ordered:
        raise UserError(f"pack {pack_name} has no reward_v*.py")
    for value, source, strict in (
        (explicit, "asked for", True),
        (pack_default, "pack params.yaml", True),
        (configured, "params.yaml", False),
    ):
        if value in (None, ""):
            continue
        label = label_of(str(value))
        if label in ordered:
            return label, source
        if strict:
            raise UserError(
                f"reward function {value!r} ({source}): pack {pack_name} has "
                f"{', '.join(ordered)}; expected one of those labels"
            )
    return ordered[-1], "newest in the pack"


def choose_reward(pack: Pack, explicit: str | None = None, configured: str | None = None) -> RewardChoice:
    """The reward function of ``pack`` that applies (see the module docstring)."""
    pack_default = pack.params.get("reward_fn") if isinstance(pack.params, dict) else None
    label, source = choose_label(pack.name, list(pack.reward_fns), explicit, pack_default, configured)
    return _choice(pack.reward_fns[label], label, source)


def _choice(fn: RewardFunction, label: str, source: str) -> RewardChoice:
    return RewardChoice(label, fn.version, source)


def _version_key(label: str) -> tuple[int, str]:
    digits = "".join(ch for ch in label if ch.isdigit())
    return (int(digits) if digits else -1, label)
