"""Production states → the sandbox's observation: what a served policy sees.

A production state reaches :meth:`ObservationEncoder.encode` in any of the shapes an agent has at
hand, and all of them mean the same thing:

* nested, with the scenario's field names: ``{"user_profile": {"age": 30}}``;
* dotted paths: ``{"user_profile.age": 30}``;
* the trace store's column names: ``{"state.user_profile.age": 30}`` — a whole trace row works
  too (its other columns, ``trace_id``, ``action``, …, are not state and are left aside);
* nested under one ``state`` key: ``{"state": {"user_profile": {"age": 30}}}``.

A state that cannot be read (not a mapping, a required field missing, a value of the wrong type,
a number outside the field's declared range or past float32, an unknown action in the history)
raises :class:`StateError`, which says which fields, what was given and what the scenario expects.

The encoder runs on numpy (:class:`~rlops.agent_sdk.decision_program.DecisionProgram`): an agent
needs neither torch nor the pack's reward modules to encode a state, mask its actions or ask the
rule engine.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.common.errors import UserError
from rlops.sandbox.spec import ScenarioSpec

STATE_PREFIX = "state."

log = logging.getLogger(__name__)


def observation_columns(layout: Any, action_names: Sequence[str]) -> list[str]:
    """Column names of the encoded observation ``[features | mask | history]``."""
    return (
        [*layout.feature_names]
        + [f"mask.{a}" for a in action_names]
        + [f"history.{i}" for i in range(layout.history_len)]
    )


class StateError(UserError):
    """A production state the scenario's encoder cannot read (a :class:`UserError`: the caller's
    input, with what was wrong, where, and what was expected)."""


def _flat_paths(state: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat_paths(value, name + "."))
        else:
            out[name] = value
    return out


def state_paths(state: Mapping[str, Any], known: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Field path → value for a state in any accepted shape (see the module docstring).

    ``known`` (the scenario's field paths) keeps a field that itself starts with ``state.`` as it
    is; every other ``state.`` prefix is dropped. The same field given twice with two different
    values is a :class:`StateError`."""
    out: dict[str, Any] = {}
    for raw, value in _flat_paths(state).items():
        path = raw[len(STATE_PREFIX) :] if raw.startswith(STATE_PREFIX) and raw not in known else raw
        if path in out and not _same(out[path], value):
            raise StateError(
                f"state field {path} is given twice with different values ({out[path]!r} and "
                f"{value!r}); pass either the nested form or the flattened state.<path> form"
            )
        out[path] = value
    return out


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b) or (_is_nan(a) and _is_nan(b))  # NaN twice is the same "missing"
    except Exception:  # noqa: BLE001 - incomparable values are different values
        return False


def _missing(v: Any) -> bool:
    """None, NaN, and pandas' NA/NaT (without importing pandas): a field with no value."""
    return v is None or _is_nan(v) or type(v).__name__ in ("NAType", "NaTType")


def _brief(v: Any) -> str:
    """``repr(v)``, cut to a length an error line can carry (an int may have thousands of digits)."""
    text = repr(v)
    return text if len(text) <= 40 else f"{text[:20]}…({len(text)} characters)"


def _is_nan(v: Any) -> bool:
    return isinstance(v, (float, np.floating)) and bool(np.isnan(v))


