"""Machine-checkable rule constraints: ``rules.yaml`` may state, next to a rule's prose, what a
transition must satisfy, so the stress test can check a reward function against the rule itself.

::

    rules:
      CREDIT_POLICY_v2.1_3.4:
        title: Amount cap
        text: ...
        constraints:
          - "decision.approved_amount <= user_profile.income_monthly * 5"
          - "decision.approved_amount <= user_profile.income_monthly * 3 when user_profile.credit_score < 550"
          - {check: "...", when: "...", actions: [approve]}   # the long form

A constraint is a boolean expression over one transition: a bare field path is the state *after*
the action, ``before.<path>`` the state before it, and ``action`` the action taken (an enum of the
scenario's action names). ``X when Y`` (or ``when:``) limits it to transitions where ``Y`` holds;
``actions:`` to transitions of those actions. Expressions are compiled with the sandbox's
whitelist compiler (:mod:`rlops.sandbox.expr`) to batched tensor ops — never evaluated as Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch

from rlops.sandbox.compile import CompiledScenario
from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, CompiledExpr, ExprType, compile_expr

Tensor = torch.Tensor
_WHEN = re.compile(r"\s+when\s+")
BEFORE = "before."


@dataclass(frozen=True)
class RuleConstraint:
    """One constraint of one rule, compiled over ``transition_matrix(...)`` rows."""

    rule: str
    title: str
    source: str
    check: CompiledExpr
    when: CompiledExpr | None
    actions: tuple[str, ...]
    line: int | None

    def violated(self, X: Tensor, action_names: tuple[str, ...]) -> Tensor:
        """``[N]`` bool: the transition is in scope (``when``, ``actions``) and breaks ``check``."""
        scope = torch.ones(X.shape[0], dtype=torch.bool, device=X.device)
        if self.when is not None:
            scope &= self.when(X)
        if self.actions:
            codes = X[:, -1]
            allowed = torch.zeros_like(scope)
            for name in self.actions:
                allowed |= codes == float(action_names.index(name))
            scope &= allowed
        broken: Tensor = ~self.check(X)
        return scope & broken


def transition_matrix(S: Tensor, S_next: Tensor, actions: Tensor) -> Tensor:
    """``[S_next | S | action]``: the rows the compiled constraints read (action −1 = not executed)."""
    return torch.cat([S_next, S, actions.to(S.dtype).unsqueeze(1)], dim=1)


def _resolver(scenario: CompiledScenario) -> Any:
    n = scenario.n_cols
    action_type = ExprType("enum", scenario.action_names, "action")

    def resolve(path: str) -> tuple[int, ExprType] | None:
        if path == "action":
            return 2 * n, action_type
        if path.startswith(BEFORE):
            found = scenario.resolve(path[len(BEFORE) :])
            return None if found is None else (found[0] + n, found[1])
        return scenario.resolve(path)

    return resolve


def _split(raw: Any) -> tuple[Any, Any, Any]:
    """``(check, when, actions)`` of a constraint written as a string or a mapping."""
    if isinstance(raw, str):
        parts = _WHEN.split(raw.strip(), maxsplit=1)
        return parts[0], (parts[1] if len(parts) == 2 else None), None
    if isinstance(raw, dict):
        unknown = set(raw) - {"check", "when", "actions"}
        if unknown or "check" not in raw:
            raise ExprError(f"a constraint mapping takes 'check' (required), 'when' and 'actions'; got {sorted(raw)}")
        return raw["check"], raw.get("when"), raw.get("actions")
    raise ExprError(f"expected a constraint string ('<check> [when <condition>]') or a mapping, got {raw!r}")


def parse_constraints(rules: dict[str, Any], scenario: CompiledScenario, file: str) -> list[RuleConstraint]:
    """Every rule's ``constraints:``, compiled; a bad one is a :class:`PackError` at its line."""
    resolve = _resolver(scenario)
    out: list[RuleConstraint] = []
    for rid, body in rules.items():
        raw_list = body.get("constraints") if isinstance(body, dict) else None
        if raw_list is None:
            continue
        line_of = getattr(body, "line_of", lambda _k: None)
        if not isinstance(raw_list, list):
            raise PackError(
                file,
                line_of("constraints"),
                f"rules.{rid}.constraints",
                "expected a list of constraints ('<check> [when <condition>]')",
            )
        for i, raw in enumerate(raw_list):
            line = getattr(raw_list, "line_of", lambda _i: None)(i) or line_of("constraints")
            where = f"rules.{rid}.constraints[{i}]"
            try:
                check_src, when_src, actions = _split(raw)
                check = compile_expr(check_src, resolve, want=BOOL)
                when = None if when_src is None else compile_expr(when_src, resolve, want=BOOL)
            except ExprError as exc:
                raise PackError(file, line, where, f"illegal constraint: {exc}") from None
            acts = tuple(actions or ())
            bad = [a for a in acts if a not in scenario.action_names]
            if bad:
                raise PackError(file, line, where, f"unknown action(s) {bad} (actions: {list(scenario.action_names)})")
            source = raw if isinstance(raw, str) else f"{check_src}" + (f" when {when_src}" if when_src else "")
            out.append(RuleConstraint(rid, str(body.get("title", rid)), str(source).strip(), check, when, acts, line))
    return out


__all__ = ["RuleConstraint", "parse_constraints", "transition_matrix", "BEFORE"]
