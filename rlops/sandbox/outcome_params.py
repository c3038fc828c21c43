"""Fittable parameters of the hidden dynamics: multiplicative factors on a hidden probability field.

A hidden field of a scenario may declare ``fit:`` (see docs/scenario-dsl.md, "Fittable outcome
parameters"): the recalibration then estimates, by maximum likelihood from live outcomes, factors
``θ`` that scale the field's probability for some applicants (``min(1, p · θ)`` where a condition
holds), and writes them into the calibration (``outcomes:``) — never into the pack's files nor the
production stand-in. This module owns the rewriting of a field's expressions, which the calibration
overlay and the timeline's outcome events share: every place the scenario computes the field (its
``init`` ``expr``, a Bernoulli ``p``, each action effect that sets it) is rewritten alike.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

FIT_KEYS = {"outcome", "event_when", "by"}


class OutcomeFieldError(ValueError):
    """The field to rewrite does not exist or has no expression."""


def scaled(source: Any, factor: float, when: str | None, bounded: bool) -> str:
    """``source`` times ``factor`` (only where ``when`` holds), capped at 1 when ``bounded``."""
    base = f"({' '.join(str(source).split())})"
    scale = f"(1 + {float(factor) - 1.0!r} * ({when}))" if when else repr(float(factor))
    out = f"{base} * {scale}"
    return f"min(1.0, {out})" if bounded else out


def field_node(doc: dict[str, Any], path: str) -> dict[str, Any]:
    node: Any = doc["state"]
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise OutcomeFieldError(f"no state field {path!r} in the scenario")
        node = node[part]
    field: dict[str, Any] = node
    return field


def rewrite_field(doc: dict[str, Any], path: str, rewrite: Callable[[Any, bool], str]) -> int:
    """Apply ``rewrite(source, bounded)`` to every expression that computes ``path`` in ``doc``
    (in place); returns how many were rewritten (an error when none)."""
    node = field_node(doc, path)
    bounded = node.get("max") == 1
    hits = 0
    init = node.get("init")
    if isinstance(init, dict) and "expr" in init:
        init["expr"], hits = rewrite(init["expr"], bounded), hits + 1
    elif isinstance(init, dict) and init.get("dist") == "bernoulli":
        init["p"], hits = rewrite(init["p"], True), hits + 1
    for action in doc.get("actions") or []:
        for eff in action.get("effects") or []:
            sets = eff.get("set") if isinstance(eff, dict) else None
            if isinstance(sets, dict) and path in sets:
                sets[path], hits = rewrite(sets[path], bounded), hits + 1
    if not hits:
        raise OutcomeFieldError(
            f"field {path!r} has no expression to change (neither an init expr, a bernoulli p, "
            "nor an action effect that sets it)"
        )
    return hits


def apply_outcome_factors(doc: dict[str, Any], outcomes: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """A copy of ``doc`` with fitted factors ``{path: [{factor, when}, ...]}`` applied in order."""
    out = copy.deepcopy(doc)
    for path, factors in (outcomes or {}).items():
        for f in factors:

            def rewrite(src: Any, bounded: bool, f: dict[str, Any] = f) -> str:
                return scaled(src, f["factor"], f.get("when"), bounded)

            rewrite_field(out, path, rewrite)
    return out


def fittable_fields(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{path: fit spec}`` of every field that declares ``fit:``."""
    out: dict[str, dict[str, Any]] = {}

    def walk(node: dict[str, Any], prefix: str) -> None:
        for k, v in node.items():
            if not isinstance(v, dict):
                continue
            path = f"{prefix}.{k}" if prefix else k
            if "type" in v:
                if isinstance(v.get("fit"), dict):
                    out[path] = v["fit"]
            else:
                walk(v, path)

    walk(doc.get("state") or {}, "")
    return out
