"""What an adapter declares about the agent it plugs into, free of any framework.

* :class:`StateMapping` — the framework's state (a LangGraph state dict, a context object) → the
  pack's state fields;
* :class:`ActionNames` — the agent's own names for its tools → the pack's action names, the tools
  that are no pack action counted and named once;
* :class:`ToolOutcome` — a tool's result → the step's ``latency_ms`` and ``error``, for tools that
  report both in what they return;
* :class:`EpisodeContext` and the pack's masks (:func:`pack_masks`, :func:`context_mask`) — what a
  decision of an episode knows besides the state: the ``episode.*`` variables the sandbox trains with.

:mod:`rlops.integrations.core` re-exports all of these.
"""

from __future__ import annotations

import json
import logging
import math
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.agent_sdk.masks import ActionMasker
from rlops.agent_sdk.rollout import RULES_VERSION
from rlops.agent_sdk.tracer import is_error
from rlops.common.errors import UserError

log = logging.getLogger(__name__)

#: The ``logging_policy`` of rows whose action the agent's own router chose (not an rlops policy);
#: capture keeps the key in the row's ``extra``.
AGENT_ROUTER = "agent_router"


class WiringError(UserError):
    """An agent wired to rlops in a way that cannot serve or trace it (what, where, and the fix)."""


#: How an adapter plugs in: ``serve`` (the policy chooses) or ``observe`` (the agent's own logic
#: chooses, rlops records its choices).
MODES = ("serve", "observe")


def check_observe_arguments(where: str, mode: Any, agent_version: Any, deterministic: Any) -> None:
    """Refuse, when an adapter is built, a ``mode`` that is none of :data:`MODES`, an ``agent_version``
    that is blank or names the pack's rule engine (the sandbox would be checked against rules that
    never chose), and a ``deterministic`` that is no boolean (a truthy text would write propensity 1)."""
    if not isinstance(mode, str) or mode not in MODES:
        raise WiringError(
            f"{where}(mode={mode!r}): expected one of {list(MODES)}: 'serve' (the policy chooses) or 'observe' "
            "(the agent's own logic chooses and rlops records its choices)"
        )
    if not isinstance(agent_version, str) or not agent_version.strip() or agent_version == RULES_VERSION:
        raise WiringError(
            f"{where}(agent_version={agent_version!r}): expected the name of what chooses in observe mode, "
            f"{AGENT_ROUTER!r} (the default) or your agent's, e.g. 'support-agent-v3'; not {RULES_VERSION!r}, the "
            "pack's rule engine, which did not choose"
        )
    if not isinstance(deterministic, bool):
        raise WiringError(
            f"{where}(deterministic={deterministic!r}): expected True (the agent chooses by rule, propensity 1) "
            "or False (an LLM chooses: propensity unknown)"
        )


def agent_router_fields(deterministic: bool) -> dict[str, Any]:
    """The serving columns of a step the agent's own router chose: no rlops fallback, flagged
    ``logging_policy: agent_router``; a deterministic router chose with propensity 1 (``logp`` 0), any
    other (an LLM) with a propensity nobody knows, so none is written and off-policy evaluation says it
    cannot weigh the row instead of weighing it as certain."""
    return {"logging_policy": AGENT_ROUTER, "fallback": False, "logp": 0.0 if deterministic else None}


def _read(source: Any, path: str) -> Any:
    """``a.b`` of a mapping or an object (a dict, a TypedDict state, a pydantic model, a dataclass)."""
    value = source
    for part in path.split("."):
        if isinstance(value, Mapping):
            if part not in value:
                return None
            value = value[part]
        else:
            value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        *groups, leaf = path.split(".")
        node = out
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = value
    return out


