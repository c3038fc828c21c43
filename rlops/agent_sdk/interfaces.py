"""The three framework-agnostic interfaces a production agent implements.

Any agent (LangChain, AutoGen, a rule engine, plain Python) connects to rlops through about
fifty lines of adapter code: something that reads the current business state, something
that carries out an action, and optionally something that scores an outcome.

* :class:`StateObserver` — ``observe()`` returns the production fields of the current state
  as a (possibly nested) dict; the names match the scenario's state fields
  (``{"user_profile": {"credit_score": 712}}`` ↔ ``state.user_profile.credit_score``).
* :class:`ActionExecutor` — ``execute(action, state)`` carries out an action and returns an
  :class:`ExecutionResult` (latency, error, optionally the next state and whether the
  episode ended).
* :class:`RewardProvider` — ``reward(state, action, next_state, episode=...)`` returns an external
  score (risk, sentiment, CRM outcome): a float, or a mapping of named components. ``episode`` (an
  :class:`EpisodeRef`) says which episode and step it scores; a provider whose ``reward`` takes no
  ``episode`` parameter is called without it. The score is the reward hook's: it is traced as the
  breakdown component ``hook:<component>`` (the provider's ``component`` attribute, default
  ``external``; one ``hook:<name>`` per key of a mapping), never as ``reward_total``, which is the
  pack's reward function's alone.

They are :class:`typing.Protocol` classes: implement the method, no base class needed
(inheriting from them is fine too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of executing one action.

    ``latency_ms``: how long the action took (measured around ``execute`` when ``None``);
    ``error``: a short description when the action failed (``None`` on success);
    ``next_state``: the state after the action, when the executor knows it;
    ``done``: the action ended the episode (a terminal action); ``output``: anything the
    agent wants back (not traced).
    """

    latency_ms: float | None = None
    error: str | None = None
    next_state: Mapping[str, Any] | None = None
    done: bool = False
    output: Any = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class EpisodeRef:
    """Which step a :class:`RewardProvider` scores: the trace and episode ids, the step index and
    the scenario."""

    trace_id: str
    episode_id: str
    step: int
    scenario: str


#: The hook component an external score is traced under when the provider declares none.
DEFAULT_HOOK_COMPONENT = "external"


@runtime_checkable
class StateObserver(Protocol):
    """Reads the current production state."""

    def observe(self) -> dict[str, Any]:
        """The production fields of the current state (nested dicts allowed)."""
        ...


@runtime_checkable
class ActionExecutor(Protocol):
    """Carries out an action chosen by the policy."""

    def execute(self, action: str, state: Mapping[str, Any]) -> ExecutionResult:
        """Execute ``action`` (a scenario action name) in ``state``."""
        ...


@runtime_checkable
class RewardProvider(Protocol):
    """Supplies external scores that feed the reward function's ``reward_hook`` (optionally with a
    ``component`` attribute: the hook's name, default :data:`DEFAULT_HOOK_COMPONENT`)."""

    def reward(
        self,
        state: Mapping[str, Any],
        action: str,
        next_state: Mapping[str, Any] | None,
        episode: EpisodeRef | None = None,
    ) -> float | Mapping[str, float]:
        """A score for taking ``action`` in ``state`` (``next_state`` is ``None`` when the
        episode ended without a further observation) at the step ``episode`` names."""
        ...
