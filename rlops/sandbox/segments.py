"""Segments of traffic for a staged roll-out: an expression over observable state fields.

A roll-out stage may serve its challenger to one segment of requests only
(``{segment: "user_profile.region == 'guangdong'", share: 1.0}``). The expression is compiled by
the scenario's whitelist compiler (:mod:`rlops.sandbox.expr`), and may read only fields that an
agent sees on every request and that keep their value through an episode: observed fields without
a ``visible_when`` condition that no action's effects set (the applicant's region, age or
employment — not a decision or a step counter). That makes the segment of an episode the same on
each of its requests, so routing by it is deterministic per episode, and the agent and the
roll-out's gates (on the trace rows' state columns) judge the same episodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, CompiledExpr, compile_expr
from rlops.sandbox.layout import StateLayout
from rlops.sandbox.precheck import scenario_file
from rlops.sandbox.spec import ScenarioSpec, parse_scenario
from rlops.sandbox.yaml_lines import load_yaml

if TYPE_CHECKING:
    from rlops.sandbox.expr_runtime import ArrayOps


def read_spec(pack_dir: str | Path) -> ScenarioSpec:
    """The parsed ``scenario.yaml`` of a pack folder (no reward module imported, nothing compiled)."""
    root = Path(pack_dir)
    path = scenario_file(root)
    try:
        return parse_scenario(load_yaml(path, root), str(path))
    except RecursionError:
        raise PackError(str(path), None, "", "the scenario is nested too deeply") from None


def segment_fields(spec: ScenarioSpec) -> set[str]:
    """The fields a segment expression may read (see the module)."""
    changed = {path for a in spec.actions for e in a.effects for path in e.set}
    return {f.path for f in spec.fields if f.observed and f.visible_when is None and f.path not in changed}


def compile_segment(spec: ScenarioSpec, source: str, ops: ArrayOps | None = None) -> CompiledExpr:
    """``source`` compiled to a boolean over state rows ``S[N, C]``; an :class:`ExprError` saying
    what is wrong (syntax, an unknown field, a field outside :func:`segment_fields`, not a condition).
    ``ops``: the array library (default torch; numpy for an agent)."""
    expr = compile_expr(source, StateLayout.of(spec).resolve, want=BOOL, ops=ops)
    allowed = segment_fields(spec)
    bad = sorted(expr.fields - allowed)
    if bad:
        raise ExprError(
            f"segment {source!r} reads {', '.join(bad)}: a segment may read only fields the agent sees on "
            f"every request and that keep their value through an episode ({', '.join(sorted(allowed))})"
        )
    return expr
