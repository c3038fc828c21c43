"""Compile a :class:`ScenarioSpec` into batched tensor programs: state layout, initial sampling,
action masks, effects, termination and the observation encoder.

The state of N episodes is one float32 tensor ``S[N, C]``: the scenario's fields in declaration
order (ints, enum codes and bools stored as floats) followed by the built-in ``episode.*``
variables. Every program here maps whole columns at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, NUM, CompiledExpr, ExprType, compile_expr, legal_columns
from rlops.sandbox.expr_torch import standard_normal
from rlops.sandbox.init_sampler import InitSampler
from rlops.sandbox.layout import EPISODE_VARS, FeaturePlan, ObsLayout, StateLayout
from rlops.sandbox.rng import StepRandom, combine
from rlops.sandbox.spec import ActionSpec, FieldSpec, ScenarioSpec, SimulationProfile

Tensor = torch.Tensor

STEP_DRAWS = 4  # latency (2, Box–Muller), jitter, API error


@dataclass
class _Effect:
    when: CompiledExpr | None
    prob: CompiledExpr | None
    assigns: list[tuple[int, CompiledExpr | float, FieldSpec]]
    prob_draw: int


class CompiledScenario:
    """The compiled form of a scenario; shared by every environment built from the pack."""

    def __init__(self, spec: ScenarioSpec):
        self.spec = spec
        self.file = spec.file
        self.action_names = tuple(a.name for a in spec.actions)
        self.n_actions = len(spec.actions)
        plan = StateLayout.of(spec)
        self.state_layout = plan
        self.columns: dict[str, int] = plan.columns
        self.kinds: dict[str, str] = plan.kinds
        self.types: dict[str, ExprType] = plan.types
        self.n_cols = len(self.columns)
        self.fields = {f.path: f for f in spec.fields}
        self.col_min = torch.tensor(plan.col_min, dtype=torch.float32)
        self.col_max = torch.tensor(plan.col_max, dtype=torch.float32)
        self.int_cols = torch.tensor(plan.int_cols)
        self.visible: dict[str, CompiledExpr] = {}
        for f in spec.fields:
            if f.visible_when is not None:
                self.visible[f.path] = self._expr(f.visible_when, BOOL, f.line, f"{f.path}.visible_when")
        random_fields = [
            f.path
            for f in spec.fields
            if InitSampler.is_random(f.init)
            or any(
                InitSampler.is_random(sh.init[f.path])
                for p in spec.profiles.values()
                for sh in p.population
                if f.path in sh.init
            )
        ]
        self.draw_slots = {path: k for k, path in enumerate(random_fields)}
        self.init = InitSampler(self, {})
        self.profiles = {name: self._compile_profile(p) for name, p in spec.profiles.items()}
        self.preconditions = [
            self._expr(a.precondition, BOOL, a.line, f"actions.{a.name}.precondition") for a in spec.actions
        ]
        self.required = [self._required(a) for a in spec.actions]
        self.effects = [self._effects(a) for a in spec.actions]
        self.terminal = [self._expr(a.terminal, BOOL, a.line, f"actions.{a.name}.terminal") for a in spec.actions]
        self.terminal_when = (
            None if spec.terminal_when is None else self._expr(spec.terminal_when, BOOL, None, "terminal_when")
        )
        self.rules = [
            (self._expr(r.when, BOOL, r.line, f"rule_policy[{i}].when"), self.action_names.index(r.action))
            for i, r in enumerate(spec.rule_policy)
        ]
        self.human_takeover = torch.tensor([a.human_takeover for a in spec.actions])
        self.role_names = tuple(r.name for r in spec.roles)
        owner = {a: k for k, r in enumerate(spec.roles) for a in r.actions}
        self.action_roles = tuple(owner[a] for a in self.action_names) if spec.roles else ()
        self._action_role = torch.tensor(self.action_roles, dtype=torch.long)
        self.acts_when = [
            None if r.acts_when is None else self._expr(r.acts_when, BOOL, r.line, f"roles.{r.name}.acts_when")
            for r in spec.roles
        ]
        self.layout = self._layout()

    # ---- columns and expressions -------------------------------------------------------------
    def resolve(self, path: str) -> tuple[int, ExprType] | None:
        return self.state_layout.resolve(path)

    def _expr(
        self,
        source: Any,
        want: ExprType,
        line: int | None,
        where: str,
        resolve: Callable[[str], Any] | None = None,
        allow_random: bool = False,
        draw_offset: int = 0,
    ) -> CompiledExpr:
        try:
            return compile_expr(
                source, resolve or self.resolve, want=want, allow_random=allow_random, draw_offset=draw_offset
            )
        except ExprError as exc:
            raise PackError(self.file, line, where, f"illegal expression: {exc}") from None

    # ---- initial state -------------------------------------------------------------------------
    def _compile_profile(self, profile: SimulationProfile) -> dict[str, Any]:
        shifts = [
            (shift.probability, InitSampler(self, shift.init, only=set(shift.init))) for shift in profile.population
        ]
        err = []
        for a in self.spec.actions:
            api_rate = profile.error_rates.get(a.api, 0.0) if a.api else 0.0
            err.append(1.0 - (1.0 - a.error_rate) * (1.0 - api_rate))
        own = [profile.action_latency_ms.get(a.name, (a.latency_mean_ms, a.latency_std_ms)) for a in self.spec.actions]
        return {
            "profile": profile,
            "shifts": shifts,
            "error_rate": torch.tensor(err),
            "latency_mean": torch.tensor([m for m, _ in own]),
            "latency_std": torch.tensor([s for _, s in own]),
            "shift_vector_cols": [set(s.vector.cols.tolist()) for _, s in shifts],
            "jitter": profile.latency_jitter_ms,
        }

    def profile_with_population(self, world: str, population_of: str) -> str:
        """The name of a profile that simulates ``world`` (its API error rates and latencies) and
        draws its initial states as ``population_of`` does, with that profile's named population
        segments: the production stand-in's angry customers as they fare in the calibrated world.
        Added to this scenario on first use; ``world`` itself when both are the same profile."""
        if world == population_of:
            return world
        name = f"{world}+{population_of}-population"
        if name not in self.profiles:
            profile = replace(
                self.spec.profiles[world], name=name, population=self.spec.profiles[population_of].population
            )
            self.spec.profiles[name] = profile
            self.profiles[name] = self._compile_profile(profile)
        return name

    def sample_initial(self, key: Tensor, profile: str) -> Tensor:
        """Initial states for episode keys ``key[N]`` under a simulation profile."""
        prog = self.profiles[profile]
        n = key.shape[0]
        S = torch.zeros((n, self.n_cols), dtype=torch.float32, device=key.device)
        segment = torch.zeros(n, dtype=torch.float32, device=key.device)
        if prog["shifts"]:
            u = StepRandom(combine(key, 0x5E6)).uniform(0)
            acc = 0.0
            for k, (prob, _) in enumerate(prog["shifts"], start=1):
                segment = torch.where((u >= acc) & (u < acc + prob), torch.full_like(segment, k), segment)
                acc += prob
        S[:, self.columns["episode.segment"]] = segment
        R = StepRandom(combine(key, 0x1A17), 2 * max(len(self.draw_slots), 1))
        U = R.block()
        Z = standard_normal(U[:, 0::2], U[:, 1::2]).double()
        self.init.write_vector(S, U, Z)
        for k, (_, shift) in enumerate(prog["shifts"], start=1):
            shift.write_vector(S, U, Z, rows=segment == k)
        # A shift's override wins whatever form either init has: a sampled override replaces the
        # base value of the shift's rows, and a constant one (written above) survives a sampled base.
        shifts = prog["shifts"]
        for col in sorted(set(self.init.sequential).union(*(sh.sequential for _, sh in shifts))):
            base = self.init.sequential.get(col)
            value = base(S, R) if base is not None else S[:, col]
            for k, (_, shift) in enumerate(shifts, start=1):
                if col in shift.sequential:
                    value = torch.where(segment == k, shift.sequential[col](S, R), value)
                elif base is not None and col in prog["shift_vector_cols"][k - 1]:
                    value = torch.where(segment == k, S[:, col], value)
            S[:, col] = value
        return self.clamp(S)

    def clamp(self, S: Tensor) -> Tensor:
        """Round integer-like columns and clip every column to its declared range."""
        lo, hi, ints = self.col_min.to(S.device), self.col_max.to(S.device), self.int_cols.to(S.device)
        return torch.clamp(torch.where(ints, torch.round(S), S), lo, hi)

    # ---- masks, effects, termination -----------------------------------------------------------
    def _required(self, a: ActionSpec) -> list[CompiledExpr]:
        out = []
        for path in a.required_fields:
            f = self.fields[path]
            if not f.observed:
                raise PackError(
                    self.file,
                    a.line,
                    f"actions.{a.name}.required_fields",
                    f"required field '{path}' is never observable (observed: false)",
                )
            if path in self.visible:
                out.append(self.visible[path])
        return out

    def action_masks(self, S: Tensor) -> Tensor:
        """Legal actions ``[N, A]``: precondition holds and every required field is present."""
        masks = torch.stack(legal_columns(self.preconditions, self.required, S), dim=1)
        if self.role_names:
            # Only the acting role's actions are legal: its turn is part of the state.
            masks = masks & (self._action_role.to(S.device).unsqueeze(0) == self.acting_role(S).unsqueeze(1))
        return masks

    def acting_role(self, S: Tensor) -> Tensor:
        """Index of the role whose turn it is ``[N]`` (long): the first whose ``acts_when`` holds,
        the last one when it has no condition, ``-1`` when none acts; all zeros without roles."""
        role = torch.zeros(S.shape[0], dtype=torch.long, device=S.device)
        if not self.role_names:
            return role
        role = role - 1
        for k in reversed(range(len(self.role_names))):
            cond = self.acts_when[k]
            hit = torch.ones_like(role, dtype=torch.bool) if cond is None else cond(S)
            role = torch.where(hit, torch.full_like(role, k), role)
        return role

    def _effects(self, a: ActionSpec) -> list[_Effect]:
        # Draw ids 0-3 belong to the step itself (latency, jitter, error); an action's random
        # events take the ids after them. Only one action applies per row, so actions share ids.
        out = []
        self._draw = STEP_DRAWS

        def expr(source: Any, want: ExprType, where: str) -> CompiledExpr:
            ce = self._expr(
                source, want, a.line if e.line is None else e.line, where, allow_random=True, draw_offset=self._draw
            )
            self._draw += ce.random_draws
            return ce

        for j, e in enumerate(a.effects):
            where = f"actions.{a.name}.effects[{j}]"
            when = None if e.when is None else expr(e.when, BOOL, f"{where}.when")
            prob = None if e.prob is None else expr(e.prob, NUM, f"{where}.prob")
            prob_draw = self._draw
            if prob is not None:
                self._draw += 1
            assigns: list[tuple[int, CompiledExpr | float, FieldSpec]] = []
            for target, value in e.set.items():
                f = self.fields[target]
                if f.type == "enum" and isinstance(value, str) and value in f.values:
                    assigns.append((self.columns[target], float(f.values.index(value)), f))
                    continue
                if f.type == "bool" and isinstance(value, bool):
                    assigns.append((self.columns[target], float(value), f))
                    continue
                if f.type == "enum" and isinstance(value, str) and value.isidentifier() and value not in self.columns:
                    raise PackError(
                        self.file,
                        e.line,
                        f"{where}.set.{target}",
                        f"unknown enum value '{value}' (expected one of {list(f.values)} "
                        "or an expression of that enum)",
                    )
                want = self.types[target] if f.type == "enum" else (BOOL if f.type == "bool" else NUM)
                ce = expr(value, want, f"{where}.set.{target}")
                if f.type == "enum" and ce.type != want:
                    raise PackError(
                        self.file,
                        e.line,
                        f"{where}.set.{target}",
                        f"type mismatch: expected a value of {want}, got {ce.type}",
                    )
                assigns.append((self.columns[target], ce, f))
            out.append(_Effect(when, prob, assigns, prob_draw))
        self.step_draws = max(getattr(self, "step_draws", STEP_DRAWS), self._draw)
        return out

    def apply_effects(self, S: Tensor, actions: Tensor, ok: Tensor, R: StepRandom) -> Tensor:
        """Next state: each action's effects applied to the rows that took it without error.
        Effects apply in order; each sees the assignments of the ones before it."""
        S_next = S.clone()
        for a, effects in enumerate(self.effects):
            if not effects:
                continue
            sel = (actions == a) & ok
            for e in effects:
                cond = sel if e.when is None else sel & e.when(S_next, R)
                if e.prob is not None:
                    cond = cond & (R.uniform(e.prob_draw) < e.prob(S_next, R))
                new_vals = []
                for col, value, _ in e.assigns:
                    v = value(S_next, R).float() if isinstance(value, CompiledExpr) else value
                    new_vals.append((col, v))
                for col, v in new_vals:
                    if isinstance(v, float):  # a constant: one in-place op instead of select + where + copy
                        S_next[:, col].masked_fill_(cond, v)
                    else:
                        S_next[:, col] = torch.where(cond, v, S_next[:, col])
        return S_next

    def terminated(self, S_next: Tensor, actions: Tensor, ok: Tensor) -> Tensor:
        term = torch.zeros(S_next.shape[0], dtype=torch.bool, device=S_next.device)
        for a, t in enumerate(self.terminal):
            term = term | ((actions == a) & ok & t(S_next))
        if self.terminal_when is not None:
            term = term | self.terminal_when(S_next)
        return term

    def rule_actions(self, S: Tensor, masks: Tensor) -> Tensor:
        """The pack's rule engine: the first legal rule that holds; else the first legal action."""
        n = S.shape[0]
        choice = torch.full((n,), -1, dtype=torch.long, device=S.device)
        for cond, a in reversed(self.rules):
            hit = cond(S) & masks[:, a]
            choice = torch.where(hit, torch.full_like(choice, a), choice)
        fallback = masks.float().argmax(dim=1)
        return torch.where(choice >= 0, choice, fallback)

    # ---- observation -------------------------------------------------------------------------
    def _layout(self) -> ObsLayout:
        plan = FeaturePlan.of(self.spec, self.columns)
        self._num_cols = list(plan.num_cols)
        self._enum_cols: list[tuple[int, int]] = list(plan.enum_cols)
        self._bool_cols: list[int] = list(plan.bool_cols)
        # (column, visibility, fill): a hidden field's raw value is replaced by ``fill``, chosen so
        # that every feature it owns reads 0 (a number's offset, enum code -1, bool 0).
        self._vis: list[tuple[int, CompiledExpr, float]] = [
            (col, self.visible[path], fill) for path, col, fill in plan.hidden_fill
        ]
        self._onehot_cols = torch.tensor([c for c, n in self._enum_cols for _ in range(n)], dtype=torch.long)
        self._onehot_codes = torch.tensor([float(v) for _, n in self._enum_cols for v in range(n)])
        self._num_idx = torch.tensor(self._num_cols, dtype=torch.long)
        self._bool_idx = torch.tensor(self._bool_cols, dtype=torch.long)
        self._num_off = torch.tensor(plan.num_off)
        self._num_scale = torch.tensor(plan.num_scale)
        return ObsLayout(
            len(plan.feature_names),
            self.n_actions,
            self.spec.history_len,
            plan.feature_names,
            self.action_roles,
            self.role_names,
        )

    def encode(self, S: Tensor, masks: Tensor, history: Tensor) -> Tensor:
        """Observation ``[N, layout.dim]``; a field that is not yet visible reads as 0."""
        dev = S.device
        S_obs = S
        if self._vis:
            # Every feature of a field not yet visible (its scaled value, its one-hot block) is 0,
            # so a hidden field carries nothing but its ``?present`` bit.
            S_obs = S.clone()
            vis_bits = []
            for col, vis, fill in self._vis:
                v = vis(S)
                S_obs[:, col] = torch.where(v, S[:, col], fill)
                vis_bits.append(v.float())
        parts = [(S_obs.index_select(1, self._num_idx.to(dev)) - self._num_off.to(dev)) * self._num_scale.to(dev)]
        if self._enum_cols:
            # Every enum's one-hot block in one comparison: feature j is "code of its field == its
            # value index"; a hidden field (code -1) matches nothing and reads as all zeros.
            codes = S_obs.index_select(1, self._onehot_cols.to(dev))
            parts.append((codes == self._onehot_codes.to(dev)).float())
        if self._bool_cols:
            parts.append(S_obs.index_select(1, self._bool_idx.to(dev)))
        if self._vis:
            parts.append(torch.stack(vis_bits, dim=1))
        parts.append((S[:, self.columns["episode.step"]] / self.spec.horizon).unsqueeze(1))
        parts.append(S[:, self.columns["episode.error"]].unsqueeze(1))
        parts.append(masks.float())
        parts.append(history.float())
        return torch.cat(parts, dim=1)


__all__ = ["EPISODE_VARS", "STEP_DRAWS", "CompiledScenario", "ObsLayout"]