@dataclass(frozen=True)
class StateMapping:
    """Which key of the framework's state holds each pack field.

    ``fields``: pack field path → the key (a dotted path into dicts or attributes) in the framework's
    state, e.g. ``{"user_profile.credit_score": "credit_score"}``. A key whose value is missing (or
    None) leaves the field out; the policy client says which required fields a state lacks.
    """

    fields: Mapping[str, str]

    def __post_init__(self) -> None:
        if not isinstance(self.fields, Mapping):
            raise UserError(f"StateMapping(fields={self.fields!r}): expected {{pack field path: state key}}")
        for path, key in self.fields.items():
            if not isinstance(path, str) or not path.strip() or not isinstance(key, str) or not key.strip():
                raise UserError(
                    f"StateMapping: {path!r}: {key!r} is no pair of names; expected {{pack field path: state key}} "
                    "as text, e.g. {'user_profile.credit_score': 'credit_score'}"
                )

    @classmethod
    def by_leaf_name(cls, pack_fields: Collection[str], **renamed: str) -> StateMapping:
        """Each pack field from the framework key of its last name (``user_profile.credit_score`` ←
        ``credit_score``); ``renamed``: leaf name → another key (``loan_amount="amount"``)."""
        leaves = [p.rsplit(".", 1)[-1] for p in pack_fields]
        clashes = sorted({leaf for leaf in leaves if leaves.count(leaf) > 1})
        if clashes:
            raise UserError(
                f"StateMapping.by_leaf_name: pack fields share the last name(s) {clashes}; declare "
                "those fields with StateMapping({'<group>.<field>': '<key>', ...}) instead"
            )
        unknown = sorted(set(renamed) - set(leaves))
        if unknown:
            raise UserError(f"StateMapping.by_leaf_name: {unknown} are not field names of the pack ({sorted(leaves)})")
        return cls({p: renamed.get(leaf, leaf) for p, leaf in zip(pack_fields, leaves)})

    def read(self, source: Any) -> dict[str, Any]:
        """The pack's state (nested by field path) from the framework's state."""
        flat = {path: _read(source, key) for path, key in self.fields.items()}
        return _nest({p: v for p, v in flat.items() if v is not None})


def observed_fields(pack_path: str | Path) -> list[str]:
    """The pack's observed state field paths (what a policy reads), for :meth:`StateMapping.by_leaf_name`."""
    return [f.path for f in DecisionProgram.from_pack(pack_path).spec.fields if f.observed]


class ActionNames:
    """The agent's names for its tools → the pack's actions.

    ``actions``: the pack's action names (a tool named as one is that action); ``names``: the agent's
    tool name → the pack action it performs, or None for a tool that is no decision (a web search), so
    it is skipped without a warning. Any other name is counted in :attr:`unknown` and named in one
    warning the first time it is met, with the mapping that fixes it: ``where`` names the mapping's
    owner (``ToolCallRecorder(action_names=...)``), ``hint`` is the entry to add, a template of
    ``{name}`` (the tool's name, quoted) and ``{actions}`` (the pack's)."""

    def __init__(
        self, actions: Sequence[str], names: Mapping[str, str | None] | None = None, *, where: str, hint: str
    ) -> None:
        self.actions, self.where, self.hint = tuple(actions), where, hint
        self.names = dict(names or {})
        wrong = {tool: a for tool, a in self.names.items() if a is not None and a not in self.actions}
        if wrong:
            raise UserError(f"{where}: {wrong} map tools to no pack action; expected one of {list(self.actions)}")
        self.unknown: Counter[str] = Counter()

    def performs(self, name: str) -> str | None:
        """The pack action the tool ``name`` performs, None for any other, counting nothing: for
        looking a tool up (which of the agent's tools performs the policy's choice), not for a call."""
        if name in self.names:
            return self.names[name]
        return name if name in self.actions else None

    def action(self, name: str) -> str | None:
        """The pack action a call of the tool ``name`` performs; None for a tool that is no pack action
        (counted and, the first time, named in a warning unless declared no decision)."""
        if name in self.names or name in self.actions:
            return self.performs(name)
        self.unknown[name] += 1
        if self.unknown[name] == 1:
            log.warning(
                "rlops: the agent's tool %r is no pack action and %s does not map it: its calls are not traced "
                "(unmapped so far: %s). Declare it there: %s",
                name,
                self.where,
                sorted(self.unknown),
                self.hint.format(name=repr(name), actions=list(self.actions)),
            )
        return None


#: ``result -> (latency_ms, error)``: a tool's own report of how long it took and what failed (None:
#: not reported; the wall clock and exceptions then say).
OutcomeFn = Callable[[Any], tuple[Any, Any]]


@dataclass(frozen=True)
class ToolOutcome:
    """Reads a tool's latency and error from its result (a dict or an object; dotted keys reach into
    nested ones): ``ToolOutcome(latency_key="latency_ms", error_key="error")``. A key the result lacks
    reads as None."""

    latency_key: str | None = None
    error_key: str | None = None

    def __call__(self, result: Any) -> tuple[Any, Any]:
        latency = None if self.latency_key is None else _read(result, self.latency_key)
        error = None if self.error_key is None else _read(result, self.error_key)
        return latency, error


