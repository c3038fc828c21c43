"""An AutoGen loan desk: a screener and an underwriter in a ``SelectorGroupChat``, the next speaker and its
tool chosen by the rlops policy of the multi-role ``loan_desk`` pack.

The team (everything outside the ``rlops adapter`` markers) is two ``AssistantAgent``s, each with the
tools of its role over the desk's application record. Their model here is a scripted stand-in for the
LLM (it calls the tool it is offered), so the example runs offline. The adapter selects the speaker
and its tool with the policy — the champion when one is registered, the pack's rule engine otherwise —
and traces every step with the speaking role; the desk's booked margin is the reward hook's score.

Run it: ``python examples/autogen/loan_desk_team.py --landing /tmp/landing --tracking sqlite:///mlflow.db``.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
from pathlib import Path
from typing import Any

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import SelectorGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient

PACK = Path(__file__).resolve().parents[2] / "scenarios" / "loan_desk"


class Desk:
    """The desk's record of the application in hand (the team's shared state)."""

    def __init__(self, application: dict[str, Any]) -> None:
        self.app = application

    def observe(self) -> dict[str, Any]:
        return copy.deepcopy({k: v for k, v in self.app.items() if k != "application_id"})


def applications(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        income = round(rng.lognormvariate(8.8, 0.4), 2)
        out.append(
            {
                "application_id": f"loan-{seed}-{i}",
                "applicant": {
                    "credit_score": max(300, min(850, int(rng.gauss(640, 90)))),
                    "income_monthly": income,
                    "requested_amount": round(rng.uniform(income, 6 * income), 2),
                    "documents_complete": rng.random() < 0.7,
                },
                "application": {"stage": "intake", "document_requests": 0},
                "decision": {"outcome": "pending", "approved_amount": 0.0},
            }
        )
    return out


DESK: Desk = Desk(applications(1)[0])  # the application the team works on


def request_documents() -> str:
    """Ask the applicant for the missing documents."""
    app = DESK.app
    app["application"]["document_requests"] += 1
    answered = random.Random(f"{app['application_id']}-{app['application']['document_requests']}").random() < 0.6
    app["applicant"]["documents_complete"] = app["applicant"]["documents_complete"] or answered
    return "documents received" if answered else "no answer yet"


def pass_to_underwriting() -> str:
    """Pass the file to the underwriter."""
    DESK.app["application"]["stage"] = "underwriting"
    return "passed"


def reject_application() -> str:
    """Reject the application at intake."""
    DESK.app["application"]["stage"] = "closed"
    DESK.app["decision"]["outcome"] = "rejected"
    return "rejected"


def approve() -> str:
    """Approve the amount requested."""
    app = DESK.app
    app["application"]["stage"] = "closed"
    app["decision"].update(outcome="approved", approved_amount=app["applicant"]["requested_amount"])
    return "approved"


def approve_reduced() -> str:
    """Approve at most twice the monthly income."""
    app = DESK.app
    app["application"]["stage"] = "closed"
    app["decision"].update(outcome="approved_reduced", approved_amount=2 * app["applicant"]["income_monthly"])
    return "approved (reduced)"


def decline() -> str:
    """Decline the loan."""
    DESK.app["application"]["stage"] = "closed"
    DESK.app["decision"]["outcome"] = "declined"
    return "declined"


class ScriptedLLM(ReplayChatCompletionClient):
    """The LLM's offline stand-in: calls the first tool it is offered."""

    def __init__(self) -> None:
        info = ModelInfo(
            vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
        )
        super().__init__(["(no tool offered)"], model_info=info)

    async def create(self, messages: Any, *, tools: Any = (), **kwargs: Any) -> CreateResult:
        if not tools:
            return CreateResult(finish_reason="stop", content="ok", usage=RequestUsage(0, 0), cached=False)
        name = tools[0].name if hasattr(tools[0], "name") else tools[0]["name"]
        call = FunctionCall(id=f"call-{random.getrandbits(32)}", arguments="{}", name=name)
        return CreateResult(finish_reason="function_calls", content=[call], usage=RequestUsage(0, 0), cached=False)


async def run_team(queue: list[dict[str, Any]], landing: str, tracking_uri: str) -> dict[str, Any]:
    """Work through ``queue`` with the policy selecting speakers and tools; the serving counts."""
    # --- rlops adapter begin
    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.integrations.autogen import DecisionLoop, PolicySelector

    class DeskMargin:  # the reward provider: the desk's booked margin, 1.5 % of the loan, is the team's score
        component = "desk_margin"

        def reward(self, state: Any, action: str, next_state: Any, episode: Any = None) -> float:
            booked = (next_state or state)["decision"]["approved_amount"] - state["decision"]["approved_amount"]
            return 0.015 * float(booked)

    tracer = Tracer(landing, flush_every=500)
    client = PolicyClient(tracking_uri, "loan_desk", PACK, refresh_every_s=None)
    loop = DecisionLoop(client, tracer, scenario="loan_desk", reward_provider=DeskMargin())
    selector = PolicySelector(loop, DESK, pack_path=PACK)
    llm = selector.model_client(ScriptedLLM())
    # --- rlops adapter end
    screener = AssistantAgent(
        "screener", llm, tools=[request_documents, pass_to_underwriting, reject_application], description="intake"
    )
    underwriter = AssistantAgent("underwriter", llm, tools=[approve, approve_reduced, decline], description="credit")
    team = SelectorGroupChat(
        [screener, underwriter],
        llm,
        # --- rlops adapter begin
        selector_func=selector,
        termination_condition=selector.termination(),
        # --- rlops adapter end
    )
    for application in queue:
        DESK.app = application  # the desk's record now holds this application
        # --- rlops adapter begin
        await selector.run(team, "Handle the application", episode_id=application["application_id"])
        # --- rlops adapter end
    # --- rlops adapter begin
    tracer.close()
    # --- rlops adapter end
    stats = client.stats()
    client.close()
    return {"decisions": stats["decisions"], "fallbacks": stats["fallbacks"], "decision_ms": loop.decision_ms}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--landing", required=True, help="the landing zone folder or s3:// prefix")
    parser.add_argument("--tracking", required=True, help="the MLflow tracking URI of the policy registry")
    parser.add_argument("--applications", type=int, default=50)
    args = parser.parse_args()
    out = asyncio.run(run_team(applications(args.applications), args.landing, args.tracking))
    print({k: v for k, v in out.items() if k != "decision_ms"})
