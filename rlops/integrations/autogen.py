"""AutoGen (agentchat): the policy chooses a team's next speaker and the tool it calls.

For a multi-role pack (``roles:`` in ``scenario.yaml``, e.g. ``loan_desk``: a screener and an
underwriter), each role is an agent of a ``SelectorGroupChat``. :class:`PolicySelector` is its
``selector_func``: it reads the shared state through a
:class:`~rlops.agent_sdk.interfaces.StateObserver`, asks the policy for the next action, and names the
agent of that action's role; the agents' model client (:meth:`PolicySelector.model_client`) offers the
speaker that one tool; :meth:`PolicySelector.termination` ends the run once no action is legal. Each step
is traced with the speaking ``role`` (in the row's ``extra``), the tool's error from the team's
``ToolCallExecutionEvent``, and the reward provider's score, so the team's reward and each role's
share come out of the pack's reward function as in the sandbox::

    selector = PolicySelector(DecisionLoop(client, tracer, scenario="loan_desk"), desk, pack_path=PACK)
    team = SelectorGroupChat([screener, underwriter], model_client=llm, selector_func=selector,
                             termination_condition=selector.termination())
    await selector.run(team, "Handle the application", episode_id=application_id)

Observe first — ``PolicySelector(..., mode="observe")`` leaves the speaker to the team's own
selection (``agent_selector``, the team's own ``selector_func``, or, without one, ``None``: AutoGen's
model-based selection) and the tool to the speaker's own model (offered all its tools); the agents'
model client records each tool call the model makes of a tool performing a pack action — the state
when the model chose it, the mask, the pack action its tool name is mapped to
(``action_names={<the agent's tool name>: <the pack action>}``, None for a tool that is no decision),
the role, ``logging_policy: agent_router`` with ``logp`` 0 (``agent_version=`` and
``deterministic=False`` name an LLM: no ``logp``) — and its outcome from the team's
``ToolCallExecutionEvent``: the error, and what the loop's ``outcome`` hook reads from the tool's
result (its text, read back into the dict or model the tool returned when it is one). ``mode="serve"``
(the default) hands the same team to the policy; the tool offered for the policy's action is the
speaker's tool mapped to it.

One selector serves one team run at a time (make one per concurrent run). Needs
``pip install './agent[autogen]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[autogen]'``.
"""

from __future__ import annotations

import ast
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from inspect import iscoroutinefunction
from pathlib import Path
from typing import Any

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.agent_sdk.interfaces import StateObserver
from rlops.common.errors import UserError
from rlops.integrations import require
from rlops.integrations.core import DecisionLoop, StateMapping, context_mask, pack_masks
from rlops.integrations.mapping import (
    AGENT_ROUTER,
    MODES,
    ActionNames,
    ToolOutcome,
    WiringError,
    check_observe_arguments,
)

_EXTRA, _FRAMEWORK = "autogen", "AutoGen (autogen-agentchat)"


def _tool_name(tool: Any) -> str | None:
    return tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)


def _results(messages: Sequence[Any]) -> list[tuple[str, Any]]:
    """``(the speaking agent, FunctionExecutionResult)`` of each tool call the team ran among ``messages``
    (the contents of its ``ToolCallExecutionEvent``s)."""
    return [
        (str(getattr(m, "source", "")), result)
        for m in messages
        if isinstance(getattr(m, "content", None), list)
        for result in m.content
        if hasattr(result, "is_error") and hasattr(result, "call_id")
    ]


def _error(result: Any) -> str | None:
    """A failed tool call's error text (``is_error``), None for a call that succeeded."""
    if not getattr(result, "is_error", False):
        return None
    return f"{getattr(result, 'name', 'tool')}: {getattr(result, 'content', '')}"[:500]


def _errors(messages: Sequence[Any]) -> str | None:
    """The first tool error among ``messages`` (``ToolCallExecutionEvent`` results with ``is_error``)."""
    return next((e for _, r in _results(messages) if (e := _error(r)) is not None), None)


def _result_value(result: Any) -> Any:
    """A tool's result as the outcome hook reads it: AutoGen hands it on as text (a pydantic model as
    JSON, a dict as its repr), read back into the dict it was when it is one, else the text."""
    text = getattr(result, "content", None)
    if not isinstance(text, str):
        return text
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return text


@dataclass(frozen=True)
class _ChosenCall:
    """A tool call the speaker's own model made (observe mode), awaiting its execution event."""

    action: str
    state: Mapping[str, Any]
    chosen_at: float


