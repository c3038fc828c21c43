"""Tunable constants of a reward module: the ``PARAMS`` declaration.

A reward module names the module-level numeric constants a business expert may change, with the
range the change must stay in and the rule it implements::

    LOW_SCORE_CAP = 3.0   # monthly incomes, below a credit score of 550

    PARAMS = {
        "LOW_SCORE_CAP": {"range": [1.0, 5.0], "rule_ref": "CREDIT_POLICY_v2.1_3.4",
                          "description": "amount cap below a credit score of 550, in monthly incomes"},
    }

Each key is a constant assigned once at the top level as ``NAME = <number>``: the components keep
reading a plain constant, and a what-if (:mod:`rlops.whatif`) changes exactly that literal in the
source, so a derived module differs from its base in that line only. Objective weights are tunable
without a declaration (``WEIGHTS``, within :data:`WEIGHT_RANGE`).
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError

#: The range an objective weight of a what-if must lie in: a negative weight would reward what the
#: objective penalises, and one beyond 10× the unit weight drowns every other objective.
WEIGHT_RANGE = (0.0, 10.0)

_PARAM_KEYS = {"range", "rule_ref", "description"}


@dataclass(frozen=True)
class TunableParam:
    """One constant a reward module declares tunable in ``PARAMS``."""

    name: str
    """The module-level constant (``LOW_SCORE_CAP``)."""
    value: float
    """Its value in the module as written."""
    low: float
    """Smallest value a change may set."""
    high: float
    """Largest value a change may set."""
    rule_ref: str | None
    """The rule of rules.yaml the constant implements (None: none named)."""
    description: str
    """What the constant means, in the business's words."""
    line: int
    """The line of the module that assigns the constant."""


def numeric_constants(source: str) -> dict[str, tuple[float, ast.expr]]:
    """Top-level ``NAME = <number>`` assignments (a negative number too): name → (value, value node)."""
    out: dict[str, tuple[float, ast.expr]] = {}
    for node in ast.parse(source).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            continue
        value = literal_number(node.value)
        if value is not None:
            out[node.targets[0].id] = (value, node.value)
    return out


def literal_number(node: ast.expr) -> float | None:
    """The number a literal node spells (``3``, ``0.35``, ``-1.5``), else None."""
    sign = 1.0
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        sign = -1.0 if isinstance(node.op, ast.USub) else 1.0
        node = node.operand
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return sign * float(node.value)
    return None


def _finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def parse_params(path: Path, module: Any, source: str, rules: dict[str, Any]) -> tuple[TunableParam, ...]:
    """The module's ``PARAMS`` declaration, checked; a :class:`PackError` at the line of ``PARAMS``
    (or of the constant) on any mistake. A module without ``PARAMS`` declares nothing."""
    raw = getattr(module, "PARAMS", None)
    if raw is None:
        return ()
    m = re.search(r"^PARAMS\s*[:=]", source, re.M)
    at = None if m is None else source.count("\n", 0, m.start()) + 1

    def bad(name: str, msg: str, line: int | None = at) -> PackError:
        return PackError(str(path), line, f"PARAMS.{name}" if name else "PARAMS", msg)

    if not isinstance(raw, dict):
        raise bad("", f"expected a mapping constant name → {{range, rule_ref, description}}, got {type(raw).__name__}")
    constants = numeric_constants(source)
    out = []
    for name, decl in raw.items():
        if not isinstance(name, str) or name not in constants:
            raise bad(
                str(name),
                f"{name!r} is not a module-level constant assigned a number (`{name} = 1.0`); "
                f"tunable constants of this module: {sorted(constants) or 'none'}",
            )
        if not isinstance(decl, dict) or set(decl) - _PARAM_KEYS:
            raise bad(
                name, f"expected {{'range': [low, high], 'rule_ref': rule id, 'description': text}}, got {decl!r}"
            )
        rng = decl.get("range")
        if not (
            isinstance(rng, (list, tuple))
            and len(rng) == 2
            and all(_finite_number(x) for x in rng)
            and float(rng[0]) <= float(rng[1])
        ):
            raise bad(name, f"range: expected [low, high], two finite numbers with low <= high, got {rng!r}")
        value, node = constants[name]
        line = node.lineno
        if not float(rng[0]) <= value <= float(rng[1]):
            raise bad(name, f"the constant's value {value:g} lies outside its declared range {list(rng)}", line)
        ref = decl.get("rule_ref")
        if ref is not None and ref not in rules:
            raise bad(name, f"dangling rule ref {ref!r}: not defined in rules.yaml")
        desc = decl.get("description", "")
        if not isinstance(desc, str):
            raise bad(name, f"description: expected text, got {type(desc).__name__}")
        out.append(TunableParam(name, value, float(rng[0]), float(rng[1]), ref, desc, line))
    return tuple(sorted(out, key=lambda p: p.line))


__all__ = ["WEIGHT_RANGE", "TunableParam", "literal_number", "numeric_constants", "parse_params"]
