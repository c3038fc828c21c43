"""Evaluating a loaded reward function on batched transitions: the weighted, clipped total and its
breakdown per component (with the repeated-action penalty, external hooks and the clip as columns of
their own), delayed settlements, and the JSON form of one step's reward."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlops.sandbox.reward import Component, RewardFunction, Transition

Tensor = torch.Tensor


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


__all__ = ["RewardError", "RewardHook", "RewardRuntime", "render_breakdown"]
