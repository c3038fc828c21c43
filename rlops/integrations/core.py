"""What every framework adapter shares, free of any framework.

* :class:`DecisionLoop` — the forward path: asks the policy (a
  :class:`~rlops.agent_sdk.policy_client.PolicyClient`, which falls back to the pack's rule engine) for
  the next action of an episode, and traces each step — state, mask, action, propensity, serving
  version — with the executed tool's outcome (latency, error) and the reward provider's score once
  the next state is known. Each decision gets the episode's :class:`EpisodeContext` (the actions so
  far, the step, the elapsed tool time, whether the last tool failed): the ``episode.*`` variables the
  sandbox trains the policy with, so the policy serves on the state it learnt on. In observe mode
  (:meth:`DecisionLoop.observed`) the agent's own router decides and the loop records its choices;
* :class:`ToolCallRecorder` — the reverse path: an agent that chooses its tools itself is traced from
  its framework's tool-call events, its tool names mapped to the pack's actions, the state read by a
  state observer (or given by the framework) when a tool starts.

Both read a tool's latency and error from its result when given an ``outcome`` hook
(:class:`~rlops.integrations.mapping.ToolOutcome`); the declared mappings (state, tool names,
outcomes) live in :mod:`rlops.integrations.mapping` and are re-exported here.

Steps are written by :class:`~rlops.agent_sdk.rollout.Episode`, so a framework's episode is the same
episode (id, steps, ``done``) as with the SDK by hand, and a duplicate check sees it as one.
"""

from __future__ import annotations

