"""A pack's decision-time programs on numpy: what an agent needs to decide one state without torch.

The sandbox compiles a scenario into torch programs over thousands of episodes at once
(:class:`rlops.sandbox.compile.CompiledScenario`); an agent decides one state at a time and may
not have torch. :class:`DecisionProgram` reads the same plan (:mod:`rlops.sandbox.layout`) and
compiles the same expressions with the same whitelist compiler (:mod:`rlops.sandbox.expr`) over
numpy arrays, for the four things a decision needs:

* :meth:`DecisionProgram.clamp` — a state row rounded and clipped to the declared ranges;
* :meth:`DecisionProgram.action_masks` — each action's precondition, its required fields
  present, and (with ``roles:``) the acting role's turn;
* :meth:`DecisionProgram.rule_actions` — the pack's rule engine (the fallback of every decision);
* :meth:`DecisionProgram.encode` — the observation a policy sees.

Each gives what the sandbox gives on the same float32 state (tests compare them over many states
of the built-in packs). Only ``scenario.yaml`` is read: no reward module is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, CompiledExpr, compile_expr, legal_columns
from rlops.sandbox.expr_numpy import NUMPY_OPS
from rlops.sandbox.layout import FeaturePlan, ObsLayout, StateLayout
from rlops.sandbox.precheck import scenario_file
from rlops.sandbox.spec import ScenarioSpec, parse_scenario
from rlops.sandbox.yaml_lines import load_yaml


def read_scenario(path: str | Path) -> ScenarioSpec:
    """The parsed ``scenario.yaml`` of the pack folder ``path`` (a :class:`PackError` when it is
    missing or invalid)."""
    root = Path(path)
    scen_file = scenario_file(root)
    try:
        return parse_scenario(load_yaml(scen_file, root), str(scen_file))
    except RecursionError:
        raise PackError(str(scen_file), None, "", "the scenario is nested too deeply") from None


class DecisionProgram:
    """Masks, rule engine and observation of one scenario over numpy rows ``S[N, C]`` (float32)."""

    def __init__(self, spec: ScenarioSpec):
        self.spec = spec
        self.action_names: tuple[str, ...] = tuple(a.name for a in spec.actions)
        self.state_layout = plan = StateLayout.of(spec)
        self.columns = plan.columns
        self.n_cols = len(plan.columns)
        self.col_min = np.asarray(plan.col_min, dtype=np.float32)
        self.col_max = np.asarray(plan.col_max, dtype=np.float32)
        self.int_cols = np.asarray(plan.int_cols, dtype=np.bool_)
        self.visible = {
            f.path: self._expr(f.visible_when, f.line, f"{f.path}.visible_when")
            for f in spec.fields
            if f.visible_when is not None
        }
        self.preconditions = [
            self._expr(a.precondition, a.line, f"actions.{a.name}.precondition") for a in spec.actions
        ]
        fields = {f.path: f for f in spec.fields}
        self.required: list[list[CompiledExpr]] = []
        for a in spec.actions:
            unobservable = [p for p in a.required_fields if not fields[p].observed]
            if unobservable:
                raise PackError(
                    spec.file,
                    a.line,
                    f"actions.{a.name}.required_fields",
                    f"required field '{unobservable[0]}' is never observable (observed: false)",
                )
            self.required.append([self.visible[p] for p in a.required_fields if p in self.visible])
        self.rules = [
            (self._expr(r.when, r.line, f"rule_policy[{i}].when"), self.action_names.index(r.action))
            for i, r in enumerate(spec.rule_policy)
        ]
        self.role_names = tuple(r.name for r in spec.roles)
        owner = {a: k for k, r in enumerate(spec.roles) for a in r.actions}
        self.action_roles = tuple(owner[a] for a in self.action_names) if spec.roles else ()
        self._action_role = np.asarray(self.action_roles, dtype=np.int64)
        self.acts_when = [
            None if r.acts_when is None else self._expr(r.acts_when, r.line, f"roles.{r.name}.acts_when")
            for r in spec.roles
        ]
        features = FeaturePlan.of(spec, plan.columns)
        self._num_idx = np.asarray(features.num_cols, dtype=np.int64)
        self._num_off = np.asarray(features.num_off, dtype=np.float32)
        self._num_scale = np.asarray(features.num_scale, dtype=np.float32)
        self._onehot_cols = np.asarray([c for c, n in features.enum_cols for _ in range(n)], dtype=np.int64)
        self._onehot_codes = np.asarray([float(v) for _, n in features.enum_cols for v in range(n)], dtype=np.float32)
        self._bool_idx = np.asarray(features.bool_cols, dtype=np.int64)
        self._vis = [(col, self.visible[path], np.float32(fill)) for path, col, fill in features.hidden_fill]
        self.layout = ObsLayout(
            n_features=len(features.feature_names),
            n_actions=len(self.action_names),
            history_len=spec.history_len,
            feature_names=features.feature_names,
            action_roles=self.action_roles,
            role_names=self.role_names,
        )

    @classmethod
    def from_pack(cls, path: str | Path) -> DecisionProgram:
        """The program of the pack folder ``path`` (reads its ``scenario.yaml`` only)."""
        return cls(read_scenario(path))

    def _expr(self, source: Any, line: int | None, where: str) -> CompiledExpr:
        try:
            return compile_expr(source, self.state_layout.resolve, want=BOOL, ops=NUMPY_OPS)
        except ExprError as exc:
            raise PackError(self.spec.file, line, where, f"illegal expression: {exc}") from None

    def zeros(self, n: int = 1) -> np.ndarray:
        """``n`` all-zero state rows."""
        return np.zeros((n, self.n_cols), dtype=np.float32)

    def clamp(self, S: np.ndarray) -> np.ndarray:
        """Round integer-like columns and clip every column to its declared range."""
        out: np.ndarray = np.clip(np.where(self.int_cols, np.round(S), S), self.col_min, self.col_max)
        return out.astype(np.float32, copy=False)

    def action_masks(self, S: np.ndarray) -> np.ndarray:
        """Legal actions ``[N, A]`` (bool): precondition holds and every required field is present."""
        masks = np.stack(legal_columns(self.preconditions, self.required, S), axis=1)
        if self.role_names:
            masks = masks & (self._action_role[None, :] == self.acting_role(S)[:, None])
        return masks

    def acting_role(self, S: np.ndarray) -> np.ndarray:
        """Index of the role whose turn it is ``[N]``: the first whose ``acts_when`` holds, the
        last one when it has no condition, ``-1`` when none acts; all zeros without roles."""
        role = np.zeros(S.shape[0], dtype=np.int64)
        if not self.role_names:
            return role
        role -= 1
        for k in reversed(range(len(self.role_names))):
            cond = self.acts_when[k]
            hit = np.ones_like(role, dtype=np.bool_) if cond is None else cond(S)
            role = np.where(hit, k, role)
        return role

    def rule_actions(self, S: np.ndarray, masks: np.ndarray) -> np.ndarray:
        """The pack's rule engine ``[N]``: the first legal rule that holds; else the first legal action."""
        choice = np.full(S.shape[0], -1, dtype=np.int64)
        for cond, a in reversed(self.rules):
            choice = np.where(cond(S) & masks[:, a], a, choice)
        fallback = masks.astype(np.float32).argmax(axis=1)
        out: np.ndarray = np.where(choice >= 0, choice, fallback)
        return out

    def encode(self, S: np.ndarray, masks: np.ndarray, history: np.ndarray) -> np.ndarray:
        """Observation ``[N, layout.dim]`` (float32); a field that is not yet visible reads as 0."""
        S_obs = S
        vis_bits = []
        if self._vis:
            S_obs = S.copy()
            for col, vis, fill in self._vis:
                v = vis(S)
                S_obs[:, col] = np.where(v, S[:, col], fill)
                vis_bits.append(v.astype(np.float32))
        parts = [(S_obs[:, self._num_idx] - self._num_off) * self._num_scale]
        if len(self._onehot_cols):
            parts.append((S_obs[:, self._onehot_cols] == self._onehot_codes).astype(np.float32))
        if len(self._bool_idx):
            parts.append(S_obs[:, self._bool_idx])
        if vis_bits:
            parts.append(np.stack(vis_bits, axis=1))
        parts.append((S[:, self.columns["episode.step"]] / np.float32(self.spec.horizon))[:, None])
        parts.append(S[:, self.columns["episode.error"]][:, None])
        parts.append(masks.astype(np.float32))
        parts.append(history.astype(np.float32))
        return np.concatenate(parts, axis=1, dtype=np.float32)


__all__ = ["DecisionProgram", "read_scenario"]