class PolicySelector:
    """The ``selector_func`` of a ``SelectorGroupChat`` deciding with the policy, or recording the
    team's own choices (module docstring).

    ``observer``: reads the shared state (the pack's fields); ``pack_path``: the pack (roles and
    preconditions); ``agents``: role → agent name (default: each agent is named as its role).
    ``mode``: ``serve`` (the policy selects the speaker and its tool) or ``observe`` (the team selects:
    ``agent_selector``, its own ``selector_func`` returning an agent's name or None, else AutoGen's
    model; each tool call is recorded as ``agent_version``'s, ``logp`` 0 when ``deterministic``);
    ``action_names``: the agents' tool name → the pack action it performs (None: no decision), in both
    modes; a tool named otherwise and unmapped is counted in :attr:`unknown` and named once in a warning.
    """

    def __init__(
        self,
        loop: DecisionLoop,
        observer: StateObserver,
        *,
        pack_path: str | Path,
        agents: Mapping[str, str] | None = None,
        mode: str = "serve",
        action_names: Mapping[str, str | None] | None = None,
        agent_selector: Callable[[Sequence[Any]], str | None] | None = None,
        agent_version: str = AGENT_ROUTER,
        deterministic: bool = True,
    ) -> None:
        self._agentchat = require("autogen_agentchat.conditions", _EXTRA, _FRAMEWORK)
        check_observe_arguments("PolicySelector", mode, agent_version, deterministic)
        if agent_selector is not None and (not callable(agent_selector) or iscoroutinefunction(agent_selector)):
            raise WiringError(
                f"PolicySelector(agent_selector={agent_selector!r}): expected the team's own selector_func as a "
                "plain function (messages -> an agent's name, or None for AutoGen's model-based selection); an "
                "async one cannot be called from the selector"
            )
        if mode == "observe" and loop.pack_actions is None:
            raise WiringError(
                "PolicySelector(mode='observe'): the loop's policy has no pack encoder for the masks of the "
                "team's choices; give DecisionLoop(pack_path=<the pack>)"
            )
        self.loop, self.observer, self.mode, self.agent_selector = loop, observer, mode, agent_selector
        self.agent_version, self.deterministic = agent_version, deterministic
        spec = DecisionProgram.from_pack(pack_path).spec
        if not spec.roles:
            raise UserError(
                f"PolicySelector: the pack {spec.name} has no roles; a team's speakers are the roles of a "
                "multi-role pack (roles: in scenario.yaml)"
            )
        names = dict(agents or {})
        self.speaker = {a: names.get(r.name, r.name) for r in spec.roles for a in r.actions}
        #: pack action → the role it belongs to (the row's ``role``, which the pack's role rewards read)
        self.role = {a: r.name for r in spec.roles for a in r.actions}
        actions, self._mask = pack_masks(pack_path)
        self.names = ActionNames(
            actions,
            action_names,
            where="PolicySelector(action_names=...)",
            hint="action_names={{{name}: <one of {actions}>}}, or {{{name}: None}} for a tool that is no decision",
        )
        self.episode_id: str | None = None
        self._seen = 0
        self._chosen: dict[str, _ChosenCall] = {}  # tool call id → the speaker model's choice (observe)

    @property
    def unknown(self) -> dict[str, int]:
        """The tools the team's models called in observe mode that are no pack action and not mapped."""
        return dict(self.names.unknown)

    def __call__(self, messages: Sequence[Any]) -> str | None:
        episode_id = self._current()
        self._settle(messages)
        if self.mode == "observe":  # None: AutoGen's own model-based selection
            return None if self.agent_selector is None else self.agent_selector(messages)
        d = self.loop.decide(episode_id, self.observer.observe())
        self.loop.annotate(episode_id, role=self.role[d.action])
        return self.speaker[d.action]

    def _current(self) -> str:
        if self.episode_id is None:
            raise RuntimeError("PolicySelector: run the team with PolicySelector.run(...)")
        return self.episode_id

    def _settle(self, messages: Sequence[Any]) -> None:
        """Record the outcomes (and, observing, the choices) of the tool calls since the last selection."""
        episode_id = self._current()
        new, self._seen = list(messages[self._seen :]), len(messages)
        if self.mode == "observe":
            for _, result in _results(new):
                call = self._chosen.pop(str(result.call_id or result.name), None)
                if call is None:  # a tool that is no pack action
                    continue
                self.loop.observed(
                    episode_id,
                    call.state,
                    call.action,
                    policy_version=self.agent_version,
                    deterministic=self.deterministic,
                    chosen_at=call.chosen_at,
                )
                self.loop.annotate(episode_id, role=self.role[call.action])
                self.loop.outcome(episode_id, error=_error(result), result=_result_value(result))
            return
        d = self.loop.pending(episode_id)
        if d is not None:
            ran = [r for _, r in _results(new) if self.names.performs(str(r.name)) == d.action]
            self.loop.outcome(episode_id, error=_errors(new), result=_result_value(ran[0]) if ran else None)

    def _chose(self, result: Any) -> None:
        """Observing: note the tool calls of a model's response, with the state they were chosen in."""
        calls = getattr(result, "content", None)
        if self.mode != "observe" or self.episode_id is None or not isinstance(calls, list):
            return
        state: Mapping[str, Any] | None = None
        for call in calls:
            action = self.names.action(str(getattr(call, "name", "")))
            if action is None:
                continue
            state = self.observer.observe() if state is None else state  # one response, one state
            key = str(getattr(call, "id", "") or call.name)
            self._chosen[key] = _ChosenCall(action, state, time.perf_counter())

    def done(self) -> bool:
        """No action is legal in the current state (the episode is over)."""
        return not any(context_mask(self._mask, self.observer.observe(), self.loop.context(self._current())))

    def termination(self) -> Any:
        """A termination condition ending the team's run once no action is legal."""
        return self._agentchat.FunctionalTermination(lambda messages: self.done())

    def model_client(self, inner: Any) -> Any:
        """``inner`` (the agents' ``ChatCompletionClient``) offering the speaker only the tool of the
        policy's pending decision, with ``tool_choice`` set to it."""
        base = require("autogen_core.models", _EXTRA, _FRAMEWORK).ChatCompletionClient
        selector = self

        def restrict(tools: Sequence[Any], kwargs: dict[str, Any]) -> Sequence[Any]:
            if selector.mode == "observe":  # the speaker's model chooses among all its tools
                return tools
            d = selector.loop.pending(selector.episode_id) if selector.episode_id else None
            if d is None:
                return tools
            offered = [t for t in tools if selector.names.performs(str(_tool_name(t))) == d.action]
            if offered and not isinstance(offered[0], Mapping):
                kwargs["tool_choice"] = offered[0]
            return offered

        async def stream(messages: Any, tools: Sequence[Any], kwargs: dict[str, Any]) -> Any:
            async for chunk in inner.create_stream(messages, tools=tools, **kwargs):
                if not isinstance(chunk, str):  # the last chunk: the whole response
                    selector._chose(chunk)
                yield chunk

        class PolicyToolClient(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            async def create(self, messages: Any, *, tools: Sequence[Any] = (), **kwargs: Any) -> Any:
                result = await inner.create(messages, tools=restrict(tools, kwargs), **kwargs)
                selector._chose(result)
                return result

            def create_stream(self, messages: Any, *, tools: Sequence[Any] = (), **kwargs: Any) -> Any:
                return stream(messages, restrict(tools, kwargs), kwargs)

            async def close(self) -> None:
                await inner.close()

            def actual_usage(self) -> Any:
                return inner.actual_usage()

            def total_usage(self) -> Any:
                return inner.total_usage()

            def count_tokens(self, messages: Any, **kwargs: Any) -> int:
                return int(inner.count_tokens(messages, **kwargs))

            def remaining_tokens(self, messages: Any, **kwargs: Any) -> int:
                return int(inner.remaining_tokens(messages, **kwargs))

            @property
            def capabilities(self) -> Any:
                return inner.capabilities

            @property
            def model_info(self) -> Any:
                return inner.model_info

        return PolicyToolClient()

    async def run(self, team: Any, task: str, *, episode_id: str) -> Any:
        """``team.run(task=task)`` as the episode ``episode_id`` (the team is reset first)."""
        await team.reset()
        self.episode_id, self._seen = str(episode_id), 0
        self._chosen.clear()
        try:
            result = await team.run(task=task)
            self._settle(result.messages)  # the tool calls after the last selection
        except Exception as exc:
            self.loop.end(str(episode_id), error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.episode_id = None
            self._chosen.clear()  # calls the team never ran are no steps
        self.loop.end(str(episode_id), final_state=self.observer.observe())
        return result


__all__ = ["MODES", "DecisionLoop", "PolicySelector", "StateMapping", "ToolOutcome", "WiringError"]
