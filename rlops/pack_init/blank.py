"""The smallest valid pack from a list of actions and fields (``rlops init PACK --actions …``).

Every action is legal until the case is closed; the last one closes it and ends the episode. The
reward is a placeholder step cost and a bonus for closing, both marked for the expert.
"""

from __future__ import annotations

import numpy as np

from rlops.common.errors import UserError
from rlops.pack_init.actions import HUMAN, ActionGuess, RulePolicyGuess
from rlops.pack_init.fields import IDENTIFIER, FieldGuess
from rlops.pack_init.render import PackDraft
from rlops.pack_init.rewards import placeholder_reward

CLOSED = "case.closed"
TYPES = ("int", "float", "bool", "enum")


def parse_field(text: str) -> FieldGuess:
    """``name:type[:min:max]`` (numbers) or ``name:enum:a|b|c``; ``name`` a dotted path."""
    parts = text.strip().split(":")
    name, kind = parts[0].strip(), (parts[1].strip() if len(parts) > 1 else "")
    expected = "expected name:type[:min:max] (type int, float or bool) or name:enum:a|b|c"
    if not name or not all(IDENTIFIER.match(p) for p in name.split(".")) or name.split(".")[0] == "episode":
        raise UserError(
            f"--fields {text!r}: {name!r} is not a field path (dotted identifiers, not episode.*); {expected}"
        )
    if kind not in TYPES:
        raise UserError(f"--fields {text!r}: unknown type {kind!r}; {expected}")
    if kind == "enum":
        values = tuple(v.strip() for v in ":".join(parts[2:]).split("|") if v.strip())
        if not values or len(set(values)) != len(values):
            raise UserError(f"--fields {text!r}: an enum needs distinct values a|b|c; {expected}")
        return FieldGuess(name, "enum", values[0], values=values, evidence="from --fields")
    if kind == "bool":
        if len(parts) > 2:
            raise UserError(f"--fields {text!r}: a bool takes no range; {expected}")
        return FieldGuess(name, "bool", False, evidence="from --fields")
    lo = hi = None
    if len(parts) not in (2, 4):
        raise UserError(f"--fields {text!r}: give both min and max or neither; {expected}")
    if len(parts) == 4:
        try:
            lo, hi = float(parts[2]), float(parts[3])
        except ValueError:
            raise UserError(f"--fields {text!r}: min and max must be numbers; {expected}") from None
        if not np.isfinite([lo, hi]).all() or lo > hi:
            raise UserError(f"--fields {text!r}: min {parts[2]} must not exceed max {parts[3]}; {expected}")
        if kind == "int" and not (lo.is_integer() and hi.is_integer()):
            raise UserError(f"--fields {text!r}: an int field's range must be whole numbers; {expected}")
    init: object = 0 if lo is None else {"dist": "uniform", "low": _n(lo, kind), "high": _n(hi, kind)}
    if lo is not None and lo == hi:
        init = _n(lo, kind)
    elif lo is None:
        init = 0 if kind == "int" else 0.0
    return FieldGuess(name, kind, init, lo, hi, evidence="from --fields")


def _n(x: float | None, kind: str) -> float | int:
    assert x is not None
    return int(x) if kind == "int" else x


def blank_draft(name: str, actions: tuple[str, ...], fields: tuple[FieldGuess, ...]) -> PackDraft:
    if not actions:
        raise UserError("rlops init: no actions; expected --actions a,b,c (or --from-traces FILE)")
    for a in actions:
        if not IDENTIFIER.match(a):
            raise UserError(f"--actions: {a!r} is not an action name (letters, digits and _, not first a digit)")
    if len(set(actions)) != len(actions):
        raise UserError(f"--actions {','.join(actions)}: each action once")
    paths = [f.path for f in fields]
    if len(set(paths)) != len(paths):
        raise UserError(f"--fields: each field once, got {paths}")
    if CLOSED in paths:
        raise UserError(f"--fields: {CLOSED} is the field rlops init adds to end a case; choose another name")
    closed = FieldGuess(CLOSED, "bool", False, evidence="added: the last action closes the case")
    last = actions[-1]
    guesses = tuple(
        ActionGuess(
            a,
            0,
            f"not {CLOSED}",
            (),
            (),
            ({"set": {CLOSED: True}},) if a == last else (),
            a == last,
            None,
            0.0,
            {"mean": 100.0, "std": 10.0},
            bool(HUMAN.search(a)),
        )
        for a in actions
    )
    reward = placeholder_reward(last)
    return PackDraft(
        name,
        f"{name}: {len(actions)} actions; written by rlops init — describe the process here.",
        10,
        (*fields, closed),
        guesses,
        RulePolicyGuess(({"when": "true", "action": last},), 1.0, 0),
        reward,
        "",
    )


__all__ = ["blank_draft", "parse_field"]
