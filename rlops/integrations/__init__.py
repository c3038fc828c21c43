"""Adapters that plug an agent built with a framework into rlops, each on the SDK's three interfaces
(state observer, action executor, reward provider) and :class:`~rlops.agent_sdk.policy_client.PolicyClient`.

* :mod:`rlops.integrations.langgraph` — a LangGraph router that asks the policy for the next tool
  node (a ``Command`` node or a conditional edge's function), or records the agent's own router's
  choices in observe mode, and a LangChain callback handler that traces the tool calls of an agent
  as it is;
* :mod:`rlops.integrations.openai_agents` — a tool-choice hook around an OpenAI Agents SDK model, or
  the model's own tool choices recorded in observe mode, and a tracing processor that turns the SDK's
  function spans into trace rows;
* :mod:`rlops.integrations.autogen` — a ``selector_func`` choosing an AutoGen team's next speaker
  and its tool from the policy (multi-role packs such as ``loan_desk``), or the team's own choices
  recorded in observe mode.

The framework-free part (the decision loop, the tool-call recorder and the declared mappings:
state, tool names, tool outcomes) is :mod:`rlops.integrations.core`, built from
:mod:`rlops.integrations.mapping`, :mod:`rlops.integrations.tool_calls` and, for LangChain's
callback events, :mod:`rlops.integrations.callbacks`. Each framework module imports its framework when it is used and
names the extra to install when it is missing (``[langgraph]``, ``[openai-agents]``, ``[autogen]`` of
the installed distribution: ``rlops``, or the slim ``rlops-agent`` a production agent installs,
``pip install './agent[langgraph]'``); nothing else in rlops imports a framework. The package
imports only what ``rlops-agent`` carries (the agent SDK, the pack's masks and rule engine on numpy):
never torch, Airflow, DVC, pandas or Great Expectations.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from types import ModuleType

from rlops.common.errors import UserError


class MissingExtraError(UserError, ImportError):
    """A framework integration used without its framework installed."""


#: The slim distribution built from ``agent/pyproject.toml``.
AGENT_DISTRIBUTION = "rlops-agent"


def install_hint(extra: str) -> str:
    """The ``pip install`` line that adds ``extra`` to the rlops distribution installed here."""
    try:
        importlib.metadata.distribution("rlops")
    except importlib.metadata.PackageNotFoundError:
        try:
            importlib.metadata.distribution(AGENT_DISTRIBUTION)
        except importlib.metadata.PackageNotFoundError:
            pass
        else:  # built from a checkout's agent/ folder, not installed from a package index
            return f"pip install './agent[{extra}]' (the {AGENT_DISTRIBUTION} package, from a checkout of rlops)"
    return f"pip install 'rlops[{extra}]'"


def require(module: str, extra: str, framework: str) -> ModuleType:
    """Import ``module`` of ``framework``, or raise :class:`MissingExtraError` naming the extra."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(
            f"rlops.integrations needs {framework} for this adapter, but importing {module} failed ({exc}); "
            f"install it with: {install_hint(extra)}"
        ) from exc
