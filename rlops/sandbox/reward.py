"""Reward functions: the authoring API of a pack's versioned reward modules, whose components carry
rule references, the batched transition a component scores, and the loaded :class:`RewardFunction`.

A reward module in a pack looks like::

    from rlops.sandbox.reward import component, rule_ref

    WEIGHTS = {"risk": 1.0, "compliance": 1.0}   # per objective
    WEIGHT_SCHEDULE = [(200_000, {"compliance": 1.5})]  # optional: from env step N on
    CLIP = 5.0                                    # |total| bound
    REPEAT_PENALTY = {"penalty": 0.2, "after": 2, "rule_ref": "OPS_2.3"}

    @component(objective="compliance", reason="approved amount above the income cap")
    @rule_ref("CREDIT_POLICY_3.4")
    def amount_cap(t):
        approved = t.action.isin(["approve", "approve_reduced"])
        cap = t.s.user_profile.income_monthly * 3
        return torch.where(approved & (t.ns.decision.approved_amount > cap), -0.4, 0.0)

Each component receives a :class:`Transition` of the whole batch and returns one score per
episode, so a reward costs array ops. :func:`rlops.sandbox.reward_loading.load_reward_fn` imports
and checks a module; :class:`rlops.sandbox.reward_runtime.RewardRuntime` weights, sums, clips (the
clip shows up as its own ``clip`` entry so the breakdown always sums to the total), adds the
repeated-action penalty and external ``reward_hook`` scores, and holds back components with
``settle_on`` until that action happens (or the episode ends). The version of a reward function is
the sha256 of its source.

In a scenario with ``roles:``, ``@component(role="underwriter")`` scores only the steps where that
role acts; components without a role are the team's and score every step (see ``by_role``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, TypeVar

import torch

from rlops.sandbox.reward_params import TunableParam
from rlops.sandbox.reward_signals import SignalWeight, bind_values

Tensor = torch.Tensor
_Fn = TypeVar("_Fn", bound=Callable[..., Any])


# ---- authoring API ---------------------------------------------------------------------------
def rule_ref(ref: str) -> Callable[[_Fn], _Fn]:
    """Tie a reward component to a clause of the pack's ``rules.yaml``."""

    def deco(fn: _Fn) -> _Fn:
        fn.__rule_ref__ = ref  # type: ignore[attr-defined]  # the marker the runtime reads
        return fn

    return deco


def component(
    objective: str = "default", reason: str | None = None, settle_on: str | None = None, role: str | None = None
) -> Callable[[_Fn], _Fn]:
    """Mark a function as a reward component of ``objective``. ``reason`` is the sentence shown
    in breakdowns (default: the docstring's first line). ``settle_on`` names an action: the
    component's scores accumulate and are paid when that action runs or the episode ends.
    ``role`` (scenarios with ``roles:``) makes it that role's own: it scores only that role's steps."""

    def deco(fn: _Fn) -> _Fn:
        fn.__component__ = {  # type: ignore[attr-defined]  # the marker the runtime finds components by
            "objective": objective,
            "settle_on": settle_on,
            "role": role,
            "reason": reason or (inspect.getdoc(fn) or fn.__name__).splitlines()[0],
        }
        return fn

    return deco


class EnumColumn:
    """An enum column: compare with value names (``col == 'approved'``, ``col.isin([...])``)."""

    def __init__(self, codes: Tensor, values: tuple[str, ...], name: str):
        self.codes, self.values, self.name = codes, values, name

    def _code(self, value: str) -> float:
        if value not in self.values:
            raise KeyError(f"'{value}' is not a value of {self.name} (expected one of {list(self.values)})")
        return float(self.values.index(value))

    def __eq__(self, value: object) -> Tensor:  # type: ignore[override]  # an enum column compares element-wise, like a tensor
        return self.codes == self._code(str(value))

    def __ne__(self, value: object) -> Tensor:  # type: ignore[override]  # an enum column compares element-wise, like a tensor
        return self.codes != self._code(str(value))

    def isin(self, values: list[str]) -> Tensor:
        out = torch.zeros_like(self.codes, dtype=torch.bool)
        for v in values:
            out = out | (self.codes == self._code(v))
        return out

    __hash__ = None  # type: ignore[assignment]  # element-wise equality: not hashable


