"""The KPIs a pack declares (``kpis:`` in scenario.yaml, parsed by :mod:`rlops.sandbox.spec_kpis`),
compiled with the DSL's expression compiler and evaluated on final states.

A KPI's value for one episode is its expression on the episode's last state; the episodes it
counts are those where its ``when`` holds there. :func:`compile_kpis` runs at pack load, so a bad
KPI (an unknown field, a string compared with a number, a rule ref rules.yaml lacks) fails the load
with the file, the line and the KPI's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, CompiledExpr, compile_expr
from rlops.sandbox.spec_types import KpiSpec

Tensor = torch.Tensor


@dataclass(frozen=True)
class Kpi:
    """A compiled KPI of a pack."""

    spec: KpiSpec
    value: CompiledExpr
    when: CompiledExpr | None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def is_rate(self) -> bool:
        """A bool expression: the KPI is the share of counted episodes where it holds."""
        return self.value.type.kind == "bool"


def compile_kpis(scenario: CompiledScenario, rules: dict[str, Any]) -> tuple[Kpi, ...]:
    """The scenario's KPIs, compiled; a :class:`PackError` naming the KPI on any mistake."""
    out = []
    for k in scenario.spec.kpis:
        where = f"kpis.{k.name}"
        try:
            value = compile_expr(k.expr, scenario.resolve)
            if value.type.kind not in ("bool", "num"):
                raise ExprError(f"a KPI is a number or a condition, got {value.type} in expression {k.expr!r}")
            when = None if k.when is None else compile_expr(k.when, scenario.resolve, want=BOOL)
        except ExprError as exc:
            raise PackError(scenario.file, k.line, where, f"illegal KPI expression: {exc}") from None
        if k.rule_ref is not None and k.rule_ref not in rules:
            raise PackError(
                scenario.file,
                k.line,
                f"{where}.rule_ref",
                f"dangling rule ref '{k.rule_ref}': not defined in rules.yaml",
            )
        out.append(Kpi(k, value, when))
    return tuple(out)


def evaluate_kpis(kpis: tuple[Kpi, ...], final_states: Tensor) -> dict[str, tuple[Tensor, Tensor]]:
    """Per KPI, ``(values, counted)``: each episode's value (float) on its final state ``[N, C]``
    and whether the episode counts (its ``when`` holds)."""
    out = {}
    n = final_states.shape[0]
    for k in kpis:
        values = k.value(final_states).float().expand(n)
        counted = (
            torch.ones(n, dtype=torch.bool, device=final_states.device)
            if k.when is None
            else k.when(final_states).bool().expand(n)
        )
        out[k.name] = (values, counted)
    return out


__all__ = ["Kpi", "compile_kpis", "evaluate_kpis"]
