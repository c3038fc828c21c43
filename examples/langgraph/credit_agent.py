"""A LangGraph credit-approval agent whose next tool is chosen by the rlops policy.

The agent (everything outside the ``rlops adapter`` markers) is an ordinary LangGraph ``StateGraph``:
one node per business action over the application's state, the notification text written by a chat
model (a fake one here, so the example runs offline). The adapter adds the router node that asks the
policy for the next action — the champion policy when one is registered, the pack's rule engine
otherwise — and traces every decision into the landing zone.

Run it: ``python examples/langgraph/credit_agent.py --landing /tmp/landing --tracking sqlite:///mlflow.db``.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any, TypedDict

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, StateGraph

PACK = Path(__file__).resolve().parents[2] / "scenarios" / "credit_approval"


class Application(TypedDict, total=False):
    """The graph state: one loan application as the agent's database holds it."""

    application_id: str
    age: int
    income_monthly: float
    employment: str
    region: str
    credit_score: int
    debt_ratio: float
    loan_amount: float
    purpose: str
    term_months: int
    fraud_check_done: bool
    credit_report_fetched: bool
    fraud_flag: bool
    approval_result: str
    approved_amount: float
    notified: bool
    message: str


def applications(n: int, seed: int = 0) -> list[Application]:
    """The incoming queue: ``n`` applications (the bureau's answers are drawn per applicant)."""
    rng = random.Random(seed)
    return [
        Application(
            application_id=f"app-{seed}-{i}",
            age=rng.randint(21, 70),
            income_monthly=round(rng.lognormvariate(9.1, 0.45), 2),
            employment=rng.choice(["salaried", "salaried", "self_employed", "unemployed", "retired"]),
            loan_amount=round(rng.lognormvariate(10.45, 0.55), 2),
            purpose=rng.choice(["home", "car", "education", "consumption"]),
            term_months=rng.randint(6, 36),
            fraud_check_done=False,
            credit_report_fetched=False,
            approval_result="pending",
            approved_amount=0.0,
            notified=False,
            region=rng.choice(["guangdong", "jiangsu", "zhejiang", "shanghai", "other", "other"]),
        )
        for i in range(n)
    ]


def _draw(app: Application) -> random.Random:
    return random.Random(str(app["application_id"]))


def initiate_fraud_check(app: Application) -> dict[str, Any]:
    return {"fraud_check_done": True, "fraud_flag": _draw(app).random() < 0.04}


def fetch_credit_report(app: Application) -> dict[str, Any]:
    rng = _draw(app)
    rng.random()
    return {
        "credit_report_fetched": True,
        "credit_score": max(300, min(900, int(rng.gauss(640, 95)))),
        "debt_ratio": round(max(0.0, min(1.5, rng.gauss(0.35, 0.18))), 3),
    }


def approve(app: Application) -> dict[str, Any]:
    return {"approval_result": "approved", "approved_amount": app["loan_amount"]}


def approve_reduced(app: Application) -> dict[str, Any]:
    return {
        "approval_result": "approved_reduced",
        "approved_amount": min(app["loan_amount"], 3 * app["income_monthly"]),
    }


def reject(app: Application) -> dict[str, Any]:
    return {"approval_result": "rejected"}


def escalate_to_human(app: Application) -> dict[str, Any]:
    return {"approval_result": "escalated"}


def send_notification(app: Application) -> dict[str, Any]:
    llm = GenericFakeChatModel(messages=iter([AIMessage(content=f"Your application is {app['approval_result']}.")]))
    return {"notified": True, "message": llm.invoke(f"Write the {app['approval_result']} notice").content}


TOOLS = {
    f.__name__: f
    for f in (
        initiate_fraud_check,
        fetch_credit_report,
        approve,
        approve_reduced,
        reject,
        escalate_to_human,
        send_notification,
    )
}
ENDS = {"escalate_to_human", "send_notification"}


def build_graph(router: Any) -> Any:
    """The agent's graph: ``router`` picks the next tool node; tools lead back to it or end."""
    graph = StateGraph(Application)
    graph.add_node("router", router)
    for name, tool in TOOLS.items():
        graph.add_node(name, tool)
        graph.add_edge(name, END if name in ENDS else "router")
    graph.set_entry_point("router")
    return graph.compile()


def run_agent(queue: list[Application], landing: str, tracking_uri: str) -> dict[str, Any]:
    """Handle ``queue`` with the policy in the loop; returns the decisions' serving counts."""
    # --- rlops adapter begin
    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.integrations.core import observed_fields
    from rlops.integrations.langgraph import DecisionLoop, PolicyRouter, StateMapping

    tracer = Tracer(landing, flush_every=500)
    client = PolicyClient(tracking_uri, "credit_approval", PACK, refresh_every_s=None)
    loop = DecisionLoop(client, tracer, scenario="credit_approval", actions=TOOLS)
    router = PolicyRouter(loop, StateMapping.by_leaf_name(observed_fields(PACK)), episode_key="application_id")
    app = build_graph(router)
    for application in queue:
        app.invoke(application, config=router.config())
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
    out = run_agent(applications(args.applications), args.landing, args.tracking)
    print({k: v for k, v in out.items() if k != "decision_ms"})