class ObservationEncoder:
    """Production states → the sandbox's state row, action masks and observations (numpy).

    Built from a :class:`DecisionProgram`, a parsed :class:`ScenarioSpec`, or a loaded pack
    (``rlops.sandbox.pack.Pack``: its scenario's spec); :meth:`from_pack` reads a pack folder."""

    def __init__(self, pack: DecisionProgram | ScenarioSpec | Any):
        if isinstance(pack, DecisionProgram):
            self.program = pack
        else:
            self.program = DecisionProgram(pack if isinstance(pack, ScenarioSpec) else pack.scenario.spec)
        self.scenario = scn = self.program
        self.action_names: tuple[str, ...] = scn.action_names
        self.columns = observation_columns(scn.layout, self.action_names)
        self._fields = [f for f in scn.spec.fields if f.observed]
        self._optional = set(scn.visible)  # hidden until their visible_when holds
        self._known = frozenset(f.path for f in scn.spec.fields)
        self.defaulted: dict[str, int] = {}
        """States per field that lacked it and took its declared ``default:`` (warned once per field)."""

    @classmethod
    def from_pack(cls, path: str | Any) -> ObservationEncoder:
        """The encoder of the pack folder ``path`` (reads its ``scenario.yaml`` only)."""
        return cls(DecisionProgram.from_pack(path))

    @property
    def required_fields(self) -> list[str]:
        """Observed fields every state must carry (those without a ``visible_when`` condition)."""
        return [f.path for f in self._fields if f.path not in self._optional]

    def state_tensor(
        self,
        state: Mapping[str, Any],
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
        strict: bool = True,
    ) -> np.ndarray:
        """One row ``S[1, C]`` (float32) for a production state and the actions taken so far. Not ``strict``:
        what cannot be read (a missing or bad field, an unknown action) is left at 0 instead of
        raising — the best-effort state the rule-engine fallback decides on."""
        scn = self.scenario
        name = scn.spec.name
        if not isinstance(state, Mapping):
            if strict:
                raise StateError(
                    f"state is a {type(state).__name__}, expected a mapping of the scenario {name}'s "
                    "field names (nested, or flattened state.<path> keys)"
                )
            state = {}
        try:
            flat = state_paths(state, self._known)
        except StateError:
            if strict:
                raise
            flat = {}
        S = scn.zeros(1)
        missing = []
        for f in self._fields:
            v = flat.get(f.path)
            if _missing(v) and f.default is not None:
                v = f.default
                self._count_default(f.path)
            if _missing(v):
                if f.path not in self._optional:
                    missing.append(f.path)
                continue
            try:
                S[0, scn.columns[f.path]] = self._code(f, v, strict)
            except StateError:
                if strict:
                    raise
        if missing and strict:
            unknown = sorted(p for p in flat if p not in self._known)
            given = (
                f"; it has no scenario field but these keys: {unknown[:8]}"
                if unknown and len(missing) == len(self.required_fields)
                else f"; keys it does not know: {unknown[:8]}"
                if unknown
                else ""
            )
            raise StateError(
                f"state lacks field(s) {missing} of scenario {name}{given}. Expected every observed field "
                f"without a visible_when condition ({len(self.required_fields)}: e.g. {self.required_fields[:3]}), "
                "nested ({'user_profile': {'age': 30}}) or as trace columns ({'state.user_profile.age': 30})"
            )
        if not strict:
            history = [a for a in history if isinstance(a, str) and a in self.action_names]
            step = step if isinstance(step, int) and not isinstance(step, bool) else None
            elapsed_ms = float(elapsed_ms) if isinstance(elapsed_ms, (int, float)) and np.isfinite(elapsed_ms) else 0.0
        codes = [self._action_code(a) for a in history]
        run = 0
        for c in reversed(codes):
            if c != codes[-1]:
                break
            run += 1
        col = scn.columns
        S[0, col["episode.step"]] = float(len(codes) if step is None else step)
        S[0, col["episode.elapsed_ms"]] = float(elapsed_ms)
        S[0, col["episode.last_action"]] = float(codes[-1]) if codes else 0.0
        S[0, col["episode.repeat_count"]] = float(max(run - 1, 0))
        S[0, col["episode.error"]] = float(bool(last_error))
        return scn.clamp(S)

    def _count_default(self, path: str) -> None:
        seen = self.defaulted.get(path, 0)
        self.defaulted[path] = seen + 1
        if not seen:
            log.warning(
                "scenario %s: a state lacks field %s; its declared default is used (an agent older than the field? "
                "counted in the encoder's defaulted; this warning is shown once)",
                self.scenario.spec.name,
                path,
            )

    def history_codes(self, history: Sequence[str]) -> np.ndarray:
        """``[1, k]`` codes of the last ``k`` actions, oldest first (0: none, ``a + 1``: action ``a``)."""
        k = self.scenario.layout.history_len
        codes = [self._action_code(a) for a in history][-k:] if k else []
        return np.asarray([[0] * (k - len(codes)) + codes], dtype=np.int64)

    def encode(
        self,
        state: Mapping[str, Any],
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
        strict: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(S[1, C], mask[1, A], obs[1, D])`` for one production state (see :meth:`state_tensor`):
        float32, bool and float32 arrays."""
        S = self.state_tensor(state, history, step, elapsed_ms, last_error, strict)
        if not strict:
            history = [a for a in history if isinstance(a, str) and a in self.action_names]
        mask = self.scenario.action_masks(S)
        return S, mask, self.scenario.encode(S, mask, self.history_codes(history))

    def rule_action(self, S: np.ndarray, mask: np.ndarray) -> int:
        """The rule engine's action for the first row of ``S`` with its mask."""
        return int(self.scenario.rule_actions(S[:1], mask[:1])[0])

    def _code(self, f: Any, v: Any, strict: bool = True) -> float:
        """The state-row code of field ``f``'s value ``v``. A number must be finite in the row's
        float32 and (``strict``) within the field's declared range: the policy never saw a value
        outside it, and clamping would serve 1e308 as the maximum. Not ``strict``, the rule-engine
        fallback's best-effort row clamps it."""
        if f.type == "enum":
            if v not in f.values:
                raise StateError(f"state field {f.path} = {v!r} is not one of {list(f.values)}")
            return float(f.values.index(v))
        if f.type == "bool":
            if not isinstance(v, (bool, np.bool_, int, np.integer)) or v not in (0, 1):
                raise StateError(f"state field {f.path} = {v!r}: expected true or false")
            return float(bool(v))
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise StateError(f"state field {f.path} = {v!r}: expected a number")
        try:
            with np.errstate(over="ignore"):
                x = np.float32(v)
        except OverflowError:  # an int past a float64: 10**400
            x = np.float32(np.inf)
        if not np.isfinite(x):
            raise StateError(f"state field {f.path} = {_brief(v)}: expected a finite number (of float32 size)")
        if strict:
            lo, hi = f.min, f.max
            code = np.round(x) if f.type == "int" else x  # what the row holds: the sandbox rounds ints
            if (lo is not None and code < np.float32(lo)) or (hi is not None and code > np.float32(hi)):
                raise StateError(
                    f"state field {f.path} = {_brief(v)} is outside its declared range "
                    f"[{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}] of scenario "
                    f"{self.scenario.spec.name}; widen the range in scenario.yaml if such states are real"
                )
        return float(x)

    def _action_code(self, action: str) -> int:
        if action not in self.action_names:
            raise StateError(f"history holds unknown action {action!r}; actions: {list(self.action_names)}")
        return self.action_names.index(action) + 1


__all__ = ["STATE_PREFIX", "ObservationEncoder", "StateError", "observation_columns", "state_paths"]
