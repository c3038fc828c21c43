"""The serving defaults the params model shares with the policy client, in a module that imports
nothing: the params (read by every command, ``rlops config validate`` included) take them from
here without importing numpy with :mod:`rlops.agent_sdk.serving`."""

from __future__ import annotations

#: The share of decisions a serving policy explores by default: the source's 5 % of live requests
#: marked as exploration traffic (params ``exploration.share`` carries the same default).
DEFAULT_EXPLORATION = 0.05
#: What an explored decision is drawn from: ``policy``, the serving policy's own distribution over
#: the legal actions (cheap: a good policy puts little mass on a costly action; actions it rules
#: out are seldom tried), or ``uniform`` over the legal actions (every legal action has at least
#: ``ε/|legal|``, at a cost: on the credit pack 12% of the live return at ε = 0.05, against 0.3%).
EXPLORATION_DISTRIBUTIONS = ("uniform", "policy")

__all__ = ["DEFAULT_EXPLORATION", "EXPLORATION_DISTRIBUTIONS"]