class StateView:
    """Attribute access to state columns: ``t.s.user_profile.credit_score`` → tensor ``[N]``."""

    def __init__(self, S: Tensor, layout: ColumnLayout, prefix: str = ""):
        self._S, self._layout, self._prefix = S, layout, prefix

    def __getattr__(self, name: str) -> Any:
        path = f"{self._prefix}{name}"
        col = self._layout.columns.get(path)
        if col is None:
            if path in self._layout.groups:
                return StateView(self._S, self._layout, path + ".")
            raise AttributeError(f"unknown state field '{path}'")
        kind, values = self._layout.kinds[path]
        x = self._S[:, col]
        if kind == "bool":
            return x > 0.5
        if kind == "enum":
            return EnumColumn(x, values, path)
        return x

    def __getitem__(self, path: str) -> Any:
        head, _, rest = path.rpartition(".")
        view = self
        for part in head.split(".") if head else []:
            view = getattr(view, part)
        return getattr(view, rest)


@dataclass(frozen=True)
class ColumnLayout:
    columns: dict[str, int]
    kinds: dict[str, tuple[str, tuple[str, ...]]]

    @cached_property
    def groups(self) -> frozenset[str]:
        """Every dotted prefix that names a group of fields (``user_profile``, ``a.b``…)."""
        return frozenset(p.rsplit(".", k)[0] for p in self.columns for k in range(1, p.count(".") + 1))


@dataclass
class Transition:
    """One batched step handed to every reward component."""

    s: StateView
    ns: StateView
    action: EnumColumn
    error: Tensor
    latency_ms: Tensor
    terminated: Tensor
    truncated: Tensor
    external: dict[str, Tensor] = field(default_factory=dict)
    role: Tensor | None = None
    """The acting role's index per episode (scenarios with ``roles:``)."""


# ---- the loaded function -----------------------------------------------------------------------
@dataclass(frozen=True)
class Component:
    name: str
    fn: Callable[[Transition], Any]
    objective: str
    rule_ref: str
    reason: str
    settle_on: str | None
    line: int
    role: str | None = None


@dataclass(frozen=True)
class RewardFunction:
    """A loaded reward module. ``version`` is the sha256 of its source."""

    path: str
    label: str
    version: str
    source: str
    components: tuple[Component, ...]
    weights: dict[str, float]
    schedule: tuple[tuple[int, dict[str, float]], ...]
    clip: float | None
    repeat_penalty: dict[str, Any] | None
    outcome_scales: tuple[tuple[str, float, float], ...] = ()
    """``(component, negative, positive)``: the component's negative and positive scores are
    multiplied by these (a calibration's ``rewards:`` block, fitted to how live outcomes are scored;
    see :func:`rlops.pipeline_steps.drift.outcome_fit.fit_reward_scales`). Empty: as written."""
    signal_weights: tuple[SignalWeight, ...] = ()
    """The objectives whose weight a business signal drives (``SIGNAL_WEIGHTS``, see
    :mod:`rlops.sandbox.reward_signals`)."""
    signal_values: tuple[tuple[str, float], ...] = ()
    """``(signal, value)`` bound by :meth:`with_signals`; a declared signal not bound is at its baseline."""
    params: tuple[TunableParam, ...] = ()
    """The constants the module declares tunable (``PARAMS``, see :mod:`rlops.sandbox.reward_params`)."""

    @property
    def rule_refs(self) -> list[str]:
        refs = [c.rule_ref for c in self.components]
        if self.repeat_penalty and self.repeat_penalty.get("rule_ref"):
            refs.append(self.repeat_penalty["rule_ref"])
        return sorted(set(refs))

    def weights_at(self, global_step: int) -> dict[str, float]:
        w = dict(self.weights)
        for start, update in self.schedule:
            if global_step >= start:
                w.update(update)
        values = self.signals_in_force
        for sw in self.signal_weights:
            w[sw.objective] = sw.weight(values[sw.signal])
        return w

    @property
    def signals_in_force(self) -> dict[str, float]:
        """Every declared signal's value: the bound one, else its baseline."""
        bound = dict(self.signal_values)
        return {sw.signal: bound.get(sw.signal, sw.baseline) for sw in self.signal_weights}

    def with_signals(self, values: Mapping[str, float]) -> RewardFunction:
        """This function with the declared signals among ``values`` bound (others are ignored);
        a value outside a signal's declared range is a ``ValueError``."""
        if not self.signal_weights:
            return self
        return replace(self, signal_values=bind_values(self.signal_weights, values))


__all__ = [
    "ColumnLayout",
    "Component",
    "EnumColumn",
    "RewardFunction",
    "StateView",
    "Transition",
    "component",
    "rule_ref",
]
