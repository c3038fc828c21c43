"""OpenAI Agents SDK: the policy chooses the agent's next tool; the SDK's own traces become trace rows.

Forward path — :class:`PolicyToolChoice` wraps the agent's model: before each model call it asks the
policy for the next action (the state read from the run's context object by a
:class:`~rlops.integrations.core.StateMapping`) and offers the model that one tool with
``tool_choice`` set to it; once no action is legal any more (the pack's preconditions on the state),
the model gets no tool and answers. Its tracing processor records each tool's outcome (latency, the
span's error); :meth:`PolicyToolChoice.run` runs the agent as one episode::

    choice = PolicyToolChoice(DecisionLoop(client, tracer, scenario="credit_approval"), mapping, pack_path=PACK)
    agent = Agent(name="credit desk", tools=TOOLS, model=choice.model(my_model))
    await choice.run(agent, "Handle the application", context=application, episode_id=application.id)

Observe first — ``PolicyToolChoice(..., mode="observe")`` leaves the tool choice to the agent's own
model (offered all its tools, its settings unchanged) and records each call of a tool that performs
a pack action as the agent's choice: the state when the tool started, the mask, the pack action its
tool name is mapped to (``action_names={<the agent's tool name>: <the pack action>}``, None for a tool
that is no decision), ``logging_policy: agent_router`` with ``logp`` 0 (``agent_version=`` and
``deterministic=False`` name an LLM whose propensity is unknown: no ``logp``), and the tool's outcome
(the span's error; latency and error read from the tool's result by the loop's ``outcome`` hook, the
result as the function span holds it: the SDK keeps it while ``trace_include_sensitive_data`` is on,
its default). ``mode="serve"`` (the default) hands the same agent's tool choice to the policy; the
tool offered for the policy's action is the agent's tool mapped to it.

Reverse path — :class:`ToolSpanProcessor` (``agents.add_trace_processor(ToolSpanProcessor(recorder))``)
turns the function spans of an unchanged agent into trace rows, one episode per trace (its
``group_id`` when set, the conversation id, else the trace id).

Needs ``pip install './agent[openai-agents]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[openai-agents]'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlops.integrations import require
from rlops.integrations.core import DecisionLoop, StateMapping, ToolCallRecorder, context_mask, pack_masks
from rlops.integrations.mapping import (
    AGENT_ROUTER,
    MODES,
    ActionNames,
    ToolOutcome,
    WiringError,
    check_observe_arguments,
)

_EXTRA, _FRAMEWORK = "openai-agents", "the OpenAI Agents SDK"
#: (episode id, the run's context object) of the run in progress, read by the model wrapper.
_RUN: contextvars.ContextVar[tuple[str, Any] | None] = contextvars.ContextVar("rlops_agents_run", default=None)


def _agents() -> Any:
    return require("agents", _EXTRA, _FRAMEWORK)


def _span_events(
    on_start: Callable[[str, str, str], None],
    on_end: Callable[[str, str | None, Any], None],
    on_trace_end: Callable[[str], None] | None,
) -> Any:
    """A ``TracingProcessor`` calling ``on_start(episode_id, span_id, tool)`` and ``on_end(span_id, error,
    result)`` for each function span (``result``: the tool's output as the span holds it, None when the
    SDK keeps no sensitive data), and ``on_trace_end(episode_id)`` when a trace ends."""
    base = require("agents.tracing", _EXTRA, _FRAMEWORK).TracingProcessor
    function_span = require("agents.tracing.span_data", _EXTRA, _FRAMEWORK).FunctionSpanData

    class ToolSpans(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
        def __init__(self) -> None:
            self.episodes: dict[str, str] = {}  # trace id → episode id

        def on_trace_start(self, trace: Any) -> None:
            self.episodes[trace.trace_id] = str(getattr(trace, "group_id", None) or trace.trace_id)

        def on_trace_end(self, trace: Any) -> None:
            episode_id = self.episodes.pop(trace.trace_id, None)
            if episode_id is not None and on_trace_end is not None:
                on_trace_end(episode_id)

        def on_span_start(self, span: Any) -> None:
            if isinstance(span.span_data, function_span) and span.trace_id in self.episodes:
                on_start(self.episodes[span.trace_id], span.span_id, span.span_data.name)

        def on_span_end(self, span: Any) -> None:
            if isinstance(span.span_data, function_span):
                err = span.error
                text = None if not err else str((err.get("data") or {}).get("error") or err.get("message"))
                on_end(span.span_id, text, span.span_data.output)

        def shutdown(self) -> None:
            self.episodes.clear()

        def force_flush(self) -> None:
            return None

    return ToolSpans()


@dataclass(frozen=True)
class _ChosenCall:
    """A call of a tool the agent's own model chose (observe mode), in flight."""

    episode_id: str
    action: str
    state: Mapping[str, Any]
    started: float