import inspect
import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rlops.agent_sdk.encoding import ObservationEncoder, StateError
from rlops.agent_sdk.interfaces import RewardProvider
from rlops.agent_sdk.masks import ActionMasker
from rlops.agent_sdk.rollout import RULES_VERSION, Episode
from rlops.agent_sdk.serving import Decision
from rlops.agent_sdk.tracer import Tracer
from rlops.common.errors import UserError
from rlops.integrations.mapping import (
    AGENT_ROUTER,
    MODES,
    ActionNames,
    EpisodeContext,
    MaskFn,
    OutcomeFn,
    StateMapping,
    ToolOutcome,
    WiringError,
    agent_router_fields,
    context_mask,
    observed_fields,
    outcome_reader,
    pack_masks,
)
from rlops.integrations.tool_calls import ToolCallRecorder

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
    serving: Mapping[str, Any] = field(default_factory=dict)
    """The pending decision's serving columns (policy version, mask, logp…)."""


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

    ``outcome``: a hook reading a tool's own report from its result, ``result -> (latency_ms, error)``
    (e.g. :class:`~rlops.integrations.mapping.ToolOutcome` of declared keys), applied to the ``result``
    given to :meth:`outcome`; what it does not report (None) is measured by the wall clock.
    ``pack_path``: the pack whose preconditions give the masks of :meth:`observed` decisions (default:
    the policy's own, a :class:`~rlops.agent_sdk.policy_client.PolicyClient`'s encoder).
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
        outcome: OutcomeFn | None = None,
        pack_path: str | Path | None = None,
    ) -> None:
        self.policy, self.tracer, self.scenario = policy, tracer, scenario
        self.reward_provider, self.source, self.reward_fn_version = reward_provider, source, reward_fn_version
        self.actions = None if actions is None else frozenset(actions)
        self.tool_outcome = outcome_reader(outcome, "DecisionLoop")
        encoder = getattr(policy, "encoder", None)
        if pack_path is not None:
            self.masker: ActionMasker | None = ActionMasker.from_pack(pack_path)
        else:
            self.masker = ActionMasker(encoder) if isinstance(encoder, ObservationEncoder) else None
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
        run.pending, run.state, run.fields, run.serving = decision, state, {}, decision.trace_fields()
        run.decided_at = time.perf_counter()
        self.decision_ms.append((run.decided_at - t0) * 1e3)
        return decision

    @property
    def pack_actions(self) -> tuple[str, ...] | None:
        """The pack's action names, when the loop knows the pack (``pack_path``, or the policy's encoder)."""
        return None if self.masker is None else self.masker.action_names

    def observed(
        self,
        episode_id: str,
        state: Mapping[str, Any],
        action: str,
        *,
        policy_version: str = RULES_VERSION,
        deterministic: bool = True,
        trace_id: str | None = None,
        chosen_at: float | None = None,
    ) -> Decision:
        """Record that the agent's own router chose ``action`` (a pack action) for ``episode_id`` in
        ``state``, the policy not asked: observe mode. The row carries the mask of the pack's
        preconditions in the episode's context, ``policy_version`` (what chose), ``logging_policy:
        agent_router`` and, for a ``deterministic`` router, ``logp`` 0 (else none: its propensity is
        unknown). Its outcome is recorded as a decided step's is. ``chosen_at``: when the choice was
        made (``time.perf_counter()``; default now), for a choice recorded once its tool has run (the
        wall clock of the tool then counts from the choice, not from the recording)."""
        if self.masker is None:
            raise WiringError(
                "DecisionLoop.observed: recording the agent's own choices needs the pack's action masks, and the "
                f"policy ({type(self.policy).__name__}) has no pack encoder; give DecisionLoop(pack_path=<the pack>)"
            )
        names = self.masker.action_names
        if action not in names:
            raise UserError(f"DecisionLoop.observed: {action!r} is no pack action; expected one of {list(names)}")
        t0 = time.perf_counter()
        run = self._episode(str(episode_id), trace_id)
        if run.pending is not None:
            self._record(run, error=None, latency_ms=(t0 - run.decided_at) * 1e3)
        run.episode.observe(state)
        try:
            mask: list[bool] | None = list(context_mask(self.masker.mask, state, run.context))
        except StateError as exc:  # never break the agent: the row goes without a mask, quarantined saying so
            log.warning("rlops: no action mask for episode %s (%s)", episode_id, exc)
            mask = None
        decision = Decision(action, names.index(action), mask or [], None, 1.0, None, None, policy_version, "")
        serving = {**decision.trace_fields(), "test_group": None, **agent_router_fields(deterministic)}
        if mask is None:
            serving.pop("action_mask")
        run.pending, run.state, run.fields, run.serving = decision, state, {}, serving
        recorded = time.perf_counter()
        run.decided_at = recorded if chosen_at is None else min(chosen_at, recorded)
        self.decision_ms.append((recorded - t0) * 1e3)
        return decision

    def no_legal_action(self, episode_id: str, state: Mapping[str, Any]) -> bool:
        """Whether no pack action is legal in ``state`` after the episode's steps so far (its episode is
        over, as the sandbox ends one); False where the loop knows no pack or cannot read the state."""
        if self.masker is None:
            return False
        try:
            return not any(context_mask(self.masker.mask, state, self.context(episode_id)))
        except StateError:  # the policy says what is wrong with the state when asked
            return False

    def serving_fields(self, episode_id: str) -> dict[str, Any]:
        """The serving columns the pending decision of ``episode_id`` will be recorded with."""
        run = self._open.get(str(episode_id))
        return {} if run is None or run.pending is None else dict(run.serving)

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

    def outcome(
        self, episode_id: str, *, error: str | None = None, latency_ms: float | None = None, result: Any = None
    ) -> None:
        """The pending decision's tool ran (``error``: what failed, None on success). ``result``: what the
        tool returned, read by the ``outcome`` hook for what ``error`` and ``latency_ms`` leave unsaid."""
        run = self._open.get(str(episode_id))
        if run is None or run.pending is None:
            return
        if result is not None and self.tool_outcome is not None:
            reported_ms, reported_error = self.tool_outcome(result)
            latency_ms = reported_ms if latency_ms is None else latency_ms
            error = reported_error if error is None else error
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
            **{**run.fields, **run.serving},
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


__all__ = [
    "AGENT_ROUTER",
    "ActionNames",
    "DecisionLoop",
    "EpisodeContext",
    "MODES",
    "MaskFn",
    "Policy",
    "StateMapping",
    "ToolCallRecorder",
    "ToolOutcome",
    "WiringError",
    "context_mask",
    "observed_fields",
    "pack_masks",
]
