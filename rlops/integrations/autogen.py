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

One selector serves one team run at a time (make one per concurrent run). Needs
``pip install './agent[autogen]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[autogen]'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlops.agent_sdk.decision_program import DecisionProgram
from rlops.agent_sdk.interfaces import StateObserver
from rlops.common.errors import UserError
from rlops.integrations import require
from rlops.integrations.core import DecisionLoop, StateMapping, context_mask, pack_masks

_EXTRA, _FRAMEWORK = "autogen", "AutoGen (autogen-agentchat)"


def _tool_name(tool: Any) -> str | None:
    return tool.get("name") if isinstance(tool, Mapping) else getattr(tool, "name", None)


def _errors(messages: Sequence[Any]) -> str | None:
    """The first tool error among ``messages`` (``ToolCallExecutionEvent`` results with ``is_error``)."""
    for m in messages:
        for result in getattr(m, "content", None) or []:
            if getattr(result, "is_error", False):
                return f"{getattr(result, 'name', 'tool')}: {getattr(result, 'content', '')}"[:500]
    return None


class PolicySelector:
    """The ``selector_func`` of a ``SelectorGroupChat`` deciding with the policy (module docstring).

    ``observer``: reads the shared state (the pack's fields); ``pack_path``: the pack (roles and
    preconditions); ``agents``: role → agent name (default: each agent is named as its role).
    """

    def __init__(
        self,
        loop: DecisionLoop,
        observer: StateObserver,
        *,
        pack_path: str | Path,
        agents: Mapping[str, str] | None = None,
    ) -> None:

        self._agentchat = require("autogen_agentchat.conditions", _EXTRA, _FRAMEWORK)
        self.loop, self.observer = loop, observer
        spec = DecisionProgram.from_pack(pack_path).spec
        if not spec.roles:
            raise UserError(
                f"PolicySelector: the pack {spec.name} has no roles; a team's speakers are the roles of a "
                "multi-role pack (roles: in scenario.yaml)"
            )
        names = dict(agents or {})
        self.speaker = {a: names.get(r.name, r.name) for r in spec.roles for a in r.actions}
        _, self._mask = pack_masks(pack_path)
        self.episode_id: str | None = None
        self._seen = 0

    def __call__(self, messages: Sequence[Any]) -> str:
        episode_id = self._current()
        self._settle(messages)
        d = self.loop.decide(episode_id, self.observer.observe())
        speaker = self.speaker[d.action]
        self.loop.annotate(episode_id, role=speaker)
        return speaker

    def _current(self) -> str:
        if self.episode_id is None:
            raise RuntimeError("PolicySelector: run the team with PolicySelector.run(...)")
        return self.episode_id

    def _settle(self, messages: Sequence[Any]) -> None:
        """Record the pending decision's outcome from the messages since the last selection."""
        new, self._seen = list(messages[self._seen :]), len(messages)
        if self.loop.pending(self._current()) is not None:
            self.loop.outcome(self._current(), error=_errors(new))

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
            d = selector.loop.pending(selector.episode_id) if selector.episode_id else None
            if d is None:
                return tools
            offered = [t for t in tools if _tool_name(t) == d.action]
            if offered and not isinstance(offered[0], Mapping):
                kwargs["tool_choice"] = offered[0]
            return offered

        class PolicyToolClient(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            async def create(self, messages: Any, *, tools: Sequence[Any] = (), **kwargs: Any) -> Any:
                return await inner.create(messages, tools=restrict(tools, kwargs), **kwargs)

            def create_stream(self, messages: Any, *, tools: Sequence[Any] = (), **kwargs: Any) -> Any:
                return inner.create_stream(messages, tools=restrict(tools, kwargs), **kwargs)

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
        try:
            result = await team.run(task=task)
        except Exception as exc:
            self.loop.end(str(episode_id), error=f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self.episode_id = None
        if self.loop.pending(str(episode_id)) is not None:
            self.loop.outcome(str(episode_id), error=_errors(result.messages[self._seen :]))
        self.loop.end(str(episode_id), final_state=self.observer.observe())
        return result


__all__ = ["DecisionLoop", "PolicySelector", "StateMapping"]
