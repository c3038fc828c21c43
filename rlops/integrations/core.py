"""What every framework adapter shares, free of any framework.

* :class:`StateMapping` — the declared mapping from the framework's state (a LangGraph state dict,
  a context object) to the pack's state fields;
* :class:`DecisionLoop` — the forward path: asks the policy (a
  :class:`~rlops.agent_sdk.policy_client.PolicyClient`, which falls back to the pack's rule engine) for
  the next action of an episode, and traces each step — state, mask, action, propensity, serving
  version — with the executed tool's outcome (latency, error) and the reward provider's score once
  the next state is known. Each decision gets the episode's :class:`EpisodeContext` (the actions so
  far, the step, the elapsed tool time, whether the last tool failed): the ``episode.*`` variables the
  sandbox trains the policy with, so the policy serves on the state it learnt on;
* :class:`ToolCallRecorder` — the reverse path: an agent that chooses its tools itself is traced from
  its framework's tool-call events, the state read by a state observer when a tool starts.

Steps are written by :class:`~rlops.agent_sdk.rollout.Episode`, so a framework's episode is the same
episode (id, steps, ``done``) as with the SDK by hand, and a duplicate check sees it as one.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.agent_sdk.encoding import StateError
from rlops.agent_sdk.interfaces import RewardProvider
from rlops.agent_sdk.masks import ActionMasker
from rlops.agent_sdk.rollout import RULES_VERSION, Episode
from rlops.agent_sdk.serving import Decision
from rlops.agent_sdk.tracer import Tracer, is_error
from rlops.common.errors import UserError

log = logging.getLogger(__name__)


class Policy(Protocol):
    """What decides: :class:`~rlops.agent_sdk.policy_client.PolicyClient` (or anything answering alike).

    ``step``, ``elapsed_ms`` and ``last_error`` are the episode's :class:`EpisodeContext`; a policy
    whose ``decide`` does not take them is still called (without them), with a warning."""

    def decide(
        self,
        state: Mapping[str, Any],
        key: str | None = None,
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
    ) -> Decision: ...


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


_CONTEXT_KEYWORDS = frozenset({"step", "elapsed_ms", "last_error"})


def _takes_context(policy: Policy) -> bool:
    """Whether ``policy.decide`` accepts the :class:`EpisodeContext` keywords."""
    try:
        params = inspect.signature(policy.decide).parameters
    except (TypeError, ValueError):
        return True  # a callable that hides its signature: trust it to take what PolicyClient takes
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    return set(params) >= _CONTEXT_KEYWORDS


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


@dataclass
class _Open:
    """An episode in progress: its steps, what the recorded steps add up to and the decision awaiting
    its outcome."""

    episode: Episode
    context: EpisodeContext = field(default_factory=EpisodeContext)
    pending: Decision | None = None
    state: Mapping[str, Any] | None = None
    decided_at: float = 0.0
    fields: Mapping[str, Any] = field(default_factory=dict)


class DecisionLoop:
    """Decides each step of an agent's episodes with ``policy`` and traces it.

    ``decide(episode_id, state)`` records the state (the previous step's next state), asks the policy
    (``key`` = the episode id, for the A/B split; ``history``, ``step``, ``elapsed_ms`` and
    ``last_error`` from the episode's :class:`EpisodeContext`) and returns the
    :class:`~rlops.agent_sdk.serving.Decision`; ``outcome(episode_id, error=…)`` records the step once
    its tool has run; ``end(episode_id)`` marks the last step ``done``. A decision whose outcome was
    never reported is recorded at the next decision with the time between the two as its latency
    (and no error). :attr:`decision_ms` holds how long each decision took inside the agent (mapping,
    policy, tracing).
    """

    def __init__(
        self,
        policy: Policy,
        tracer: Tracer,
        *,
        scenario: str,
        reward_provider: RewardProvider | None = None,
        source: str = "live",
        reward_fn_version: str | None = None,
        actions: Collection[str] | None = None,
    ) -> None:
        self.policy, self.tracer, self.scenario = policy, tracer, scenario
        self.reward_provider, self.source, self.reward_fn_version = reward_provider, source, reward_fn_version
        self.actions = None if actions is None else frozenset(actions)
        self.decision_ms: list[float] = []
        self._open: dict[str, _Open] = {}
        self._lock = threading.Lock()
        self._policy_takes_context = _takes_context(policy)
        if not self._policy_takes_context:
            log.warning(
                "rlops: %s.decide takes no step/elapsed_ms/last_error: it decides every state as if no time had "
                "passed and no tool had failed, which the sandbox's policy was not trained on",
                type(policy).__name__,
            )

    def _episode(self, episode_id: str, trace_id: str | None) -> _Open:
        with self._lock:
            run = self._open.get(episode_id)
            if run is None:
                ep = Episode(
                    self.tracer,
                    scenario=self.scenario,
                    policy_version=RULES_VERSION,
                    source=self.source,
                    reward_fn_version=self.reward_fn_version,
                    trace_id=trace_id or episode_id,
                    episode_id=episode_id,
                    reward_provider=self.reward_provider,
                )
                run = self._open[episode_id] = _Open(ep)
            return run

    def decide(self, episode_id: str, state: Mapping[str, Any], trace_id: str | None = None) -> Decision:
        """The next action of ``episode_id`` in ``state`` (the pack's nested fields)."""
        t0 = time.perf_counter()
        run = self._episode(str(episode_id), trace_id)
        if run.pending is not None:
            self._record(run, error=None, latency_ms=(t0 - run.decided_at) * 1e3)
        run.episode.observe(state)
        ctx = run.context
        if self._policy_takes_context:
            decision = self.policy.decide(state, key=str(episode_id), history=ctx.history, **ctx.episode_fields())
        else:
            decision = self.policy.decide(state, key=str(episode_id), history=ctx.history)
        if self.actions is not None and decision.action not in self.actions:
            raise UserError(
                f"the policy chose {decision.action!r} for episode {episode_id}, but the agent has no tool for it "
                f"(its tools: {sorted(self.actions)}); give the agent a tool per pack action"
            )
        run.pending, run.state, run.fields = decision, state, {}
        run.decided_at = time.perf_counter()
        self.decision_ms.append((run.decided_at - t0) * 1e3)
        return decision

    def annotate(self, episode_id: str, **fields: Any) -> None:
        """More columns for the pending decision's row (names the contract does not know land in its
        ``extra``), e.g. the speaking ``role`` of a team."""
        run = self._open.get(str(episode_id))
        if run is not None and run.pending is not None:
            run.fields = {**run.fields, **fields}

    def history(self, episode_id: str) -> list[str]:
        """The actions ``episode_id`` took so far, the pending decision's included."""
        return list(self.context(episode_id).history)

    def context(self, episode_id: str) -> EpisodeContext:
        """What the next decision of ``episode_id`` will be given: the recorded steps, and the pending
        decision as it would be recorded now (succeeded, its latency the time since it was made)."""
        run = self._open.get(str(episode_id))
        if run is None:
            return EpisodeContext()
        if run.pending is None:
            return run.context
        waited = (time.perf_counter() - run.decided_at) * 1e3
        return run.context.after(run.pending.action, latency_ms=waited, error=None)

    def pending(self, episode_id: str) -> Decision | None:
        """The decision of ``episode_id`` whose outcome is not recorded yet."""
        run = self._open.get(str(episode_id))
        return None if run is None else run.pending

    def outcome(self, episode_id: str, *, error: str | None = None, latency_ms: float | None = None) -> None:
        """The pending decision's tool ran (``error``: what failed, None on success)."""
        run = self._open.get(str(episode_id))
        if run is None or run.pending is None:
            return
        measured = (time.perf_counter() - run.decided_at) * 1e3
        self._record(run, error=error, latency_ms=measured if latency_ms is None else latency_ms)

    def _record(self, run: _Open, *, error: str | None, latency_ms: float) -> None:
        decision, state = run.pending, run.state
        assert decision is not None and state is not None
        run.pending = None
        run.context = run.context.after(decision.action, latency_ms=latency_ms, error=error)
        run.episode.step(
            state,
            decision.action,
            latency_ms=latency_ms,
            error=error,
            **{**run.fields, **decision.trace_fields()},
        )

    def end(self, episode_id: str, *, error: str | None = None, final_state: Mapping[str, Any] | None = None) -> None:
        """The episode ended (``error``: it was cut short by one); its last step becomes ``done``, scored
        by the reward provider on ``final_state`` (the pack's fields after the last action) when given."""
        with self._lock:
            run = self._open.pop(str(episode_id), None)
        if run is None:
            return
        if run.pending is not None:
            self._record(run, error=error, latency_ms=(time.perf_counter() - run.decided_at) * 1e3)
        run.episode.end(truncated=error is not None, error=error, final_state=final_state)

    @property
    def open_episodes(self) -> list[str]:
        return list(self._open)


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


@dataclass
class _Call:
    episode_id: str
    action: str
    state: Mapping[str, Any]
    mask: Sequence[bool] | None
    started: float


@dataclass
class _Traced:
    """An episode traced from tool calls: its steps and what its finished calls add up to."""

    episode: Episode
    context: EpisodeContext = field(default_factory=EpisodeContext)


class ToolCallRecorder:
    """Traces the tool calls an agent makes on its own (its framework's events), one step per call of a
    tool named as a pack action; calls of other tools are counted in :attr:`skipped`, not traced.

    ``observer(episode_id)`` returns the pack's state when a tool starts (a
    :class:`~rlops.agent_sdk.interfaces.StateObserver`'s ``observe`` wrapped to take the episode id);
    ``policy_version``: what chose the tools. The default ``rules`` says the agent's own deterministic
    logic did (traced with propensity 1, ``logp = 0``); an agent whose LLM chooses its tools is not
    deterministic: name it (e.g. ``"support-agent-v3"``) and its rows carry no propensity, so
    off-policy evaluation says it cannot weigh them instead of weighing them wrongly. Each row's
    ``action_mask`` is evaluated in the episode's :class:`EpisodeContext` of the calls finished by then.
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        scenario: str,
        pack_path: str | Path,
        observer: Callable[[str], Mapping[str, Any]],
        policy_version: str = RULES_VERSION,
        reward_provider: RewardProvider | None = None,
        source: str = "live",
    ) -> None:
        self.tracer, self.scenario, self.observer = tracer, scenario, observer
        self.policy_version, self.reward_provider, self.source = policy_version, reward_provider, source
        self.actions, self._mask = pack_masks(pack_path)
        self.skipped = 0
        self._episodes: dict[str, _Traced] = {}
        self._calls: dict[str, _Call] = {}
        self._lock = threading.Lock()

    def started(self, episode_id: str, call_id: str, tool: str) -> None:
        """A tool call began; a tool that is no pack action is counted in :attr:`skipped`."""
        if tool not in self.actions:
            self.skipped += 1
            return
        traced = self._episode(str(episode_id))
        state = self.observer(str(episode_id))
        traced.episode.observe(state)
        try:
            mask: Sequence[bool] | None = context_mask(self._mask, state, traced.context)
        except StateError as exc:  # never break the agent: the row goes without a mask, quarantined saying so
            log.warning("rlops: no action mask for episode %s (%s)", episode_id, exc)
            mask = None
        self._calls[call_id] = _Call(str(episode_id), tool, state, mask, time.perf_counter())

    def finished(self, call_id: str, error: str | None = None) -> None:
        """The call ``call_id`` returned (``error``: what failed)."""
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        traced = self._episode(call.episode_id)
        latency_ms = (time.perf_counter() - call.started) * 1e3
        traced.context = traced.context.after(call.action, latency_ms=latency_ms, error=error)
        mask: dict[str, Any] = {} if call.mask is None else {"action_mask": list(call.mask)}
        traced.episode.step(call.state, call.action, latency_ms=latency_ms, error=error, **mask)

    def end(self, episode_id: str, error: str | None = None) -> None:
        """The agent's run for ``episode_id`` ended; its last traced step becomes ``done``."""
        with self._lock:
            entry = self._episodes.pop(str(episode_id), None)
        if entry is not None:
            entry.episode.end(truncated=error is not None, error=error)

    def _episode(self, episode_id: str) -> _Traced:
        with self._lock:
            entry = self._episodes.get(episode_id)
            if entry is None:
                ep = Episode(
                    self.tracer,
                    scenario=self.scenario,
                    policy_version=self.policy_version,
                    source=self.source,
                    trace_id=episode_id,
                    episode_id=episode_id,
                    reward_provider=self.reward_provider,
                )
                entry = self._episodes[episode_id] = _Traced(ep)
            return entry
