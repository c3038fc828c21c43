"""Where each value of a scenario lives: the state's columns and their bounds, and how the
observation a policy sees is built from them. Pure Python, computed once from the parsed
:class:`~rlops.sandbox.spec.ScenarioSpec`; the sandbox turns it into torch tensors
(:class:`rlops.sandbox.compile.CompiledScenario`), an agent without torch into numpy arrays
(:mod:`rlops.agent_sdk.decision_program`), so both read one plan.

The state of an episode is a float32 row ``S[C]``: the scenario's fields in declaration order
(ints, enum codes and bools stored as floats) followed by the built-in ``episode.*`` variables.
The observation is ``[numeric features | enum one-hots | bools | ?present bits | progress, error |
action mask | last-k action codes]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlops.sandbox.expr_runtime import BOOL, NUM, ExprType
from rlops.sandbox.spec import FieldSpec, ScenarioSpec

EPISODE_VARS: tuple[tuple[str, str], ...] = (
    ("episode.step", "int"),
    ("episode.elapsed_ms", "float"),
    ("episode.last_action", "enum"),
    ("episode.repeat_count", "int"),
    ("episode.error", "bool"),
    ("episode.errors", "int"),
    ("episode.latency_ms", "float"),
    ("episode.segment", "int"),
)


@dataclass(frozen=True)
class ObsLayout:
    """The flat observation is ``[features | action mask | last-k action codes]``."""

    n_features: int
    n_actions: int
    history_len: int
    feature_names: tuple[str, ...]
    action_roles: tuple[int, ...] = ()
    """The role (index into ``role_names``) that owns each action; empty without ``roles:``."""
    role_names: tuple[str, ...] = ()

    @property
    def dim(self) -> int:
        return self.n_features + self.n_actions + self.history_len


@dataclass(frozen=True)
class StateLayout:
    """The state's columns: index, kind and expression type of each path, and the bounds
    :meth:`rlops.sandbox.compile.CompiledScenario.clamp` rounds and clips a row to."""

    columns: dict[str, int]
    """Path → column (fields in declaration order, then :data:`EPISODE_VARS`)."""
    kinds: dict[str, str]
    """Path → ``int``, ``float``, ``enum`` or ``bool``."""
    types: dict[str, ExprType]
    """Path → the type an expression sees."""
    col_min: tuple[float, ...]
    col_max: tuple[float, ...]
    int_cols: tuple[bool, ...]
    """Columns rounded to whole numbers (ints, enum codes, bools)."""

    @classmethod
    def of(cls, spec: ScenarioSpec) -> StateLayout:
        columns: dict[str, int] = {}
        kinds: dict[str, str] = {}
        types: dict[str, ExprType] = {}

        def add(path: str, kind: str, values: tuple[str, ...]) -> None:
            columns[path] = len(columns)
            kinds[path] = kind
            types[path] = ExprType(kind, values, path) if kind == "enum" else (BOOL if kind == "bool" else NUM)

        action_names = tuple(a.name for a in spec.actions)
        for f in spec.fields:
            add(f.path, f.type, f.values)
        for name, kind in EPISODE_VARS:
            add(name, kind, ("none", *action_names) if name == "episode.last_action" else ())
        lo, hi = [-math.inf] * len(columns), [math.inf] * len(columns)
        for f in spec.fields:
            j = columns[f.path]
            if f.type in ("int", "float"):
                lo[j] = -math.inf if f.min is None else float(f.min)
                hi[j] = math.inf if f.max is None else float(f.max)
            elif f.type == "enum":
                lo[j], hi[j] = 0.0, float(len(f.values) - 1)
            else:
                lo[j], hi[j] = 0.0, 1.0
        ints = tuple(kinds[p] in ("int", "enum", "bool") for p in columns)
        return cls(columns, kinds, types, tuple(lo), tuple(hi), ints)

    def resolve(self, path: str) -> tuple[int, ExprType] | None:
        """Column and type of a path, for the expression compiler (None: no such field)."""
        if path in self.columns:
            return self.columns[path], self.types[path]
        return None


@dataclass(frozen=True)
class FeaturePlan:
    """Which state columns become which observation features, and how."""

    num_cols: tuple[int, ...]
    num_off: tuple[float, ...]
    num_scale: tuple[float, ...]
    """A numeric feature is ``(S[col] - off) * scale``, roughly in [-1, 1]."""
    enum_cols: tuple[tuple[int, int], ...]
    """(column, number of values) of each observed enum: one one-hot block each."""
    bool_cols: tuple[int, ...]
    hidden_fill: tuple[tuple[str, int, float], ...]
    """(path, column, fill) of each observed field with a ``visible_when``: while hidden its raw
    value reads as ``fill``, so every feature it owns is 0 (a number's offset, enum code -1, bool 0)."""
    feature_names: tuple[str, ...]

    @classmethod
    def of(cls, spec: ScenarioSpec, columns: dict[str, int]) -> FeaturePlan:
        names: list[str] = []
        num_cols, num_off, num_scale = [], [], []
        enum_cols: list[tuple[int, int]] = []
        bool_cols: list[int] = []
        fill: dict[str, float] = {}
        observed = [f for f in spec.fields if f.observed]
        for f in observed:
            if f.type in ("int", "float"):
                off, scale = numeric_scale(f)
                num_cols.append(columns[f.path])
                num_off.append(off)
                num_scale.append(scale)
                names.append(f.path)
                fill[f.path] = off
        for f in observed:
            if f.type == "enum":
                enum_cols.append((columns[f.path], len(f.values)))
                names.extend(f"{f.path}={v}" for v in f.values)
                fill[f.path] = -1.0
        for f in observed:
            if f.type == "bool":
                bool_cols.append(columns[f.path])
                names.append(f.path)
                fill[f.path] = 0.0
        hidden = []
        for f in observed:
            if f.visible_when is not None:
                hidden.append((f.path, columns[f.path], fill[f.path]))
                names.append(f"{f.path}?present")
        names += ["episode.progress", "episode.error"]
        return cls(
            tuple(num_cols),
            tuple(num_off),
            tuple(num_scale),
            tuple(enum_cols),
            tuple(bool_cols),
            tuple(hidden),
            tuple(names),
        )


def numeric_scale(f: FieldSpec) -> tuple[float, float]:
    """Offset and scale that map a numeric field to roughly [-1, 1]."""
    if f.bounded and f.max > f.min:  # type: ignore[operator]  # bounded: min and max are set
        mid = (f.max + f.min) / 2  # type: ignore[operator]  # bounded: min and max are set
        return mid, 2.0 / (f.max - f.min)  # type: ignore[operator]  # bounded: min and max are set
    init = f.init
    if init.dist == "normal" and all(isinstance(init.params[k], (int, float)) for k in ("mean", "std")):
        return float(init.params["mean"]), 1.0 / max(float(init.params["std"]) * 2, 1e-6)
    if init.dist == "lognormal" and all(isinstance(init.params[k], (int, float)) for k in ("mean", "sigma")):
        m = math.exp(float(init.params["mean"]))
        return m, 1.0 / max(m * 2, 1e-6)
    lo = f.min if f.min is not None else 0.0
    return lo, 1.0 / max(abs(lo), 1.0)


__all__ = ["EPISODE_VARS", "FeaturePlan", "ObsLayout", "StateLayout", "numeric_scale"]
