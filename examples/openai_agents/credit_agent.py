"""An OpenAI Agents SDK credit-approval agent whose next tool is chosen by the rlops policy.

The agent (everything outside the ``rlops adapter`` markers) is an ordinary ``Agent`` with one function
tool per business action over the application held in the run's context. Its model here is a scripted
stand-in for the LLM (it calls the tool it is offered, and answers when offered none), so the example
runs offline; in production it is your OpenAI model. The adapter wraps that model so the policy —
the champion when one is registered, the pack's rule engine otherwise — picks the tool each turn,
and traces every decision into the landing zone.

Run it: ``python examples/openai_agents/credit_agent.py --landing /tmp/landing --tracking sqlite:///mlflow.db``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunContextWrapper, Usage, function_tool, set_trace_processors
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

PACK = Path(__file__).resolve().parents[2] / "scenarios" / "credit_approval"
Ctx = RunContextWrapper[dict[str, Any]]


def applications(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """The incoming queue: ``n`` applications as the agent's database holds them."""
    rng = random.Random(seed)
    return [
        {
            "application_id": f"app-{seed}-{i}",
            "age": rng.randint(21, 70),
            "income_monthly": round(rng.lognormvariate(9.1, 0.45), 2),
            "employment": rng.choice(["salaried", "salaried", "self_employed", "unemployed", "retired"]),
            "loan_amount": round(rng.lognormvariate(10.45, 0.55), 2),
            "purpose": rng.choice(["home", "car", "education", "consumption"]),
            "term_months": rng.randint(6, 36),
            "fraud_check_done": False,
            "credit_report_fetched": False,
            "approval_result": "pending",
            "approved_amount": 0.0,
            "notified": False,
            "region": rng.choice(["guangdong", "jiangsu", "zhejiang", "shanghai", "other", "other"]),
        }
        for i in range(n)
    ]


@function_tool
def initiate_fraud_check(ctx: Ctx) -> str:
    """Call the fraud detection API."""
    app = ctx.context
    app.update(fraud_check_done=True, fraud_flag=random.Random(app["application_id"]).random() < 0.04)
    return f"fraud flag: {app['fraud_flag']}"


@function_tool
def fetch_credit_report(ctx: Ctx) -> str:
    """Query the credit bureau."""
    app = ctx.context
    rng = random.Random(app["application_id"])
    rng.random()
    score = max(300, min(900, int(rng.gauss(640, 95))))
    app.update(credit_report_fetched=True, credit_score=score, debt_ratio=round(max(0.0, rng.gauss(0.35, 0.18)), 3))
    return f"credit score {score}"


@function_tool
def approve(ctx: Ctx) -> str:
    """Approve the requested amount."""
    ctx.context.update(approval_result="approved", approved_amount=ctx.context["loan_amount"])
    return "approved"


@function_tool
def approve_reduced(ctx: Ctx) -> str:
    """Approve at most three monthly incomes."""
    app = ctx.context
    app.update(approval_result="approved_reduced", approved_amount=min(app["loan_amount"], 3 * app["income_monthly"]))
    return "approved (reduced)"


@function_tool
def reject(ctx: Ctx) -> str:
    """Reject the application."""
    ctx.context.update(approval_result="rejected")
    return "rejected"


@function_tool
def escalate_to_human(ctx: Ctx) -> str:
    """Hand the case to a human underwriter."""
    ctx.context.update(approval_result="escalated")
    return "escalated"


@function_tool
def send_notification(ctx: Ctx) -> str:
    """Send the result to the applicant."""
    ctx.context.update(notified=True)
    return "notified"


TOOLS = [
    initiate_fraud_check,
    fetch_credit_report,
    approve,
    approve_reduced,
    reject,
    escalate_to_human,
    send_notification,
]


class ScriptedModel(Model):
    """The LLM's offline stand-in: calls the first tool it is offered, and answers when offered none."""

    async def get_response(
        self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *a: Any, **kw: Any
    ) -> ModelResponse:
        if tools:
            call = ResponseFunctionToolCall(
                arguments="{}", call_id=f"call-{random.getrandbits(32)}", name=tools[0].name, type="function_call"
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(text="The application is handled.", type="output_text", annotations=[])
        message = ResponseOutputMessage(id="msg", content=[text], role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **kw: Any) -> Any:
        raise NotImplementedError("the example does not stream")


async def run_agent(
    queue: list[dict[str, Any]], landing: str, tracking_uri: str, *, keep_trace_processors: bool = False
) -> dict[str, Any]:
    """Handle ``queue`` with the policy in the loop; returns the decisions' serving counts.

    The SDK's trace processors are all dropped first, so that nothing goes to the OpenAI tracing backend
    offline; ``keep_trace_processors`` keeps those registered before the run instead (OpenInference's
    ``OpenAIAgentsInstrumentor`` replaces the SDK's own by its processor, which exports elsewhere)."""
    if not keep_trace_processors:
        set_trace_processors([])  # offline: no export to the OpenAI tracing backend
    # --- rlops adapter begin
    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.integrations.core import observed_fields
    from rlops.integrations.openai_agents import DecisionLoop, PolicyToolChoice, StateMapping

    tracer = Tracer(landing, flush_every=500)
    client = PolicyClient(tracking_uri, "credit_approval", PACK, refresh_every_s=None)
    loop = DecisionLoop(client, tracer, scenario="credit_approval", actions=[t.name for t in TOOLS])
    choice = PolicyToolChoice(loop, StateMapping.by_leaf_name(observed_fields(PACK)), pack_path=PACK)
    agent = Agent(name="credit desk", instructions="Handle the loan application.", tools=TOOLS)
    agent.model = choice.model(ScriptedModel())
    for app in queue:
        await choice.run(agent, "Handle the application", context=app, episode_id=app["application_id"])
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
    out = asyncio.run(run_agent(applications(args.applications), args.landing, args.tracking))
    print({k: v for k, v in out.items() if k != "decision_ms"})
