"""LangGraph / LangChain: the policy as a graph's router, and an agent's own tool calls as trace rows.

Forward path — :class:`PolicyRouter` chooses the next tool node with the policy, in either routing
style of LangGraph: as a node returning ``Command(goto=<tool node>)``, or as the function of a
conditional edge (:meth:`PolicyRouter.route`, returning the tool node's name); the tool nodes lead
back to the router::

    router = PolicyRouter(DecisionLoop(client, tracer, scenario="credit_approval"),
                          StateMapping.by_leaf_name(observed_fields(PACK)), episode_key="application_id")
    graph.add_node("router", router)                                   # routing by Command, or
    graph.add_conditional_edges("triage", router.route, TOOL_NODES)    # routing by a conditional edge
    app = graph.compile()
    app.invoke(application, config=router.config())   # the callbacks that record each tool's outcome

Each decision is traced with the state (mapped from the graph state), the mask, the action, its
propensity (``logp``) and the serving version; the tool node's run gives the step's latency and
error (or the loop's ``outcome`` hook reads them from the tool's result); the graph's end marks the
last step ``done``. ``mode="observe"`` keeps the agent's own router (``agent_router``) deciding and
records its choices (``logp`` 0 for a deterministic one, ``logging_policy: agent_router``);
``mode="serve"`` (the default) hands the routing to the policy: the switch is that one argument.
A graph wired so the router cannot serve it (a conditional edge left on a ``Command`` router, a
second route to the tools) stops at once with a :class:`~rlops.integrations.mapping.WiringError`
saying what to change. When the graph runs under OpenInference's LangChain instrumentation, the
router's span also carries the decision as the attribute ``rlops.decision`` (see
docs/integrations/openinference.md), so the spans alone land in ``rlops capture``.

Reverse path — :class:`ToolCallHandler` is a LangChain callback handler: pass it in ``callbacks``
and each call of a tool performing a pack action (a LangChain tool, or a graph node, named as the
action or mapped to it by the recorder's ``action_names``) becomes a trace row, the agent unchanged.

Needs ``pip install './agent[langgraph]'`` (the slim ``rlops-agent``) or ``pip install 'rlops[langgraph]'``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from rlops.agent_sdk.mlflow_tracing import DECISION_ATTRIBUTE
from rlops.agent_sdk.rollout import RULES_VERSION
from rlops.agent_sdk.tracer import flatten_state, mask_text
from rlops.common.errors import UserError
from rlops.integrations import require
from rlops.integrations.callbacks import RouterEvents, ToolCallEvents
from rlops.integrations.core import DecisionLoop, StateMapping, ToolCallRecorder
from rlops.integrations.mapping import AGENT_ROUTER, ActionNames, ToolOutcome, WiringError

log = logging.getLogger(__name__)

_EXTRA, _FRAMEWORK = "langgraph", "LangGraph/LangChain"
#: LangGraph's name of the graph's end (``langgraph.graph.END``).
_END = "__end__"
MODES = ("serve", "observe")


def _langchain_handler_base() -> type:
    return require("langchain_core.callbacks", _EXTRA, _FRAMEWORK).BaseCallbackHandler  # type: ignore[no-any-return]


def decision_attribute(loop: DecisionLoop, episode_id: str, step: int, state: Mapping[str, Any], action: str) -> str:
    """The ``rlops.decision`` span attribute: the trace row's columns known when the decision is made."""
    record = {
        "trace_id": episode_id,
        "episode_id": episode_id,
        "step": step,
        "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
        "scenario": loop.scenario,
        "source": loop.source,
        **flatten_state(state),
        **loop.serving_fields(episode_id),
        "action": action,
    }
    record["action_mask"] = mask_text(record.get("action_mask"))
    return json.dumps(record, default=str, separators=(",", ":"))


def _handlers(config: Mapping[str, Any] | None) -> list[Any]:
    callbacks = (config or {}).get("callbacks")
    return list(getattr(callbacks, "handlers", callbacks) or [])


