"""The legal actions of a production state, from the scenario pack, without torch::

    from rlops.agent_sdk.masks import ActionMasker

    masker = ActionMasker.from_pack("scenarios/credit_approval")
    mask = masker.mask(state, history=actions_so_far)      # [True, False, …], one per action
    current_episode().step(state, action, action_mask=mask)

Each action's ``precondition`` (and its ``required_fields`` present, and with ``roles:`` the acting
role's turn) is evaluated on the state by the sandbox's own whitelist expression compiler, over
numpy (:mod:`rlops.agent_sdk.decision_program`): the mask the trace row carries is the one the
sandbox computes on the same state, and the one :class:`~rlops.agent_sdk.policy_client.PolicyClient`
decides with. The state takes every shape the policy client takes (nested, dotted paths,
``state.<path>`` columns; :mod:`rlops.agent_sdk.encoding`); a state that cannot be read raises
:class:`~rlops.agent_sdk.encoding.StateError` saying which field and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlops.agent_sdk.encoding import ObservationEncoder


class ActionMasker:
    """Action masks and the rule engine's choice for production states of one scenario."""

    def __init__(self, encoder: ObservationEncoder):
        self.encoder = encoder

    @classmethod
    def from_pack(cls, path: str | Path) -> ActionMasker:
        """The masker of the pack folder ``path`` (reads its ``scenario.yaml`` only)."""
        return cls(ObservationEncoder.from_pack(path))

    @property
    def action_names(self) -> tuple[str, ...]:
        return self.encoder.action_names

    def mask(
        self,
        state: Mapping[str, Any],
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
    ) -> list[bool]:
        """One bool per action (in the pack's order): legal in ``state`` after the actions ``history``
        (``step`` defaults to its length; ``last_error``: the previous action failed)."""
        S = self.encoder.state_tensor(state, history, step, elapsed_ms, last_error)
        return [bool(v) for v in self.encoder.program.action_masks(S)[0]]

    def legal_actions(self, state: Mapping[str, Any], history: Sequence[str] = (), **episode: Any) -> list[str]:
        """The names of the legal actions (see :meth:`mask`)."""
        return [a for a, ok in zip(self.action_names, self.mask(state, history, **episode)) if ok]

    def rule_action(self, state: Mapping[str, Any], history: Sequence[str] = (), **episode: Any) -> str:
        """The pack's rule engine's action for ``state``: the first legal ``rule_policy`` line that
        holds, else the first legal action."""
        S = self.encoder.state_tensor(state, history, **episode)
        program = self.encoder.program
        return self.action_names[int(program.rule_actions(S, program.action_masks(S))[0])]


__all__ = ["ActionMasker"]
