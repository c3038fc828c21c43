"""The reverse path: an agent that chooses its tools itself, traced from its framework's tool-call
events (a LangChain callback handler, an OpenAI Agents tracing processor) — one trace row per call of a
tool that performs a pack action. Framework-free; :mod:`rlops.integrations.core` re-exports it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlops.agent_sdk.encoding import StateError
from rlops.agent_sdk.interfaces import RewardProvider
from rlops.agent_sdk.rollout import RULES_VERSION, Episode
from rlops.agent_sdk.tracer import Tracer
from rlops.integrations.mapping import (
    AGENT_ROUTER,
    ActionNames,
    EpisodeContext,
    OutcomeFn,
    WiringError,
    agent_router_fields,
    context_mask,
    outcome_reader,
    pack_masks,
)

log = logging.getLogger(__name__)


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
    tool that performs a pack action: named as one, or mapped to one by ``action_names`` (the agent's
    tool name → the pack action, None for a tool that is no decision). Calls of other tools are counted
    in :attr:`skipped`, not traced; an unmapped name is counted in :attr:`unknown` and named in a warning
    the first time, with the mapping that fixes it.

    ``observer(episode_id)`` returns the pack's state when a tool starts (a
    :class:`~rlops.agent_sdk.interfaces.StateObserver`'s ``observe`` wrapped to take the episode id),
    unless the framework hands the state to :meth:`started`. ``policy_version``: what chose the tools.
    The default ``agent_router`` says the agent's own deterministic logic did (traced with propensity
    1, ``logp = 0``) — never ``rules``, which names the pack's rule engine (a row labelled so would be
    taken for rlops' fallback and judged as the rule engine's choice); an agent whose LLM chooses its
    tools is not deterministic: name it (e.g. ``"support-agent-v3"``) and its rows carry no
    propensity, so off-policy evaluation says it cannot weigh them instead of weighing them wrongly;
    ``deterministic=True`` says a named router is deterministic after all. Every row carries
    ``logging_policy: agent_router`` (in its ``extra``) and ``fallback`` false. Each row's
    ``action_mask`` is evaluated in the episode's :class:`EpisodeContext` of the calls finished by then.
    ``outcome``: a hook reading the tool's latency and error from its result (see
    :class:`~rlops.integrations.core.DecisionLoop`).
    """

    def __init__(
        self,
        tracer: Tracer,
        *,
        scenario: str,
        pack_path: str | Path,
        observer: Callable[[str], Mapping[str, Any]] | None = None,
        policy_version: str = AGENT_ROUTER,
        reward_provider: RewardProvider | None = None,
        source: str = "live",
        action_names: Mapping[str, str | None] | None = None,
        outcome: OutcomeFn | None = None,
        deterministic: bool | None = None,
    ) -> None:
        self.tracer, self.scenario, self.observer = tracer, scenario, observer
        self.policy_version, self.reward_provider, self.source = policy_version, reward_provider, source
        self.actions, self._mask = pack_masks(pack_path)
        self.names = ActionNames(
            self.actions,
            action_names,
            where="ToolCallRecorder(action_names=...)",
            hint="action_names={{{name}: <one of {actions}>}}, or {{{name}: None}} for a tool that is no decision",
        )
        if policy_version == RULES_VERSION or not str(policy_version).strip():
            raise WiringError(
                f"ToolCallRecorder(policy_version={policy_version!r}): the agent's own choices are "
                f"{AGENT_ROUTER!r} (the default) or your agent's name, e.g. 'support-agent-v3'; "
                f"{RULES_VERSION!r} is the pack's rule engine, which did not choose these tools"
            )
        self.deterministic = policy_version == AGENT_ROUTER if deterministic is None else deterministic
        self.tool_outcome = outcome_reader(outcome, "ToolCallRecorder")
        self.skipped = 0
        self._episodes: dict[str, _Traced] = {}
        self._calls: dict[str, _Call] = {}
        self._lock = threading.Lock()
        self._no_state_warned = False

    @property
    def unknown(self) -> dict[str, int]:
        """The tool names that are no pack action and not mapped, with their calls."""
        return dict(self.names.unknown)

    def started(self, episode_id: str, call_id: str, tool: str, state: Mapping[str, Any] | None = None) -> None:
        """A tool call began (``state``: the pack's state then, when the framework has it; else the
        observer's); a tool that performs no pack action is counted in :attr:`skipped`."""
        action = self.names.action(tool)
        if action is None:
            self.skipped += 1
            return
        if state is None:
            if self.observer is None:
                self.skipped += 1
                if not self._no_state_warned:  # a warning, not an error: tracing never breaks the agent
                    self._no_state_warned = True
                    log.warning(
                        "rlops: ToolCallRecorder has no observer and the call of %r came without a state; give "
                        "ToolCallRecorder(observer=lambda episode_id: <the pack's state>) to trace such calls",
                        tool,
                    )
                return
            state = self.observer(str(episode_id))
        traced = self._episode(str(episode_id))
        traced.episode.observe(state)
        try:
            mask: Sequence[bool] | None = context_mask(self._mask, state, traced.context)
        except StateError as exc:  # never break the agent: the row goes without a mask, quarantined saying so
            log.warning("rlops: no action mask for episode %s (%s)", episode_id, exc)
            mask = None
        self._calls[call_id] = _Call(str(episode_id), action, state, mask, time.perf_counter())

    def finished(self, call_id: str, error: str | None = None, result: Any = None) -> None:
        """The call ``call_id`` returned (``error``: what failed; ``result``: what it returned, read by
        the ``outcome`` hook for what ``error`` leaves unsaid and for the latency)."""
        call = self._calls.pop(call_id, None)
        if call is None:
            return
        traced = self._episode(call.episode_id)
        latency_ms = (time.perf_counter() - call.started) * 1e3
        if result is not None and self.tool_outcome is not None:
            reported_ms, reported_error = self.tool_outcome(result)
            latency_ms = latency_ms if reported_ms is None else reported_ms
            error = reported_error if error is None else error
        traced.context = traced.context.after(call.action, latency_ms=latency_ms, error=error)
        mask: dict[str, Any] = {} if call.mask is None else {"action_mask": list(call.mask)}
        fields = {**mask, **agent_router_fields(self.deterministic)}
        traced.episode.step(call.state, call.action, latency_ms=latency_ms, error=error, **fields)

    def end(self, episode_id: str, error: str | None = None, final_state: Mapping[str, Any] | None = None) -> None:
        """The agent's run for ``episode_id`` ended; its last traced step becomes ``done`` (scored by the
        reward provider on ``final_state``, when given)."""
        with self._lock:
            entry = self._episodes.pop(str(episode_id), None)
        if entry is not None:
            entry.episode.end(truncated=error is not None, error=error, final_state=final_state)

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