class PolicyRouter:
    """Chooses a LangGraph graph's next tool node with the policy: a node (``graph.add_node("router",
    router)``, returning ``Command(goto=<tool node>)``) or the function of a conditional edge
    (``graph.add_conditional_edges("triage", router.route, [...tool nodes])``, returning the node's
    name) — one style per graph.

    ``loop``: the :class:`~rlops.integrations.core.DecisionLoop` (policy, tracer, reward provider,
    ``outcome`` hook); ``mapping``: graph state → the pack's fields; ``episode_key``: the graph state
    key holding the episode's id; ``nodes``: pack action → tool node name (default: the same name);
    ``error_key``: a key of a tool node's update holding its error text, if tools report errors that
    way. ``mode``: ``serve`` (the policy routes) or ``observe`` (``agent_router``, the agent's own
    routing function ``state -> node name``, routes and its choices are recorded as
    ``agent_version``'s — ``agent_router`` unless named: not ``rules``, the pack's rule engine, which
    the sandbox would then be checked against — ``logp`` 0 when ``deterministic``); the same graph
    switches by that argument.
    Serving, the router goes to ``END`` where no pack action is legal any more (a terminal action ran).
    A graph wired so the router cannot serve it raises a :class:`~rlops.integrations.mapping.WiringError`
    naming the fix, checked by the router and by its callbacks (:meth:`config`).
    """

    def __init__(
        self,
        loop: DecisionLoop,
        mapping: StateMapping,
        *,
        episode_key: str,
        nodes: Mapping[str, str] | None = None,
        error_key: str | None = None,
        mode: str = "serve",
        agent_router: Callable[[Any], Any] | None = None,
        agent_version: str = AGENT_ROUTER,
        deterministic: bool = True,
    ) -> None:
        self._types = require("langgraph.types", _EXTRA, _FRAMEWORK)
        self._config = require("langgraph.config", _EXTRA, _FRAMEWORK)
        if not isinstance(mode, str) or mode not in MODES:
            raise UserError(f"PolicyRouter(mode={mode!r}): expected one of {list(MODES)}")
        _check_arguments(mapping, episode_key, agent_router, agent_version, deterministic)
        if mode == "observe" and agent_router is None:
            raise WiringError(
                "PolicyRouter(mode='observe') records the choices of the agent's own router: give "
                "agent_router=<the function that returns the next node's name from the graph state>"
            )
        if mode == "observe" and loop.pack_actions is None:
            raise WiringError(
                "PolicyRouter(mode='observe'): the loop's policy has no pack encoder for the masks of the "
                "agent's choices; give DecisionLoop(pack_path=<the pack>)"
            )
        self.loop, self.mapping, self.episode_key, self.error_key = loop, mapping, episode_key, error_key
        self.mode, self.agent_router, self.agent_version = mode, agent_router, agent_version
        self.deterministic = deterministic
        actions = loop.pack_actions or tuple(sorted(loop.actions or ()))
        self.nodes = _node_names(nodes, actions)
        actions = actions or tuple(self.nodes)
        #: tool node → the pack action it performs
        self.tool_nodes = {self.node(a): a for a in actions}
        shared = sorted({n for n in (self.node(a) for a in actions) if [self.node(b) for b in actions].count(n) > 1})
        if shared:
            raise UserError(
                f"PolicyRouter(nodes=...): the tool node(s) {shared} would perform more than one pack action "
                f"({', '.join(f'{a} -> {self.node(a)}' for a in actions if self.node(a) in shared)}); one node per "
                "action, so a recorded step names the action that ran"
            )
        self._names = ActionNames(
            actions,
            self.tool_nodes,
            where="PolicyRouter(nodes=...)",
            hint="nodes={{<the pack action it performs, one of {actions}>: {name}}} if it performs one; a node "
            "that performs none stays untraced, as it should",
        )
        self.handler = _router_callbacks(self)
        self.__name__ = "router"  # LangGraph names a node by its callable's __name__
        self._style: str | None = None
        # Node runs that returned a Command: an edge out of one is a second route.
        self._command_runs: set[UUID] = set()
        self._routed: dict[str, str] = {}  # episode → the node the edge style returned last, for a path map's error
        self._warned_callbacks = False

    def node(self, action: str) -> str:
        return self.nodes.get(action, action)

    @property
    def unknown(self) -> dict[str, int]:
        """The nodes the agent's router went to in observe mode that perform no pack action, with their visits."""
        return dict(self._names.unknown)

    def __call__(self, state: Mapping[str, Any]) -> Any:
        """The node style: ``Command(goto=<the chosen tool node>)``."""
        config = self._run_config()
        watched = self._use("Command", config)
        goto = self._choose(state)
        run_id = getattr((config or {}).get("callbacks"), "parent_run_id", None)  # this node's run
        if watched and run_id is not None:  # its callbacks forget it when it ends
            self._command_runs.add(run_id)
        return self._types.Command(goto=goto)

    def route(self, state: Mapping[str, Any]) -> str:
        """The conditional-edge style: the chosen tool node's name."""
        watched = self._use("conditional edge", self._run_config())
        node = self._choose(state)
        if watched:  # its callbacks forget the episode when it ends
            self._routed[self._episode_id(state)] = node
        return node

    def _run_config(self) -> Mapping[str, Any] | None:
        """The config of the graph run calling the router (None when called outside one, by hand)."""
        try:
            return self._config.get_config()  # type: ignore[no-any-return]
        except RuntimeError:
            return None

    def _use(self, style: str, config: Mapping[str, Any] | None) -> bool:
        """Check the router is used in one style; whether the run has the router's callbacks."""
        if self._style is None:
            self._style = style
        elif self._style != style:
            raise WiringError(
                f"PolicyRouter routes this graph by {self._style} and by {style} at once: it is both a node and "
                "the function of a conditional edge. Route one way: graph.add_node('router', router) with no "
                "conditional edge out of it, or a plain node with graph.add_conditional_edges(<node>, router.route, "
                f"{sorted(self.tool_nodes)})"
            )
        watched = config is not None and self.handler in _handlers(config)
        if config is not None and not watched and not self._warned_callbacks:
            self._warned_callbacks = True
            log.warning(
                "rlops: PolicyRouter runs without its callbacks, so tool outcomes are read at the next decision and a "
                "second route to the tools goes unnoticed; invoke the graph with config=router.config()"
            )
        return watched

    def _episode_id(self, state: Mapping[str, Any]) -> str:
        if not isinstance(state, Mapping) or self.episode_key not in state:
            keys = sorted(state) if isinstance(state, Mapping) else type(state).__name__
            raise WiringError(
                f"PolicyRouter(episode_key={self.episode_key!r}): the graph state has no {self.episode_key!r} "
                f"(it has {keys}); give episode_key the state key holding the episode's id"
            )
        value = state[self.episode_key]
        if isinstance(value, bool) or not isinstance(value, (str, int, UUID)) or not str(value).strip():
            raise WiringError(
                f"PolicyRouter(episode_key={self.episode_key!r}): the graph state's {self.episode_key!r} is "
                f"{value!r}; expected the episode's id (non-blank text, a number or a UUID): episodes without "
                "their own id would be recorded as one"
            )
        return str(value)

    def _choose(self, state: Mapping[str, Any]) -> str:
        episode_id, pack_state = self._episode_id(state), self.mapping.read(state)
        if self.mode == "serve":
            if self.loop.no_legal_action(episode_id, pack_state):
                return _END  # the pack's episode is over (a terminal action ran): the policy has nothing to choose
            d = self.loop.decide(episode_id, pack_state)
            self._annotate_span(episode_id, pack_state, d.action)
            return self.node(d.action)
        assert self.agent_router is not None
        chosen = self.agent_router(state)
        if not isinstance(chosen, str):
            raise WiringError(
                f"PolicyRouter(agent_router=...) returned {chosen!r}; observe mode serves a router that returns "
                "the next node's name (a str, or END)"
            )
        action = None if chosen == _END else self._names.action(chosen)
        if action is not None:
            self.loop.observed(
                episode_id, pack_state, action, policy_version=self.agent_version, deterministic=self.deterministic
            )
            self._annotate_span(episode_id, pack_state, action)
        return chosen

    def _annotate_span(self, episode_id: str, state: Mapping[str, Any], action: str) -> None:
        try:
            from openinference.instrumentation.langchain import LangChainInstrumentor, get_current_span
        except ImportError:  # OpenInference not installed: no span to annotate
            return
        if not LangChainInstrumentor().is_instrumented_by_opentelemetry:
            return
        span = get_current_span()
        if span is not None:
            step = len(self.loop.history(episode_id)) - 1  # the pending decision's step
            span.set_attribute(DECISION_ATTRIBUTE, decision_attribute(self.loop, episode_id, step, state, action))

    def config(self, **config: Any) -> dict[str, Any]:
        """A run config with the router's callbacks added (``config`` merged in)."""
        callbacks = [*(config.pop("callbacks", None) or []), self.handler]
        return {**config, "callbacks": callbacks}

    def forget_run(self, run_id: UUID) -> None:
        """The run ``run_id`` ended: no edge can start out of it any more."""
        self._command_runs.discard(run_id)

    def forget_episode(self, episode_id: str) -> None:
        """The graph's run of ``episode_id`` ended."""
        self._routed.pop(episode_id, None)

    def wiring_error(self, episode_id: str, node: str, name: str, parent: UUID | None, error: Any = None) -> str | None:
        """What is miswired when run ``name`` of node ``node`` starts (or fails with ``error``), if anything."""
        if error is not None:
            returned = self._routed.get(episode_id)
            if isinstance(error, KeyError) and returned is not None and error.args == (returned,):
                return (
                    f"the conditional edge of PolicyRouter.route has no path for {returned!r}, the node it returned: "
                    "route returns the tool node's name (nodes= maps each pack action to it), so give "
                    f"add_conditional_edges the node names, a list {sorted(self.tool_nodes)} or each name to itself"
                )
            return None
        if name != node and parent in self._command_runs:
            return (
                f"PolicyRouter routes by Command from node {node!r}, and the graph also has a conditional edge out of "
                f"{node!r} ({name!r}): both would route, two tools in one step. Route by one: remove that edge, or "
                f"make {node!r} a plain node and route by graph.add_conditional_edges({node!r}, router.route, "
                f"{sorted(self.tool_nodes)})"
            )
        d = self.loop.pending(episode_id)
        if name == node and d is not None and node in self.tool_nodes and node != self.node(d.action):
            return (
                f"tool node {node!r} started while the router's choice is {self.node(d.action)!r}: another edge "
                "routes to the tools besides the router. Route only by the router: tool nodes lead back to it (or "
                "to END), and no other edge or Command goes to a tool"
            )
        return None


