"""Parsing of the optional ``kpis:`` section of ``scenario.yaml``: the business KPIs of a pack.

Each KPI is an expression of the scenario DSL evaluated on the final state of every episode (a
bool counts as a rate, a number is averaged), optionally over the episodes where ``when`` holds::

    kpis:
      approval_rate:
        expr: "decision.approval_result in ['approved', 'approved_reduced']"
        better: higher
      default_rate:
        expr: hidden.defaulted
        when: "decision.approval_result in ['approved', 'approved_reduced']"
        better: lower
        description: share of approved loans that default

The expressions are compiled (and a ``rule_ref`` checked against rules.yaml) by
:mod:`rlops.sandbox.kpis`; the KPIs every pack has (completion, human takeover, handling time) are
built in and their names are reserved.
"""

from __future__ import annotations

import re
from typing import Any

from rlops.sandbox.spec_fields import _Ctx, _kind, _line
from rlops.sandbox.spec_types import MAX_KPIS, KpiSpec

#: KPIs of every episode, measured by the evaluation itself: a pack cannot declare these names.
BUILT_IN_KPIS = ("completion_rate", "human_takeover_rate", "handling_steps", "handling_ms")

_KPI_KEYS = {"expr", "when", "description", "better", "rule_ref"}
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


def parse_kpis(c: _Ctx, doc: dict[Any, Any]) -> tuple[KpiSpec, ...]:
    """The KPIs of a scenario (empty without ``kpis:``); a one-paragraph PackError with file and
    line on any mistake of structure (the expressions are compiled later)."""
    if "kpis" not in doc or doc["kpis"] is None:
        return ()
    node = c.mapping(doc["kpis"], doc, "kpis", "kpis")
    if len(node) > MAX_KPIS:
        raise c.err(doc, "kpis", "kpis", f"{len(node)} KPIs, over the limit of {MAX_KPIS}")
    out = []
    for name, spec in node.items():
        where = f"kpis.{name}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise c.err(
                node, name, where, "a KPI name is lower-case letters, digits and underscores, starting with a letter"
            )
        if name in BUILT_IN_KPIS:
            raise c.err(
                node, name, where, f"'{name}' is a built-in KPI of every pack (built in: {list(BUILT_IN_KPIS)})"
            )
        if isinstance(spec, str):  # the short form: `name: "expression"`
            spec = {"expr": spec}
        spec = c.mapping(spec, node, name, where)
        c.check_keys(spec, _KPI_KEYS, where)
        if "expr" not in spec:
            raise c.err(node, name, where, "missing required key 'expr' (an expression over the episode's final state)")
        for key in ("description", "better", "rule_ref"):
            if key in spec and not isinstance(spec[key], str):
                raise c.err(spec, key, f"{where}.{key}", f"type mismatch: expected text, got {_kind(spec[key])}")
        better = spec.get("better")
        if better is not None and better not in ("higher", "lower"):
            raise c.err(spec, "better", f"{where}.better", f"expected 'higher' or 'lower', got {better!r}")
        out.append(
            KpiSpec(
                name,
                spec["expr"],
                spec.get("when"),
                str(spec.get("description", "")),
                better,
                spec.get("rule_ref"),
                _line(node, name),
            )
        )
    return tuple(out)


__all__ = ["BUILT_IN_KPIS", "parse_kpis"]
