"""LangGraph / LangChain: the policy as a graph's router, and an agent's own tool calls as trace rows.

Forward path — :class:`PolicyRouter` is a node that asks the policy for the next action and goes to
that action's tool node (a ``Command(goto=...)``); the tool nodes lead back to the router::

    router = PolicyRouter(DecisionLoop(client, tracer, scenario="credit_approval"),
                          StateMapping.by_leaf_name(observed_fields(PACK)), episode_key="application_id")
    graph.add_node("router", router)
    graph.add_edge(START, "router")
    for tool in TOOLS:
        graph.add_edge(tool, "router")
    app = graph.compile()
    app.invoke(application, config=router.config())   # the callbacks that record each tool's outcome

Each decision is traced with the state (mapped from the graph state), the mask, the action, its
propensity (``logp``) and the serving version; the tool node's run gives the step's latency and
error; the graph's end marks the last step ``done``. When the graph runs under OpenInference's
LangChain instrumentation, the router's span also carries the decision as the attribute
``rlops.decision`` (see docs/integrations/openinference.md), so the spans alone land in ``rlops capture``.

Reverse path — :class:`ToolCallHandler` is a LangChain callback handler: pass it in ``callbacks``
and each call of a tool named as a pack action becomes a trace row, the agent unchanged.

Needs ``pip install './agent[langgraph]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[langgraph]'``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from rlops.agent_sdk.mlflow_tracing import DECISION_ATTRIBUTE
from rlops.agent_sdk.serving import Decision
from rlops.agent_sdk.tracer import flatten_state, mask_text
from rlops.integrations import require
from rlops.integrations.core import DecisionLoop, StateMapping, ToolCallRecorder

#: The span attribute holding a decision (OpenInference capture mapping).
_EXTRA, _FRAMEWORK = "langgraph", "LangGraph/LangChain"


def _langchain_handler_base() -> type:
    return require("langchain_core.callbacks", _EXTRA, _FRAMEWORK).BaseCallbackHandler  # type: ignore[no-any-return]


def decision_attribute(loop: DecisionLoop, episode_id: str, step: int, state: Mapping[str, Any], d: Decision) -> str:
    """The ``rlops.decision`` span attribute: the trace row's columns known when the decision is made."""
    record = {
        "trace_id": episode_id,
        "episode_id": episode_id,
        "step": step,
        "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
        "scenario": loop.scenario,
        "source": loop.source,
        **flatten_state(state),
        **d.trace_fields(),
        "action": d.action,
    }
    record["action_mask"] = mask_text(record["action_mask"])
    return json.dumps(record, default=str, separators=(",", ":"))


class PolicyRouter:
    """A LangGraph node choosing the next tool node with the policy.

    ``loop``: the :class:`~rlops.integrations.core.DecisionLoop` (policy, tracer, reward provider);
    ``mapping``: graph state → the pack's fields; ``episode_key``: the graph state key holding the
    episode's id; ``nodes``: pack action → tool node name (default: the same name); ``error_key``: a
    key of a tool node's update holding its error text, if tools report errors that way.
    """

    def __init__(
        self,
        loop: DecisionLoop,
        mapping: StateMapping,
        *,
        episode_key: str,
        nodes: Mapping[str, str] | None = None,
        error_key: str | None = None,
    ) -> None:
        self._types = require("langgraph.types", _EXTRA, _FRAMEWORK)
        self.loop, self.mapping, self.episode_key, self.error_key = loop, mapping, episode_key, error_key
        self.nodes = dict(nodes or {})
        self.handler = _RouterCallbacks(self)
        self.__name__ = "router"  # LangGraph names a node by its callable's __name__

    def node(self, action: str) -> str:
        return self.nodes.get(action, action)

    def __call__(self, state: Mapping[str, Any]) -> Any:
        episode_id = str(state[self.episode_key])
        pack_state = self.mapping.read(state)
        d = self.loop.decide(episode_id, pack_state)
        self._annotate_span(episode_id, pack_state, d)
        return self._types.Command(goto=self.node(d.action))

    def _annotate_span(self, episode_id: str, state: Mapping[str, Any], d: Decision) -> None:
        try:
            from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
        except ImportError:  # OpenInference not installed: no span to annotate
            return
        if not LangChainInstrumentor().is_instrumented_by_opentelemetry:
            return
        span = get_current_span()
        if span is not None:
            step = len(self.loop.history(episode_id)) - 1  # the pending decision's step
            span.set_attribute(DECISION_ATTRIBUTE, decision_attribute(self.loop, episode_id, step, state, d))

    def config(self, **config: Any) -> dict[str, Any]:
        """A run config with the router's callbacks added (``config`` merged in)."""
        callbacks = [*(config.pop("callbacks", None) or []), self.handler]
        return {**config, "callbacks": callbacks}


