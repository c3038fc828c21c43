"""Parsing of the ``state:`` section of ``scenario.yaml`` (fields and their initial distributions),
and the error context and value checks the rest of :mod:`rlops.sandbox.spec` shares."""

from __future__ import annotations

import math
from typing import Any

from rlops.sandbox.errors import PackError
from rlops.sandbox.outcome_params import FIT_KEYS
from rlops.sandbox.spec_types import (
    DISTS,
    FIELD_TYPES,
    MAX_ENUM_VALUES,
    MAX_MAGNITUDE,
    RESERVED_GROUPS,
    FieldSpec,
    InitSpec,
)
from rlops.sandbox.yaml_lines import LDict, LList


class _Ctx:
    """Carries the file name for error construction."""

    def __init__(self, file: str):
        self.file = file

    def err(self, node: Any, key: Any, path: str, msg: str) -> PackError:
        line = None
        if isinstance(node, LDict):
            line = node.line_of(key) if key is not None else node.line
        elif isinstance(node, LList):
            line = node.line_of(key) if isinstance(key, int) else node.line
        return PackError(self.file, line, path, msg)

    def mapping(self, node: Any, parent: Any, key: Any, path: str) -> dict[Any, Any]:
        if not isinstance(node, dict):
            raise self.err(parent, key, path, f"expected a mapping, got {_kind(node)}")
        return node

    def check_keys(self, node: dict[Any, Any], allowed: set[str], path: str) -> None:
        for k in node:
            if k not in allowed:
                raise self.err(
                    node, k, f"{path}.{k}" if path else str(k), f"unknown key '{k}' (expected one of {sorted(allowed)})"
                )

    def number(self, node: dict[Any, Any], key: str, path: str) -> float:
        v = node[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(node, key, f"{path}.{key}", f"type mismatch: expected a number, got {_kind(v)}")
        if not _finite(v):
            raise self.err(
                node,
                key,
                f"{path}.{key}",
                f"bad value: expected a finite number (at most {MAX_MAGNITUDE:g} in size), got {_kind(v)}",
            )
        return float(v)


def _line(node: Any, key: Any = None) -> int | None:
    """Source line of ``node`` (or of its ``key``); None for values that did not come from YAML
    (a calibration overlay, a generated pack)."""
    if key is not None and isinstance(node, (LDict, LList)):
        return node.line_of(key)
    line: int | None = getattr(node, "line", None)
    return line


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"bool {v}"
    if isinstance(v, int) and abs(v) > 10**20:
        return f"a number of {len(str(abs(v)))} digits"
    if isinstance(v, (int, float)):
        return f"number {v}"
    if isinstance(v, str):
        return f"string {v!r}"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return type(v).__name__


_FIELD_KEYS = {
    "type",
    "min",
    "max",
    "unit",
    "values",
    "init",
    "observed",
    "visible_when",
    "description",
    "fit",
    "default",
}


def _parse_init(c: _Ctx, node: Any, parent: Any, key: Any, path: str) -> InitSpec:
    if node is None or (isinstance(node, dict) and not node):
        raise c.err(parent, key, path, "expected an initial value, a distribution or an expr, got nothing")
    if not isinstance(node, dict):
        return InitSpec(value=node, line=_line(parent, key))
    c.check_keys(node, {"dist", "expr", "value", *{p for ps in DISTS.values() for p in ps}}, path)
    if "expr" in node:
        return InitSpec(expr=node["expr"], line=_line(node))
    if "value" in node:
        return InitSpec(value=node["value"], line=_line(node))
    dist = node.get("dist")
    if dist not in DISTS:
        raise c.err(
            node,
            "dist" if "dist" in node else None,
            path,
            f"unknown distribution {dist!r} (expected one of {sorted(DISTS)}, or 'value'/'expr')",
        )
    params = {}
    for p in DISTS[dist]:
        if p not in node:
            raise c.err(node, None, path, f"distribution '{dist}' needs parameter '{p}'")
        params[p] = node[p]
    extra = set(node) - {"dist", *DISTS[dist]}
    if extra:
        k = sorted(extra)[0]
        raise c.err(
            node, k, f"{path}.{k}", f"unknown key '{k}' for distribution '{dist}' (expected {list(DISTS[dist])})"
        )
    return InitSpec(dist=dist, params=params, line=_line(node))


def _parse_field(c: _Ctx, node: dict[Any, Any], parent: dict[Any, Any], path: str) -> FieldSpec:
    c.check_keys(node, _FIELD_KEYS, path)
    t = node.get("type")
    if t not in FIELD_TYPES:
        raise c.err(
            node,
            "type" if "type" in node else None,
            path,
            f"unknown field type {t!r} (expected one of {list(FIELD_TYPES)})",
        )
    lo = c.number(node, "min", path) if "min" in node else None
    hi = c.number(node, "max", path) if "max" in node else None
    if t in ("enum", "bool") and (lo is not None or hi is not None):
        raise c.err(node, "min" if lo is not None else "max", path, f"a {t} field takes no min/max")
    if lo is not None and hi is not None and lo > hi:
        raise c.err(node, "min", path, f"bad range: min {lo:g} is greater than max {hi:g}")
    values: tuple[str, ...] = ()
    if t == "enum":
        vals = node.get("values")
        if not isinstance(vals, list) or not vals or not all(isinstance(v, str) for v in vals):
            raise c.err(
                node,
                "values" if "values" in node else None,
                path,
                "an enum field needs 'values': a non-empty list of names",
            )
        if len(vals) > MAX_ENUM_VALUES:
            raise c.err(node, "values", path, f"an enum field takes at most {MAX_ENUM_VALUES} values, got {len(vals)}")
        if len(set(vals)) != len(vals):
            raise c.err(node, "values", path, "enum values must be unique")
        values = tuple(vals)
    if "init" not in node:
        raise c.err(node, None, path, "missing 'init' (a value, a distribution or an expr)")
    init = _parse_init(c, node["init"], node, "init", f"{path}.init")
    _check_init_value(c, node, "init", f"{path}.init", t, lo, hi, values, init)
    observed = node.get("observed", True)
    if not isinstance(observed, bool):
        raise c.err(node, "observed", path, f"type mismatch: 'observed' expects a bool, got {_kind(observed)}")
    if "fit" in node:
        _check_fit(c, node, path, t, hi, observed)
    default = node.get("default")
    if "default" in node:
        if default is None or isinstance(default, (dict, list)):
            raise c.err(node, "default", f"{path}.default", f"expected one value of the field, got {_kind(default)}")
        _check_init_value(c, node, "default", f"{path}.default", t, lo, hi, values, InitSpec(value=default))
    return FieldSpec(
        path=path,
        type=t,
        min=lo,
        max=hi,
        unit=node.get("unit"),
        values=values,
        init=init,
        observed=observed,
        visible_when=node.get("visible_when"),
        description=str(node.get("description", "")),
        line=_line(parent, path.rsplit(".", 1)[-1]),
        default=default,
    )


def _check_fit(c: _Ctx, node: dict[Any, Any], path: str, t: str, hi: float | None, observed: bool) -> None:
    """``fit: {outcome, event_when, by}`` — a fittable hidden probability (rlops.sandbox.outcome_params)."""
    fit = c.mapping(node["fit"], node, "fit", f"{path}.fit")
    c.check_keys(fit, FIT_KEYS, f"{path}.fit")
    if t != "float" or hi != 1 or observed:
        raise c.err(
            node,
            "fit",
            f"{path}.fit",
            "only a hidden (observed: false) float probability field with max: 1 can be fitted from outcomes",
        )
    if not isinstance(fit.get("outcome"), str):
        raise c.err(
            fit,
            "outcome" if "outcome" in fit else None,
            f"{path}.fit.outcome",
            "expected the name of the reward component whose score reveals the outcome on a live row",
        )
    if fit.get("event_when", "negative") not in ("negative", "positive"):
        raise c.err(
            fit,
            "event_when",
            f"{path}.fit.event_when",
            "expected 'negative' or 'positive' (the sign of the component's score when the event happened)",
        )
    by = fit.get("by")
    if not isinstance(by, list) or not by or not all(isinstance(b, str) for b in by):
        raise c.err(
            fit,
            "by" if "by" in fit else None,
            f"{path}.fit.by",
            "expected a non-empty list of observed field paths (one factor per quarter or value of each)",
        )


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: int | float) -> bool:
    """YAML spells NaN and infinity ``.nan`` / ``.inf``; a number beyond :data:`MAX_MAGNITUDE`
    is no better (the state is float32)."""
    try:
        return math.isfinite(float(v)) and abs(float(v)) <= MAX_MAGNITUDE
    except OverflowError:
        return False


