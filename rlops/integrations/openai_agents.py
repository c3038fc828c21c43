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

Reverse path — :class:`ToolSpanProcessor` (``agents.add_trace_processor(ToolSpanProcessor(recorder))``)
turns the function spans of an unchanged agent into trace rows, one episode per trace (its
``group_id`` when set, the conversation id, else the trace id).

Needs ``pip install './agent[openai-agents]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[openai-agents]'``.
"""

from __future__ import annotations

import contextvars
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlops.integrations import require
from rlops.integrations.core import DecisionLoop, StateMapping, ToolCallRecorder, context_mask, pack_masks

_EXTRA, _FRAMEWORK = "openai-agents", "the OpenAI Agents SDK"
#: (episode id, the run's context object) of the run in progress, read by the model wrapper.
_RUN: contextvars.ContextVar[tuple[str, Any] | None] = contextvars.ContextVar("rlops_agents_run", default=None)


def _agents() -> Any:
    return require("agents", _EXTRA, _FRAMEWORK)


def _span_events(
    on_start: Callable[[str, str, str], None],
    on_end: Callable[[str, str | None], None],
    on_trace_end: Callable[[str], None] | None,
) -> Any:
    """A ``TracingProcessor`` calling ``on_start(episode_id, span_id, tool)`` and ``on_end(span_id, error)``
    for each function span, and ``on_trace_end(episode_id)`` when a trace ends."""
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
                on_end(span.span_id, text)

        def shutdown(self) -> None:
            self.episodes.clear()

        def force_flush(self) -> None:
            return None

    return ToolSpans()


class PolicyToolChoice:
    """The policy as the tool choice of an OpenAI Agents SDK agent (see the module docstring).

    ``loop``: the decision loop; ``mapping``: the run context object → the pack's fields;
    ``pack_path``: the pack (its preconditions tell when no action is left and the agent should answer).
    """

    def __init__(self, loop: DecisionLoop, mapping: StateMapping, *, pack_path: str | Path) -> None:
        self._sdk = _agents()
        self.loop, self.mapping = loop, mapping
        _, self._mask = pack_masks(pack_path)
        self._outcomes: dict[str, str] = {}  # span id → episode id
        self.processor = _span_events(self._tool_started, self._tool_ended, None)
        self._registered = False

    def _tool_started(self, episode_id: str, span_id: str, tool: str) -> None:
        d = self.loop.pending(episode_id)
        if d is not None and d.action == tool:
            self._outcomes[span_id] = episode_id

    def _tool_ended(self, span_id: str, error: str | None) -> None:
        episode_id = self._outcomes.pop(span_id, None)
        if episode_id is not None:
            self.loop.outcome(episode_id, error=error)

    def model(self, inner: Any) -> Any:
        """``inner`` (the agent's ``Model``) with the policy's tool choice before each call."""
        choice, base = self, self._sdk.Model

        class PolicyModel(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            def _offer(self, tools: list[Any], settings: Any) -> tuple[list[Any], Any]:
                run = _RUN.get()
                if run is None:
                    raise RuntimeError("PolicyToolChoice: run the agent with PolicyToolChoice.run(...)")
                episode_id, context = run
                state = choice.mapping.read(context)
                if not any(context_mask(choice._mask, state, choice.loop.context(episode_id))):  # the model answers
                    return [], settings.resolve(choice._sdk.ModelSettings(tool_choice="none"))
                d = choice.loop.decide(episode_id, state)
                offered = [t for t in tools if getattr(t, "name", None) == d.action]
                return offered, settings.resolve(choice._sdk.ModelSettings(tool_choice=d.action))

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
        try:
            result = await self._sdk.Runner.run(agent, input, context=context, run_config=run_config, **kwargs)
        except Exception as exc:
            self.loop.end(str(episode_id), error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            _RUN.reset(token)
        self.loop.end(str(episode_id), final_state=self.mapping.read(context))
        return result


def ToolSpanProcessor(recorder: ToolCallRecorder) -> Any:  # noqa: N802 - a factory standing for the class
    """A tracing processor that records the function spans of an unchanged agent through ``recorder``,
    one episode per trace (``group_id`` when set, else the trace id)."""
    return _span_events(recorder.started, recorder.finished, recorder.end)


__all__ = ["DecisionLoop", "PolicyToolChoice", "StateMapping", "ToolCallRecorder", "ToolSpanProcessor"]
