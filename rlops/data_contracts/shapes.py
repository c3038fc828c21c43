"""Shapes of the JSON fields of a trace row, checked and normalised in one place.

A JSON column that a page or a tool renders must hold one known shape, not merely "parse". The
contract names a column's shape (:attr:`rlops.data_contracts.schema.ColumnSpec.shape`); validation
turns every accepted value into the canonical form and quarantines any other with the reason.

``reward_breakdown`` — canonical form, as the reward runtime writes it::

    {"total": <float>, "breakdown": [{"component": <str>, "score": <float>,
                                      "reason": <str|null>, "rule_ref": <str|null>}, ...]}

Accepted inputs: that form; a list of ``{component, score[, reason][, rule_ref]}`` objects (what the
agent SDK's ``Episode`` writes); a flat object ``{<component>: <score>, ...}`` (an optional
``total`` key is the total). A missing ``total`` is the sum of the scores. Scores and the total are
finite numbers (never booleans); components are non-empty text; no other keys.

Readers of stored rows (``rlops audit``, ``replay``, the console) call :func:`read_breakdown`, which
never raises: a row stored before this check, or written around it, renders as "no breakdown".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

MAX_COMPONENTS = 256
MAX_TEXT = 500
_ITEM_KEYS = frozenset({"component", "score", "reason", "rule_ref"})


class ShapeError(ValueError):
    """A value that is not of its column's shape; the message says what was expected."""


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ShapeError(
            f"{what} is {json.dumps(value, default=str)[:60]} ({type(value).__name__}); expected a finite number"
        )
    out = float(value)
    if not math.isfinite(out):
        raise ShapeError(f"{what} is {value}; expected a finite number")
    return out


def _text(value: Any, what: str, optional: bool) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not optional and not value.strip()):
        raise ShapeError(
            f"{what} is {json.dumps(value, default=str)[:60]}; expected "
            f"{'text or null' if optional else 'non-empty text'}"
        )
    if len(value) > MAX_TEXT:
        raise ShapeError(f"{what} is {len(value)} characters long; expected at most {MAX_TEXT}")
    return value


def _item(obj: Any, i: int) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise ShapeError(
            f"item {i} is a {type(obj).__name__}; expected an object {{component, score, reason, rule_ref}}"
        )
    unknown = sorted(set(obj) - _ITEM_KEYS)
    if unknown:
        raise ShapeError(f"item {i} has unknown key(s) {unknown}; expected only {sorted(_ITEM_KEYS)}")
    if "component" not in obj or "score" not in obj:
        raise ShapeError(
            f"item {i} lacks {'component' if 'component' not in obj else 'score'}; "
            "expected {component, score[, reason][, rule_ref]}"
        )
    return {
        "component": _text(obj["component"], f"item {i} component", False),
        "score": _number(obj["score"], f"item {i} score"),
        "reason": _text(obj.get("reason"), f"item {i} reason", True),
        "rule_ref": _text(obj.get("rule_ref"), f"item {i} rule_ref", True),
    }


def normalise_breakdown(value: Any) -> dict[str, Any]:
    """The canonical form of a reward breakdown (see the module docstring); :class:`ShapeError`
    when ``value`` (an object, or JSON text of one) is of no accepted shape."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ShapeError(f"not JSON ({exc})") from None
    total: float | None = None
    if isinstance(value, dict) and "breakdown" in value:
        unknown = sorted(set(value) - {"total", "breakdown"})
        if unknown:
            raise ShapeError(f"unknown key(s) {unknown} beside 'breakdown'; expected only 'total' and 'breakdown'")
        if value.get("total") is not None:
            total = _number(value["total"], "total")
        items = value["breakdown"]
        if not isinstance(items, list):
            raise ShapeError(
                f"'breakdown' is a {type(items).__name__}; expected a list of {{component, score, reason, rule_ref}}"
            )
    elif isinstance(value, dict):
        flat = dict(value)
        if "total" in flat:
            total = _number(flat.pop("total"), "total")
        items = [{"component": k, "score": _number(v, f"component {k!r}")} for k, v in flat.items()]
    elif isinstance(value, list):
        items = value
    else:
        raise ShapeError(
            f"a {type(value).__name__}; expected {{total, breakdown: [...]}}, a list of "
            "{component, score, reason, rule_ref} or {component: score}"
        )
    if len(items) > MAX_COMPONENTS:
        raise ShapeError(f"{len(items)} components; expected at most {MAX_COMPONENTS}")
    parts = [_item(obj, i) for i, obj in enumerate(items)]
    if total is None:
        total = round(sum(p["score"] for p in parts), 9)
    return {"total": total, "breakdown": parts}


def displayable_items(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` already shaped as ``{component: text, score: finite float, reason: text,
    rule_ref: text or None}`` (as the console's reader shapes untrusted rows) when
    :func:`read_breakdown` would accept them, else ``[]`` — the same verdict without validating
    each item a second time."""
    if len(items) > MAX_COMPONENTS:
        return []
    for item in items:
        name, reason, ref = item["component"], item["reason"], item["rule_ref"]
        if (
            not name.strip()
            or len(name) > MAX_TEXT
            or len(reason) > MAX_TEXT
            or (ref is not None and len(ref) > MAX_TEXT)
        ):
            return []
    return items


def breakdown_text(value: Any) -> str:
    """:func:`normalise_breakdown` as compact JSON text (how the trace store keeps it)."""
    return json.dumps(normalise_breakdown(value), separators=(",", ":"))


def read_breakdown(value: Any) -> list[dict[str, Any]]:
    """The components of a stored breakdown for display: ``[]`` when it is missing or of no
    accepted shape (never raises)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    try:
        components: list[dict[str, Any]] = normalise_breakdown(value)["breakdown"]
        return components
    except (ShapeError, TypeError, RecursionError):
        return []


def _json_object(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ShapeError(f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ShapeError(f"a {type(value).__name__}; expected a JSON object")
    return json.dumps(value, separators=(",", ":"), default=str)


#: Shape name → normaliser to canonical text (raises :class:`ShapeError`).
SHAPES: dict[str, Callable[[Any], str]] = {"reward_breakdown": breakdown_text, "json_object": _json_object}