class _RouterCallbacks:
    """Records the outcome of the tool node each decision went to, and the end of the graph's run."""

    def __new__(cls, router: PolicyRouter) -> Any:
        base = _langchain_handler_base()

        class RouterCallbacks(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            raise_error = False

            def __init__(self) -> None:
                super().__init__()
                self.roots: dict[UUID, str] = {}
                self.tools: dict[UUID, str] = {}

            def on_chain_start(
                self,
                serialized: Any,
                inputs: Any,
                *,
                run_id: UUID,
                parent_run_id: UUID | None = None,
                metadata: dict[str, Any] | None = None,
                **kw: Any,
            ) -> None:
                if parent_run_id is None:
                    if isinstance(inputs, Mapping) and router.episode_key in inputs:
                        self.roots[run_id] = str(inputs[router.episode_key])
                    return
                node = (metadata or {}).get("langgraph_node")
                for episode_id in self.roots.values():
                    d = router.loop.pending(episode_id)
                    if d is not None and node == router.node(d.action) and kw.get("name") == node:
                        self.tools[run_id] = episode_id

            def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
                if run_id in self.tools:
                    error = outputs.get(router.error_key) if router.error_key and isinstance(outputs, Mapping) else None
                    router.loop.outcome(self.tools.pop(run_id), error=None if error is None else str(error))
                elif run_id in self.roots:
                    final = router.mapping.read(outputs) if isinstance(outputs, Mapping) else None
                    router.loop.end(self.roots.pop(run_id), final_state=final)

            def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
                text = f"{type(error).__name__}: {error}"
                if run_id in self.tools:
                    router.loop.outcome(self.tools.pop(run_id), error=text)
                elif run_id in self.roots:
                    router.loop.end(self.roots.pop(run_id), error=text)

        return RouterCallbacks()


class ToolCallHandler:
    """A LangChain callback handler tracing an agent's own tool calls (see :class:`ToolCallRecorder`).

    ``episode_key``: the key of the top-level run's input holding the episode id. Pass the handler in
    ``config={"callbacks": [handler]}`` of the agent's ``invoke``."""

    def __new__(cls, recorder: ToolCallRecorder, *, episode_key: str) -> Any:
        base = _langchain_handler_base()

        class Handler(base):  # type: ignore[misc, valid-type]  # the base class is imported lazily
            raise_error = False

            def __init__(self) -> None:
                super().__init__()
                self.recorder = recorder
                self.roots: dict[UUID, str] = {}
                self.parents: dict[UUID, UUID] = {}

            def _root(self, run_id: UUID) -> UUID:
                while run_id in self.parents:
                    run_id = self.parents[run_id]
                return run_id

            def on_chain_start(
                self, serialized: Any, inputs: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
            ) -> None:
                if parent_run_id is not None:
                    self.parents[run_id] = parent_run_id
                elif isinstance(inputs, Mapping) and episode_key in inputs:
                    self.roots[run_id] = str(inputs[episode_key])

            def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
                self.parents.pop(run_id, None)
                if run_id in self.roots:
                    recorder.end(self.roots.pop(run_id))

            def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
                self.parents.pop(run_id, None)
                if run_id in self.roots:
                    recorder.end(self.roots.pop(run_id), error=f"{type(error).__name__}: {error}")

            def on_tool_start(
                self,
                serialized: Any,
                input_str: str,
                *,
                run_id: UUID,
                parent_run_id: UUID | None = None,
                **kw: Any,
            ) -> None:
                if parent_run_id is not None:
                    self.parents[run_id] = parent_run_id
                episode_id = self.roots.get(self._root(run_id))
                name = kw.get("name") or (serialized or {}).get("name")
                if episode_id is not None and name:
                    recorder.started(episode_id, str(run_id), str(name))

            def on_tool_end(self, output: Any, *, run_id: UUID, **kw: Any) -> None:
                self.parents.pop(run_id, None)
                recorder.finished(str(run_id))

            def on_tool_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
                self.parents.pop(run_id, None)
                recorder.finished(str(run_id), error=f"{type(error).__name__}: {error}")

        return Handler()


__all__ = ["DECISION_ATTRIBUTE", "DecisionLoop", "PolicyRouter", "StateMapping", "ToolCallHandler", "ToolCallRecorder"]