def _check_arguments(mapping: Any, episode_key: Any, agent_router: Any, agent_version: Any, deterministic: Any) -> None:
    """The router's arguments of the wrong kind, refused when it is built rather than at the
    graph's first step (or never: a truthy text for ``deterministic`` would write propensity 1)."""
    if not callable(getattr(mapping, "read", None)):
        raise UserError(f"PolicyRouter(mapping={mapping!r}): expected a StateMapping (graph state -> pack fields)")
    if not isinstance(episode_key, str) or not episode_key.strip():
        raise UserError(
            f"PolicyRouter(episode_key={episode_key!r}): expected the graph state key holding the episode id"
        )
    if agent_router is not None and not callable(agent_router):
        raise UserError(
            f"PolicyRouter(agent_router={agent_router!r}): expected the agent's routing function "
            "(graph state -> next node's name)"
        )
    if not isinstance(agent_version, str) or not agent_version.strip() or agent_version == RULES_VERSION:
        raise UserError(
            f"PolicyRouter(agent_version={agent_version!r}): expected the name of the agent's router, non-blank "
            f"text other than {RULES_VERSION!r} (the pack's rule engine, which the sandbox would check it against)"
        )
    if not isinstance(deterministic, bool):
        raise UserError(
            f"PolicyRouter(deterministic={deterministic!r}): expected True (the agent's router chooses by rule, "
            "propensity 1) or False (an LLM: propensity unknown)"
        )