def _check_init_value(
    c: _Ctx,
    node: dict[Any, Any],
    key: str,
    where: str,
    t: str,
    lo: float | None,
    hi: float | None,
    values: tuple[str, ...],
    init: InitSpec,
) -> None:
    """Check an initial value or distribution against its field (``node[key]`` holds it)."""
    if init.value is not None:
        v = init.value
        if t == "bool" and not isinstance(v, bool):
            raise c.err(node, key, where, f"type mismatch: expected a bool, got {_kind(v)}")
        if t == "enum" and v not in values:
            raise c.err(node, key, where, f"unknown enum value {v!r} (expected one of {list(values)})")
        if t in ("int", "float"):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise c.err(node, key, where, f"type mismatch: expected a number, got {_kind(v)}")
            if not _finite(v):
                raise c.err(
                    node,
                    key,
                    where,
                    f"bad value: expected a finite number (at most {MAX_MAGNITUDE:g} in size), got {_kind(v)}",
                )
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise c.err(
                    node,
                    key,
                    where,
                    f"bad range: {'default' if key == 'default' else 'initial'} value {v:g} outside [{lo}, {hi}]",
                )
    if init.dist == "categorical":
        if t != "enum":
            raise c.err(node, key, where, f"a categorical distribution needs an enum field, not {t}")
        probs = init.params["probs"]
        if isinstance(probs, dict):
            unknown = [k for k in probs if k not in values]
            if unknown:
                raise c.err(
                    node, key, where, f"unknown enum value {unknown[0]!r} in probs (expected one of {list(values)})"
                )
        elif not (isinstance(probs, list) and len(probs) == len(values)):
            raise c.err(
                node,
                key,
                where,
                f"probs needs {len(values)} numbers (one per enum value) or a mapping value → probability",
            )
        weights = list(probs.values()) if isinstance(probs, dict) else probs
        if not all(_is_num(w) and _finite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise c.err(node, key, where, "bad range: probs must be non-negative numbers, not all zero")
    for k, v in init.params.items():
        if k != "probs" and not (_is_num(v) or isinstance(v, str)):
            raise c.err(
                node,
                key,
                where,
                f"type mismatch: distribution parameter '{k}' expects a number or an expression, got {_kind(v)}",
            )
        if _is_num(v) and not _finite(v):
            raise c.err(
                node,
                key,
                where,
                f"bad value: distribution parameter '{k}' must be a finite number "
                f"(at most {MAX_MAGNITUDE:g} in size), got {_kind(v)}",
            )
    num = {k: float(v) for k, v in init.params.items() if _is_num(v)}
    if init.dist == "bernoulli" and "p" in num and not 0.0 <= num["p"] <= 1.0:
        raise c.err(node, key, where, f"bad range: probability p {num['p']:g} must be within [0, 1]")
    for k in ("std", "sigma"):
        if num.get(k, 0.0) < 0:
            raise c.err(node, key, where, f"bad range: {k} {num[k]:g} must be >= 0")
    if num.get("low", -float("inf")) > num.get("high", float("inf")):
        raise c.err(node, key, where, f"bad range: low {num['low']:g} is greater than high {num['high']:g}")
    if init.dist == "bernoulli" and t != "bool":
        raise c.err(node, key, where, f"a bernoulli distribution needs a bool field, not {t}")
    if init.dist in ("normal", "lognormal", "uniform") and t not in ("int", "float"):
        raise c.err(node, key, where, f"distribution '{init.dist}' needs an int or float field, not {t}")


def _walk_fields(c: _Ctx, node: dict[Any, Any], prefix: str, out: list[FieldSpec]) -> None:
    for key, val in node.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise c.err(node, key, f"{prefix}{key}", f"field name {key!r} must be an identifier")
        path = f"{prefix}{key}"
        if prefix == "" and key in RESERVED_GROUPS:
            raise c.err(node, key, path, f"'{key}' is reserved for built-in episode variables")
        val = c.mapping(val, node, key, path)
        if "type" in val and not isinstance(val.get("type"), dict):
            out.append(_parse_field(c, val, node, path))
        else:
            _walk_fields(c, val, path + ".", out)