def error_text(error: Any) -> str | None:
    """A reported error as the trace's ``error`` text: None for what reads as no error (None, False,
    ``""``, ``"none"``…), ``"error"`` for True, JSON for a dict or list, else its text."""
    if not is_error(error):
        return None
    if error is True:
        return "error"
    if isinstance(error, str):
        return error
    if isinstance(error, (Mapping, list, tuple)):
        return json.dumps(error, default=str, sort_keys=True)
    return str(error)


class OutcomeReader:
    """Applies an :data:`OutcomeFn` to tool results without ever breaking the agent: a hook that raises
    or reports a latency that is no finite number ≥ 0 is warned about once, and the wall clock and the
    exception stand for what it did not say."""

    def __init__(self, fn: OutcomeFn, where: str) -> None:
        self.fn, self.where = fn, where
        self._warned: set[str] = set()

    def __call__(self, result: Any) -> tuple[float | None, str | None]:
        try:
            latency, error = self.fn(result)
        except Exception as exc:  # noqa: BLE001 - a broken hook must not break the agent's run
            self._warn("raised", f"{self.where}'s outcome hook raised {type(exc).__name__}: {exc}")
            return None, None
        if latency is None or isinstance(latency, bool):
            return None, error_text(error)
        try:
            ms = float(latency)
        except (TypeError, ValueError):
            ms = math.nan
        if not math.isfinite(ms) or ms < 0:
            self._warn("latency", f"{self.where}'s outcome hook read the latency {latency!r} (expected ms >= 0)")
            return None, error_text(error)
        return ms, error_text(error)

    def _warn(self, kind: str, text: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning("rlops: %s; the wall clock and exceptions stand for it", text)


def outcome_reader(outcome: OutcomeFn | None, where: str) -> OutcomeReader | None:
    return None if outcome is None else OutcomeReader(outcome, where)


@dataclass(frozen=True)
class EpisodeContext:
    """What the next decision of an episode knows besides the pack's state fields: the sandbox's
    ``episode.*`` variables as a served policy must see them (``docs/scenario-dsl.md``, section 4).

    ``history``: the actions taken so far, oldest first (``episode.last_action``,
    ``episode.repeat_count`` and the policy's action history); ``step``: how many
    (``episode.step``); ``elapsed_ms``: the summed latency of their tools (``episode.elapsed_ms``: the
    sandbox adds each step's latency, the same ``latency_ms`` the trace rows carry, not the
    wall-clock time the agent spent thinking between tools); ``last_error``: the last tool failed
    (``episode.error``)."""

    history: tuple[str, ...] = ()
    step: int = 0
    elapsed_ms: float = 0.0
    last_error: bool = False

    def after(self, action: str, *, latency_ms: float, error: Any) -> EpisodeContext:
        """The context once ``action`` ran, taking ``latency_ms`` and failing with ``error`` (None: it succeeded)."""
        return EpisodeContext(
            (*self.history, action), self.step + 1, self.elapsed_ms + max(float(latency_ms), 0.0), is_error(error)
        )

    def episode_fields(self) -> dict[str, Any]:
        """The keyword arguments of ``PolicyClient.decide`` and ``ActionMasker.mask`` besides the history."""
        return {"step": self.step, "elapsed_ms": self.elapsed_ms, "last_error": self.last_error}


class MaskFn(Protocol):
    """``(state, history, step, elapsed_ms, last_error) -> mask``: :meth:`ActionMasker.mask`."""

    def __call__(
        self,
        state: Mapping[str, Any],
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
    ) -> Sequence[bool]: ...


def pack_masks(pack_path: str | Path) -> tuple[tuple[str, ...], MaskFn]:
    """The pack's action names and a function ``(state, history, **episode) -> mask`` evaluating the
    actions' preconditions on one production state (:class:`~rlops.agent_sdk.masks.ActionMasker`: what a
    trace row's ``action_mask`` holds); pass an :class:`EpisodeContext`'s fields, as the sandbox
    evaluates the preconditions on its ``episode.*`` variables too."""
    masker = ActionMasker.from_pack(pack_path)
    return masker.action_names, masker.mask


def context_mask(mask: MaskFn, state: Mapping[str, Any], context: EpisodeContext) -> Sequence[bool]:
    """``mask`` of ``state`` in the episode ``context``."""
    return mask(state, context.history, **context.episode_fields())
