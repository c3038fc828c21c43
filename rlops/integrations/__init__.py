"""Adapters that plug an agent built with a framework into rlops, each on the SDK's three interfaces
(state observer, action executor, reward provider) and :class:`~rlops.agent_sdk.policy_client.PolicyClient`.

* :mod:`rlops.integrations.langgraph` — a LangGraph router node that asks the policy for the next
  tool node, and a LangChain callback handler that traces the tool calls of an agent as it is;
* :mod:`rlops.integrations.openai_agents` — a tool-choice hook around an OpenAI Agents SDK model,
  and a tracing processor that turns the SDK's function spans into trace rows;
* :mod:`rlops.integrations.autogen` — a ``selector_func`` choosing an AutoGen team's next speaker
  and its tool from the policy (multi-role packs such as ``loan_desk``).

The framework-free part (the decision loop, the state mapping, the tool-call recorder) is
:mod:`rlops.integrations.core`. Each framework module imports its framework when it is used and
names the extra to install when it is missing (``pip install 'rlops[langgraph]'``, ``[openai-agents]``,
``[autogen]``); nothing else in rlops imports a framework.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from rlops.common.errors import UserError


class MissingExtraError(UserError, ImportError):
    """A framework integration used without its framework installed."""


def require(module: str, extra: str, framework: str) -> ModuleType:
    """Import ``module`` of ``framework``, or raise :class:`MissingExtraError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"rlops.integrations needs {framework} for this adapter, but importing {module} failed ({exc}); "
            f"install it with: pip install 'rlops[{extra}]'"
        ) from exc
