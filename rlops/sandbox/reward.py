"""Reward-function runtime: versioned Python modules whose components carry rule references.

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
episode, so a reward costs array ops. The runtime weights, sums, clips (the clip shows up as its
own ``clip`` entry so the breakdown always sums to the total), adds the repeated-action penalty
and external ``reward_hook`` scores, and holds back components with ``settle_on`` until that
action happens (or the episode ends). The version of a reward function is the sha256 of its source.

In a scenario with ``roles:``, ``@component(role="underwriter")`` scores only the steps where that
role acts; components without a role are the team's and score every step (see ``by_role``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import math
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import torch

from rlops.sandbox.errors import PackError
from rlops.sandbox.pack_files import read_pack_text
from rlops.sandbox.reward_params import TunableParam, parse_params
from rlops.sandbox.reward_signals import SignalWeight, bind_values, parse_signal_weights

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


# ---- loading -----------------------------------------------------------------------------------
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


def load_reward_fn(
    path: Path, rules: dict[str, Any], actions: tuple[str, ...], root: Path | None = None, roles: tuple[str, ...] = ()
) -> RewardFunction:
    """Import a reward module by path and check its components against ``rules`` and ``actions``.
    With ``root`` (the pack folder) the file must resolve inside it: a module linked in from
    elsewhere is refused before it runs. Importing runs the module's code in this process;
    :mod:`rlops.sandbox.isolate` does it first in a child process with time and memory limits."""
    source = read_pack_text(path, root)
    mod_name = f"rlops_reward_{hashlib.sha256(str(path).encode()).hexdigest()[:10]}_{path.stem}"
    spec = importlib.util.spec_from_file_location(mod_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except SyntaxError as exc:
        raise PackError(str(path), exc.lineno, "", f"syntax error in reward module: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any import failure is an authoring error
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == str(path):
                line = tb.tb_lineno
            tb = tb.tb_next
        raise PackError(str(path), line, "", f"reward module failed to import: {type(exc).__name__}: {exc}") from None
    components = []
    for name, fn in inspect.getmembers(module, inspect.isfunction):
        meta = getattr(fn, "__component__", None)
        if meta is None or fn.__module__ != mod_name:
            continue
        line = inspect.getsourcelines(fn)[1]
        ref = getattr(fn, "__rule_ref__", None)
        if ref is None:
            raise PackError(
                str(path),
                line,
                name,
                "reward component has no @rule_ref(...) (every component must cite a rule of rules.yaml)",
            )
        if ref not in rules:
            raise PackError(
                str(path), line, name, f"dangling rule ref '{ref}': not defined in rules.yaml (known: {sorted(rules)})"
            )
        if meta["settle_on"] is not None and meta["settle_on"] not in actions:
            raise PackError(
                str(path),
                line,
                name,
                f"settle_on names undefined action '{meta['settle_on']}' (actions: {list(actions)})",
            )
        role = meta.get("role")
        if role is not None and role not in roles:
            raise PackError(
                str(path),
                line,
                name,
                f"reward component names role {role!r}, but "
                + (f"the scenario's roles are {list(roles)}" if roles else "the scenario declares no roles: block"),
            )
        components.append(Component(name, fn, meta["objective"], ref, meta["reason"], meta["settle_on"], line, role))
    if not components:
        raise PackError(str(path), None, "", "reward module defines no @component functions")
    components.sort(key=lambda c: c.line)
    objectives = {c.objective for c in components}
    weights, schedule, clip, rp = _settings(path, module, source, objectives, rules)
    written = getattr(module, "WEIGHTS", None) or {}
    scheduled = {k for _, update in schedule for k in update}
    signal_weights = parse_signal_weights(path, module, source, objectives, written, scheduled)
    params = parse_params(path, module, source, rules)
    sys.modules.pop(mod_name, None)
    return RewardFunction(
        str(path),
        str(getattr(module, "VERSION_LABEL", path.stem)),
        hashlib.sha256(source.encode()).hexdigest(),
        source,
        tuple(components),
        weights,
        schedule,
        clip,
        rp,
        signal_weights=signal_weights,
        params=params,
    )


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    """A number that is not NaN or infinite: a weight, clip or penalty of ``float('inf')`` would
    turn every reward into ±inf or NaN."""
    try:
        return _is_num(v) and math.isfinite(float(v))
    except OverflowError:
        return False


def _settings(
    path: Path, module: Any, source: str, objectives: set[str], rules: dict[str, Any]
) -> tuple[dict[str, float], tuple[tuple[int, dict[str, float]], ...], float | None, dict[str, Any] | None]:
    """Check the module-level WEIGHTS, WEIGHT_SCHEDULE, CLIP and REPEAT_PENALTY; a bad value is a
    PackError at the line that assigns it (a typo in an objective name would silently weigh 1)."""

    def bad(name: str, msg: str) -> PackError:
        m = re.search(rf"^{name}\s*[:=]", source, re.M)
        return PackError(str(path), None if m is None else source.count("\n", 0, m.start()) + 1, name, msg)

    def weight_map(name: str, w: Any) -> dict[str, float]:
        if not isinstance(w, dict) or not all(isinstance(k, str) and _finite(v) for k, v in w.items()):
            raise bad(name, f"expected a mapping objective → number, got {w!r}")
        unknown = set(w) - objectives
        if unknown:
            raise bad(name, f"unknown objective(s) {sorted(unknown)} (objectives: {sorted(objectives)})")
        return {k: float(v) for k, v in w.items()}

    weights = weight_map("WEIGHTS", getattr(module, "WEIGHTS", None) or {})
    for obj in objectives:
        weights.setdefault(obj, 1.0)
    raw = getattr(module, "WEIGHT_SCHEDULE", None) or []
    if not isinstance(raw, (list, tuple)) or not all(
        isinstance(s, (list, tuple))
        and len(s) == 2
        and isinstance(s[0], int)
        and not isinstance(s[0], bool)
        and s[0] >= 0
        for s in raw
    ):
        raise bad("WEIGHT_SCHEDULE", "expected a list of (env step, {objective: weight}) pairs")
    schedule = tuple(sorted((int(s), weight_map("WEIGHT_SCHEDULE", w)) for s, w in raw))
    clip = getattr(module, "CLIP", None)
    if clip is not None and not (_finite(clip) and clip > 0):
        raise bad("CLIP", f"expected a positive number (the bound on |total|), got {clip!r}")
    rp = getattr(module, "REPEAT_PENALTY", None)
    if rp is not None:
        if not (
            isinstance(rp, dict)
            and set(rp) <= {"penalty", "after", "rule_ref"}
            and _finite(rp.get("penalty"))
            and rp["penalty"] >= 0
            and isinstance(rp.get("after", 1), int)
            and rp.get("after", 1) >= 1
        ):
            raise bad(
                "REPEAT_PENALTY",
                f"expected {{'penalty': number >= 0, 'after': int >= 1, 'rule_ref': rule id}}, got {rp!r}",
            )
        if rp.get("rule_ref") is not None and rp["rule_ref"] not in rules:
            raise bad("REPEAT_PENALTY", f"dangling rule ref '{rp['rule_ref']}': not defined in rules.yaml")
    return weights, schedule, None if clip is None else float(clip), rp


class RewardError(RuntimeError):
    """A reward component raised or returned something that is not one score per episode."""


@dataclass
class RewardHook:
    name: str
    fn: Callable[[Transition], Tensor]
    weight: float = 1.0
    rule_ref: str | None = None


class RewardRuntime:
    """Evaluates a :class:`RewardFunction` on batched transitions; holds delayed settlements."""

    def __init__(
        self,
        fn: RewardFunction,
        n: int,
        device: torch.device,
        action_names: tuple[str, ...],
        role_names: tuple[str, ...] = (),
    ):
        self.n, self.device, self.action_names, self.role_names = n, device, action_names, role_names
        self.hooks: list[RewardHook] = []
        self.set_function(fn)

    def set_function(self, fn: RewardFunction) -> None:
        self.fn = fn
        self.pending = torch.zeros((self.n, len(fn.components)), device=self.device)
        self._settle_codes = [
            None if c.settle_on is None else self.action_names.index(c.settle_on) for c in fn.components
        ]
        self._weights_cache: tuple[int, Tensor] | None = None
        unknown = sorted({c.role for c in fn.components if c.role is not None} - set(self.role_names))
        if unknown:
            raise ValueError(
                f"{fn.path}: reward components of role(s) {unknown}, but the environment's roles are "
                f"{list(self.role_names)}"
            )
        owners = [-1 if c.role is None else self.role_names.index(c.role) for c in fn.components]
        self._owner = torch.tensor(owners, device=self.device) if any(k >= 0 for k in owners) else None
        self._scales: tuple[Tensor, Tensor] | None = None
        if fn.outcome_scales:
            by_name = {name: (neg, pos) for name, neg, pos in fn.outcome_scales}
            pairs = [by_name.get(c.name, (1.0, 1.0)) for c in fn.components]
            self._scales = (
                torch.tensor([n for n, _ in pairs], device=self.device),
                torch.tensor([p for _, p in pairs], device=self.device),
            )

    @property
    def column_roles(self) -> list[str | None]:
        """The role owning each breakdown column (None: the team's)."""
        return [c.role for c in self.fn.components] + [None] * (len(self.hooks) + 2)

    def by_role(self, breakdown: Tensor) -> dict[str, Tensor]:
        """A breakdown ``[N, columns]`` split into ``team`` and each role's own part; they sum to the total."""
        roles = self.column_roles
        return {
            name: breakdown[:, [j for j, r in enumerate(roles) if r == role]].sum(dim=1)
            for name, role in [("team", None), *((r, r) for r in self.role_names)]
        }

    @property
    def names(self) -> list[str]:
        return (
            [c.name for c in self.fn.components]
            + ["repeat_penalty"]
            + [f"hook:{h.name}" for h in self.hooks]
            + ["clip"]
        )

    @property
    def rule_refs(self) -> list[str | None]:
        rp = (self.fn.repeat_penalty or {}).get("rule_ref")
        return [c.rule_ref for c in self.fn.components] + [rp] + [h.rule_ref for h in self.hooks] + [None]

    @property
    def reasons(self) -> list[str]:
        return (
            [c.reason for c in self.fn.components]
            + ["same action repeated"]
            + [f"external score {h.name}" for h in self.hooks]
            + ["total clipped to the bound"]
        )

    def _weights(self, global_step: int) -> Tensor:
        active = sum(1 for start, _ in self.fn.schedule if global_step >= start)
        if self._weights_cache is None or self._weights_cache[0] != active:
            w = self.fn.weights_at(global_step)
            vec = torch.tensor([w[c.objective] for c in self.fn.components], device=self.device)
            self._weights_cache = (active, vec)
        return self._weights_cache[1]

    def compute(
        self, t: Transition, actions: Tensor, repeat_count: Tensor, done: Tensor, global_step: int
    ) -> tuple[Tensor, Tensor]:
        """Total ``[N]`` and breakdown ``[N, len(names)]`` (weighted; sums to the total)."""
        cols = [self._component(c, t) for c in self.fn.components]
        raw = torch.stack(cols, dim=1) * self._weights(global_step)
        if self._scales is not None:  # a calibrated pack scores outcomes as live traffic is scored
            raw = torch.where(raw < 0, raw * self._scales[0], raw * self._scales[1])
        if self._owner is not None and t.role is not None:
            # A role's own component scores the steps that role takes; team components every step.
            mine = (self._owner.unsqueeze(0) < 0) | (self._owner.unsqueeze(0) == t.role.unsqueeze(1))
            raw = torch.where(mine, raw, torch.zeros_like(raw))
        if any(code is not None for code in self._settle_codes):
            for j, code in enumerate(self._settle_codes):
                if code is None:
                    continue
                acc = self.pending[:, j] + raw[:, j]
                pay = done | (actions == code)
                raw[:, j] = torch.where(pay, acc, torch.zeros_like(acc))
                self.pending[:, j] = torch.where(pay, torch.zeros_like(acc), acc)
        extra = []
        rp = self.fn.repeat_penalty
        if rp:
            extra.append(torch.where(repeat_count >= float(rp.get("after", 1)), -float(rp["penalty"]), 0.0))
        else:
            extra.append(torch.zeros(self.n, device=self.device))
        for h in self.hooks:
            extra.append(torch.as_tensor(h.fn(t), dtype=torch.float32, device=self.device).expand(self.n) * h.weight)
        parts = torch.cat([raw, torch.stack(extra, dim=1)], dim=1)
        total_raw = parts.sum(dim=1)
        total = total_raw if self.fn.clip is None else total_raw.clamp(-self.fn.clip, self.fn.clip)
        breakdown = torch.cat([parts, (total - total_raw).unsqueeze(1)], dim=1)
        return total, breakdown

    def _component(self, c: Component, t: Transition) -> Tensor:
        """One component's scores ``[N]``; anything else is a :class:`RewardError` naming it."""
        where = f"{self.fn.path}:{c.line}: reward component '{c.name}'"
        try:
            v = c.fn(t)
            v = torch.as_tensor(v, dtype=torch.float32, device=self.device)
        except Exception as exc:  # noqa: BLE001 - reported with the component's name
            raise RewardError(f"{where} raised {type(exc).__name__}: {exc}") from exc
        if v.dim() == 0:
            v = v.expand(self.n)
        if v.shape != (self.n,):
            raise RewardError(f"{where} returned shape {tuple(v.shape)}, expected ({self.n},)")
        # Non-finite scores pass through: the stress test and the evaluation gates report them,
        # validation refuses them (rlops.sandbox.probe) and trace rows never carry them (rlops.sandbox.traces).
        return v.float()

    def reset_rows(self, rows: Tensor) -> None:
        self.pending = torch.where(rows.unsqueeze(1), torch.zeros_like(self.pending), self.pending)


def render_breakdown(
    total: float, scores: list[float], names: list[str], reasons: list[str], refs: list[str | None]
) -> dict[str, Any]:
    """The JSON form of one step's reward: non-zero components with their reason and rule."""
    items = [
        {"component": n, "score": round(float(s), 6), "reason": r, "rule_ref": ref}
        for n, s, r, ref in zip(names, scores, reasons, refs)
        if abs(float(s)) > 1e-12
    ]
    return {"total": round(float(total), 6), "breakdown": items}
