"""What the LangChain callback handlers of :mod:`rlops.integrations.langgraph` do with the events of a
run, free of LangChain: :mod:`rlops.integrations.langgraph` mixes these classes into LangChain's
``BaseCallbackHandler`` when an adapter is used, so importing them needs no framework.

* :class:`RouterEvents` — a :class:`~rlops.integrations.langgraph.PolicyRouter`'s: the outcome of the
  tool node each decision went to, the end of the graph's run, and the wiring checks;
* :class:`ToolCallEvents` — a :class:`~rlops.integrations.langgraph.ToolCallHandler`'s: the tool calls
  and tool nodes of an unchanged agent, as a :class:`~rlops.integrations.tool_calls.ToolCallRecorder`'s steps.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol
from uuid import UUID

from rlops.agent_sdk.serving import Decision
from rlops.integrations.mapping import StateMapping, WiringError
from rlops.integrations.tool_calls import ToolCallRecorder

log = logging.getLogger(__name__)

#: The tag LangGraph puts on its own bookkeeping runs (channel writes), which route nothing.
_HIDDEN = "langsmith:hidden"


class _Loop(Protocol):
    def pending(self, episode_id: str) -> Decision | None: ...

    def outcome(
        self, episode_id: str, *, error: str | None = None, latency_ms: float | None = None, result: Any = None
    ) -> None: ...

    def end(
        self, episode_id: str, *, error: str | None = None, final_state: Mapping[str, Any] | None = None
    ) -> None: ...


class _Router(Protocol):
    """What :class:`RouterEvents` needs of a :class:`~rlops.integrations.langgraph.PolicyRouter`."""

    loop: _Loop
    mapping: StateMapping
    episode_key: str
    error_key: str | None

    def node(self, action: str) -> str: ...

    def forget_run(self, run_id: UUID) -> None: ...

    def forget_episode(self, episode_id: str) -> None: ...

    def wiring_error(
        self, episode_id: str, node: str, name: str, parent: UUID | None, error: Any = None
    ) -> str | None: ...


class RunTree:
    """The runs of one handler's events: each run's parent, and the episode of each top-level run (the
    value of ``episode_key`` in its input)."""

    def __init__(self, episode_key: str) -> None:
        self.episode_key = episode_key
        self.roots: dict[UUID, str] = {}
        self.parents: dict[UUID, UUID] = {}

    def enter(self, run_id: UUID, parent_run_id: UUID | None, inputs: Any) -> str | None:
        """Note a run that started; the episode it belongs to (None for a top-level run or none)."""
        if parent_run_id is None:
            if isinstance(inputs, Mapping) and self.episode_key in inputs:
                self.roots[run_id] = str(inputs[self.episode_key])
            return None
        self.parents[run_id] = parent_run_id
        return self.roots.get(self.root(run_id))

    def root(self, run_id: UUID) -> UUID:
        while run_id in self.parents:
            run_id = self.parents[run_id]
        return run_id


class RouterEvents(RunTree):
    """Records the outcome of the tool node each decision went to (its run's output read by the loop's
    ``outcome`` hook, its exception as the error) and the end of the graph's run; raises a
    :class:`WiringError` — its only error — where the graph routes around the router."""

    raise_error = True  # for WiringError alone: recording failures are logged, never break the agent

    def __init__(self, router: _Router) -> None:
        super().__init__(router.episode_key)
        self.router = router
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
        episode_id = self.enter(run_id, parent_run_id, inputs)
        node, name = (metadata or {}).get("langgraph_node"), kw.get("name") or ""
        if episode_id is None or node is None or _HIDDEN in (kw.get("tags") or []):
            return
        problem = self.router.wiring_error(episode_id, node, name, parent_run_id)
        if problem:
            raise WiringError(problem)
        d = self.router.loop.pending(episode_id)
        if d is not None and node == self.router.node(d.action) and name == node:
            self.tools[run_id] = episode_id

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self.parents.pop(run_id, None)
        self.router.forget_run(run_id)
        router = self.router
        try:
            if run_id in self.tools:
                key = router.error_key
                error = outputs.get(key) if key and isinstance(outputs, Mapping) else None
                router.loop.outcome(self.tools.pop(run_id), error=None if error is None else str(error), result=outputs)
            elif run_id in self.roots:
                final = router.mapping.read(outputs) if isinstance(outputs, Mapping) else None
                episode_id = self.roots.pop(run_id)
                router.forget_episode(episode_id)
                router.loop.end(episode_id, final_state=final)
        except Exception:  # noqa: BLE001 - tracing must not break the agent's run
            log.exception("rlops: recording a LangGraph tool outcome failed")

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        episode_id = self.roots.get(self.root(run_id))
        problem = None
        if episode_id is not None and not isinstance(error, WiringError):
            problem = self.router.wiring_error(episode_id, "", "", None, error)
        self.parents.pop(run_id, None)
        self.router.forget_run(run_id)
        text = f"{type(error).__name__}: {error}" if problem is None else f"WiringError: {problem}"
        try:
            if run_id in self.tools:
                self.router.loop.outcome(self.tools.pop(run_id), error=text)
            elif run_id in self.roots:
                self.router.forget_episode(self.roots[run_id])
                self.router.loop.end(self.roots.pop(run_id), error=text)
        except Exception:  # noqa: BLE001 - tracing must not break the agent's run
            log.exception("rlops: recording a LangGraph tool error failed")
        if problem:
            raise WiringError(problem) from error


class ToolCallEvents(RunTree):
    """Each call of a LangChain tool, and each run of a graph node, that performs a pack action (named
    as one, or a key of the recorder's ``action_names``) is one call of ``recorder``; a tool called
    inside such a node is that node's step, not another. ``mapping`` reads the pack's state from the
    graph state (a node's input; for a tool, its latest node's) instead of the recorder's observer,
    and the final state from the graph's output."""

    raise_error = False

    def __init__(self, recorder: ToolCallRecorder, episode_key: str, mapping: StateMapping | None) -> None:
        super().__init__(episode_key)
        self.recorder, self.mapping = recorder, mapping
        self.tool_nodes = set(recorder.names.names) | set(recorder.actions)  # declared names only: no warnings
        self.calls: set[UUID] = set()
        self.states: dict[UUID, Any] = {}  # top-level run → the graph state its latest node started with

    def _pack_state(self, state: Any) -> Mapping[str, Any] | None:
        return self.mapping.read(state) if self.mapping is not None and state is not None else None

    def _inside_call(self, run_id: UUID) -> bool:
        while run_id in self.parents:
            run_id = self.parents[run_id]
            if run_id in self.calls:
                return True
        return False

    def _start(self, run_id: UUID, name: str, state: Any) -> None:
        episode_id = self.roots.get(self.root(run_id))
        if episode_id is not None and not self._inside_call(run_id):
            self.calls.add(run_id)
            self.recorder.started(episode_id, str(run_id), name, state=self._pack_state(state))

    def _finish(self, run_id: UUID, error: str | None = None, result: Any = None) -> None:
        self.parents.pop(run_id, None)
        if run_id in self.calls:
            self.calls.discard(run_id)
            self.recorder.finished(str(run_id), error=error, result=result)

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
        self.enter(run_id, parent_run_id, inputs)
        node = (metadata or {}).get("langgraph_node")
        if parent_run_id is None or node is None or node != kw.get("name"):
            return
        self.states[self.root(run_id)] = inputs
        if node in self.tool_nodes:
            self._start(run_id, node, inputs)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kw: Any) -> None:
        self._finish(run_id, result=outputs)
        if run_id in self.roots:
            self.states.pop(run_id, None)
            final = self._pack_state(outputs) if isinstance(outputs, Mapping) else None
            self.recorder.end(self.roots.pop(run_id), final_state=final)

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        text = f"{type(error).__name__}: {error}"
        self._finish(run_id, error=text)
        if run_id in self.roots:
            self.states.pop(run_id, None)
            self.recorder.end(self.roots.pop(run_id), error=text)

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, parent_run_id: UUID | None = None, **kw: Any
    ) -> None:
        if parent_run_id is not None:
            self.parents[run_id] = parent_run_id
        name = kw.get("name") or (serialized or {}).get("name")
        if name:
            self._start(run_id, str(name), self.states.get(self.root(run_id)))

    def on_tool_end(self, output: Any, *, run_id: UUID, **kw: Any) -> None:
        self._finish(run_id, result=output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kw: Any) -> None:
        self._finish(run_id, error=f"{type(error).__name__}: {error}")
