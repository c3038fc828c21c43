"""Tiny scenario packs for the probes: one valid pack of two fields and two actions, and the
helpers that write it with one thing changed. Tiny keeps each probe's validation fast."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

SCENARIO = """\
name: pack  # its folder's name (write_pack): a pack given by path is named by its folder
description: a two-action pack for robustness probes
horizon: 5
state:
  case:
    amount: {type: float, min: 0, max: 100, init: {dist: uniform, low: 1, high: 100}}
    score: {type: float, init: {dist: normal, mean: 0, std: 1}}
    done: {type: bool, init: false}
actions:
  - name: work
    precondition: "not case.done"
    latency_ms: {mean: 10, std: 1}
    effects:
      - set: {case.amount: "case.amount * 0.5"}
  - name: finish
    precondition: "not case.done"
    terminal: true
    effects:
      - set: {case.done: true}
"""

RULES = """\
rules:
  R1: {title: Finishing pays}
"""

REWARD = """\
import torch

from rlops.sandbox.reward import component, rule_ref

WEIGHTS = {"service": 1.0}
CLIP = 5.0


@component(objective="service", reason="finishing pays, working costs")
@rule_ref("R1")
def finished(t):
    return torch.where(t.action == "finish", 1.0, -0.1)
"""

#: A component body that replaces the ``return`` of :data:`REWARD`.
RETURN = '    return torch.where(t.action == "finish", 1.0, -0.1)\n'

Setup = Callable[[Path], None]


def write_pack(
    root: Path,
    scenario: str = SCENARIO,
    rules: str = RULES,
    reward: str = REWARD,
    extra: dict[str, str | bytes] | None = None,
) -> Path:
    pack = root / "pack"
    pack.mkdir(parents=True, exist_ok=True)
    files: dict[str, str | bytes] = {
        "scenario.yaml": scenario,
        "rules.yaml": rules,
        "reward_v1.py": reward,
        **(extra or {}),
    }
    for name, content in files.items():
        path = pack / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return pack


def pack_with(**kw: str | dict[str, str | bytes]) -> Setup:
    return lambda tmp: write_pack(tmp, **kw)  # type: ignore[arg-type]


def scenario_edit(old: str, new: str) -> Setup:
    assert old in SCENARIO, old
    return pack_with(scenario=SCENARIO.replace(old, new, 1))


def reward_returning(body: str) -> Setup:
    """A pack whose component returns ``body`` (a Python expression over ``t``)."""
    return pack_with(reward=REWARD.replace(RETURN, f"    return {body}\n"))


def reward_prelude(code: str) -> Setup:
    """A pack whose reward module runs ``code`` at import, before its components."""
    return pack_with(reward=REWARD.replace("CLIP = 5.0\n", f"CLIP = 5.0\n{code}\n"))


def linked_out(name: str, content: str) -> Setup:
    """A pack whose ``name`` is a symbolic link to a file outside the pack (``{tmp}`` in
    ``content`` becomes the probe's scratch folder)."""

    def setup(tmp: Path) -> None:
        pack = write_pack(tmp)
        outside = tmp / f"outside_{name}"
        outside.write_text(content.replace("{tmp}", str(tmp)), encoding="utf-8")
        target = pack / name
        if target.exists():
            target.unlink()
        os.symlink(outside, target)

    return setup