def _node_names(nodes: Any, actions: tuple[str, ...]) -> dict[str, str]:
    """``nodes`` as ``{pack action: tool node name}``: a mapping from actions of the pack to non-blank names."""
    if nodes is None:
        return {}
    if not isinstance(nodes, Mapping):
        raise UserError(f"PolicyRouter(nodes={nodes!r}): expected a mapping {{pack action: tool node name}}")
    for action, node in nodes.items():
        if not isinstance(action, str) or (actions and action not in actions):
            raise UserError(
                f"PolicyRouter(nodes=...): {action!r} is no pack action; expected keys among {list(actions)}"
            )
        if not isinstance(node, str) or not node.strip():
            raise UserError(f"PolicyRouter(nodes=...): {action!r} maps to {node!r}; expected a tool node's name")
    return dict(nodes)


def _router_callbacks(router: PolicyRouter) -> Any:
    """A LangChain callback handler running :class:`~rlops.integrations.callbacks.RouterEvents`."""
    handler = type("RouterCallbacks", (RouterEvents, _langchain_handler_base()), {})
    return handler(router)


def ToolCallHandler(  # noqa: N802 - a factory standing for the class
    recorder: ToolCallRecorder, *, episode_key: str, mapping: StateMapping | None = None
) -> Any:
    """A LangChain callback handler tracing an agent's own tool calls (see :class:`ToolCallRecorder`):
    each call of a LangChain tool, and each run of a graph node, named as a pack action or mapped to
    one by the recorder's ``action_names``, is one step (a tool called inside such a node is that
    node's step, not another).

    ``episode_key``: the key of the top-level run's input holding the episode id. ``mapping``: the
    pack's state read from the graph state (a node's input; for a tool, its latest node's) instead of
    the recorder's observer; it also reads the final state the last step is scored on. Pass the
    handler in ``config={"callbacks": [handler]}`` of the agent's ``invoke``."""
    handler = type("ToolCallHandler", (ToolCallEvents, _langchain_handler_base()), {})
    return handler(recorder, episode_key, mapping)


__all__ = [
    "DECISION_ATTRIBUTE",
    "MODES",
    "DecisionLoop",
    "PolicyRouter",
    "StateMapping",
    "ToolCallHandler",
    "ToolCallRecorder",
    "ToolOutcome",
    "WiringError",
]