class PolicyToolChoice:
    """The policy as the tool choice of an OpenAI Agents SDK agent, or the agent's own choices
    recorded (see the module docstring).

    ``loop``: the decision loop; ``mapping``: the run context object → the pack's fields;
    ``pack_path``: the pack (its preconditions tell when no action is left and the agent should answer).
    ``mode``: ``serve`` (the policy chooses each tool) or ``observe`` (the agent's model chooses and each
    choice is recorded as ``agent_version``'s, ``logp`` 0 when ``deterministic``); ``action_names``: the
    agent's tool name → the pack action it performs (None: no decision), in both modes; a tool named
    otherwise and unmapped is counted in :attr:`unknown` and named once in a warning.
    """

    def __init__(
        self,
        loop: DecisionLoop,
        mapping: StateMapping,
        *,
        pack_path: str | Path,
        mode: str = "serve",
        action_names: Mapping[str, str | None] | None = None,
        agent_version: str = AGENT_ROUTER,
        deterministic: bool = True,
    ) -> None:
        self._sdk = _agents()
        check_observe_arguments("PolicyToolChoice", mode, agent_version, deterministic)
        if mode == "observe" and loop.pack_actions is None:
            raise WiringError(
                "PolicyToolChoice(mode='observe'): the loop's policy has no pack encoder for the masks of the "
                "agent's choices; give DecisionLoop(pack_path=<the pack>)"
            )
        self.loop, self.mapping, self.mode = loop, mapping, mode
        self.agent_version, self.deterministic = agent_version, deterministic
        actions, self._mask = pack_masks(pack_path)
        self.names = ActionNames(
            actions,
            action_names,
            where="PolicyToolChoice(action_names=...)",
            hint="action_names={{{name}: <one of {actions}>}}, or {{{name}: None}} for a tool that is no decision",
        )
        self._outcomes: dict[str, str] = {}  # span id → episode id (serve)
        self._chosen: dict[str, _ChosenCall] = {}  # span id → the agent's call (observe)
        self._contexts: dict[str, Any] = {}  # episode id → the run's context object, while it runs
        self.processor = _span_events(self._tool_started, self._tool_ended, None)
        self._registered = False

    @property
    def unknown(self) -> dict[str, int]:
        """The agent's tools it called in observe mode that are no pack action and not mapped, with their calls."""
        return dict(self.names.unknown)

    def _tool_started(self, episode_id: str, span_id: str, tool: str) -> None:
        if self.mode == "serve":
            d = self.loop.pending(episode_id)
            if d is not None and self.names.performs(tool) == d.action:
                self._outcomes[span_id] = episode_id
            return
        if episode_id not in self._contexts:  # a trace of another run than PolicyToolChoice.run's
            return
        action = self.names.action(tool)
        if action is not None:
            state = self.mapping.read(self._contexts[episode_id])
            self._chosen[span_id] = _ChosenCall(episode_id, action, state, time.perf_counter())

    def _tool_ended(self, span_id: str, error: str | None, result: Any) -> None:
        episode_id = self._outcomes.pop(span_id, None)
        if episode_id is not None:
            self.loop.outcome(episode_id, error=error, result=result)
        call = self._chosen.pop(span_id, None)
        if call is not None:  # recorded once it ran: the SDK runs a response's tool calls side by side
            self.loop.observed(
                call.episode_id,
                call.state,
                call.action,
                policy_version=self.agent_version,
                deterministic=self.deterministic,
                chosen_at=call.started,
            )
            self.loop.outcome(call.episode_id, error=error, result=result)

    def _serve(
        self, episode_id: str, state: Mapping[str, Any], tools: list[Any], settings: Any
    ) -> tuple[list[Any], Any]:
        """The policy's tool for the next model call: the agent's tool performing its action."""
        if not any(context_mask(self._mask, state, self.loop.context(episode_id))):  # the model answers
            return [], settings.resolve(self._sdk.ModelSettings(tool_choice="none"))
        d = self.loop.decide(episode_id, state)
        offered = [t for t in tools if self.names.performs(str(getattr(t, "name", ""))) == d.action]
        if not offered:
            names = sorted(str(getattr(t, "name", t)) for t in tools)
            raise WiringError(
                f"PolicyToolChoice: the policy chose {d.action!r} for episode {episode_id}, and none of the agent's "
                f"tools {names} performs it; give the agent a tool for it, or map the tool that performs it: "
                f"action_names={{<its name>: {d.action!r}}}"
            )
        return offered[:1], settings.resolve(self._sdk.ModelSettings(tool_choice=offered[0].name))

    def model(self, inner: Any) -> Any:
        """``inner`` (the agent's ``Model``) with the policy's tool choice before each call."""
        choice, base = self, self._sdk.Model

        class PolicyModel(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            def _offer(self, tools: list[Any], settings: Any) -> tuple[list[Any], Any]:
                run = _RUN.get()
                if run is None:
                    raise RuntimeError("PolicyToolChoice: run the agent with PolicyToolChoice.run(...)")
                if choice.mode == "observe":  # the agent's model chooses among all its tools
                    return tools, settings
                episode_id, context = run
                return choice._serve(episode_id, choice.mapping.read(context), tools, settings)

            async def get_response(
                self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *a: Any, **kw: Any
            ) -> Any:
                offered, settings = self._offer(list(tools), model_settings)
                return await inner.get_response(system_instructions, input, settings, offered, *a, **kw)

            def stream_response(
                self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *a: Any, **kw: Any
            ) -> Any:
                offered, settings = self._offer(list(tools), model_settings)
                return inner.stream_response(system_instructions, input, settings, offered, *a, **kw)

        return PolicyModel()

    async def run(self, agent: Any, input: Any, *, context: Any, episode_id: str, **kwargs: Any) -> Any:
        """``Runner.run(agent, input, context=context, ...)`` as the episode ``episode_id``."""
        if not self._registered:
            self._sdk.add_trace_processor(self.processor)
            self._registered = True
        given = kwargs.pop("run_config", None) or self._sdk.RunConfig()
        run_config = dataclasses.replace(given, group_id=str(episode_id))  # the caller's config stays as it is
        token = _RUN.set((str(episode_id), context))
        self._contexts[str(episode_id)] = context
        try:
            result = await self._sdk.Runner.run(agent, input, context=context, run_config=run_config, **kwargs)
        except Exception as exc:
            self.loop.end(str(episode_id), error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _RUN.reset(token)
            self._contexts.pop(str(episode_id), None)
        self.loop.end(str(episode_id), final_state=self.mapping.read(context))
        return result


def ToolSpanProcessor(recorder: ToolCallRecorder) -> Any:  # noqa: N802 - a factory standing for the class
    """A tracing processor that records the function spans of an unchanged agent through ``recorder``,
    one episode per trace (``group_id`` when set, else the trace id)."""
    return _span_events(recorder.started, recorder.finished, recorder.end)


__all__ = [
    "MODES",
    "DecisionLoop",
    "PolicyToolChoice",
    "StateMapping",
    "ToolCallRecorder",
    "ToolOutcome",
    "ToolSpanProcessor",
    "WiringError",
]
