"""Saving a what-if as the pack's next reward version.

The changed module (:func:`rlops.whatif.change.rewrite_source`: the base with the new literals and a
header saying what it derives from) is written as ``reward_vN.py`` next to the pack's other
versions. From there it goes through the governance of any reward version: ``rlops stress
--reward-fn vN``, a registry version when a training uses it (``rlops train policy --reward-fn
vN``), review in the console's reward diff — never straight to production.

The file appears whole or not at all: it is written under a temporary name in the pack folder and
linked to its final name, which fails if a version of that name appeared meanwhile.
"""

from __future__ import annotations

import os
from pathlib import Path

from rlops.common.errors import UserError
from rlops.sandbox.reward import RewardFunction


def save_reward_module(pack_dir: Path, fn: RewardFunction, label: str) -> Path:
    """Write ``fn``'s source as ``pack_dir/reward_<label>.py``; a UserError if it exists."""
    target = pack_dir / f"reward_{label}.py"
    tmp = pack_dir / f".reward_{label}.py.{os.getpid()}.tmp"
    tmp.write_text(fn.source, encoding="utf-8")
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise UserError(
            f"{target} already exists: another reward version {label} was written meanwhile; run the what-if again"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)
    return target


__all__ = ["save_reward_module"]
