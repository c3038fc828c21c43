"""A LangGraph loan agent rlops did not shape, for the tests that plug it in as it is: its own tool
names (``fraud_api``, ``credit_bureau``…, not the credit pack's actions), its own router (a
deterministic function standing in for an LLM: the ``triage`` node writes ``next_action``, a
conditional edge follows it), and tools that report their own latency and errors in their update.
The credit bureau's first call times out for every seventh application; the agent retries it."""

from __future__ import annotations

import random
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph


class Loan(TypedDict, total=False):
    """The agent's state: the application, what its tools found, and its own bookkeeping."""

    application_id: str
    age: int
    income_monthly: float
    employment: str
    region: str
    loan_amount: float
    purpose: str
    term_months: int
    fraud_check_done: bool
    fraud_flag: bool
    credit_report_fetched: bool
    credit_score: int
    debt_ratio: float
    approval_result: str
    approved_amount: float
    notified: bool
    kyc_done: bool
    bureau_calls: int
    next_action: str
    latency_ms: float
    error: str | None


def queue(n: int, seed: int) -> list[Loan]:
    rng = random.Random(seed)
    return [
        Loan(
            application_id=f"loan-{seed}-{i}",
            age=rng.randint(21, 80),
            income_monthly=round(rng.uniform(4000, 40000), 2),
            employment=rng.choice(["salaried", "self_employed", "unemployed", "retired"]),
            region=rng.choice(["guangdong", "jiangsu", "other"]),
            loan_amount=round(rng.uniform(5000, 400000), 2),
            purpose=rng.choice(["home", "car", "education", "consumption"]),
            term_months=rng.randint(6, 36),
            fraud_check_done=False,
            credit_report_fetched=False,
            approval_result="pending",
            approved_amount=0.0,
            notified=False,
            kyc_done=False,
            bureau_calls=0,
        )
        for i in range(n)
    ]


def index(state: Loan) -> int:
    return int(state["application_id"].rsplit("-", 1)[1])


def reported_ms(tool: str, state: Loan) -> float:
    """What the agent's service clients report as each call's duration (never the test's wall clock)."""
    return 100.0 + 10.0 * len(tool) + index(state) + (2500.0 if tool == "credit_bureau" and bureau_fails(state) else 0)


def bureau_fails(state: Loan) -> bool:
    return index(state) % 7 == 3 and state.get("bureau_calls", 0) == 0  # the first call times out


# The agent's tools: each returns its update with its own report of latency and error.
def fraud_api(state: Loan) -> dict[str, Any]:
    flag = random.Random(state["application_id"]).random() < 0.08
    return {"fraud_check_done": True, "fraud_flag": flag, "latency_ms": reported_ms("fraud_api", state), "error": None}


def credit_bureau(state: Loan) -> dict[str, Any]:
    calls = state.get("bureau_calls", 0) + 1
    if bureau_fails(state):
        return {"bureau_calls": calls, "latency_ms": reported_ms("credit_bureau", state), "error": "bureau timeout"}
    rng = random.Random(state["application_id"] + "/bureau")
    return {
        "credit_report_fetched": True,
        "credit_score": int(rng.uniform(420, 860)),
        "debt_ratio": round(rng.uniform(0.05, 0.9), 3),
        "bureau_calls": calls,
        "latency_ms": reported_ms("credit_bureau", state),
        "error": None,
    }


def _decision(name: str, result: str, amount: Any) -> Any:
    def tool(state: Loan) -> dict[str, Any]:
        return {
            "approval_result": result,
            "approved_amount": amount(state),
            "latency_ms": reported_ms(name, state),
            "error": None,
        }

    tool.__name__ = name
    return tool


def _capped(state: Loan) -> float:
    return min(state["loan_amount"], 3 * state["income_monthly"])


auto_approve = _decision("auto_approve", "approved", lambda s: s["loan_amount"])
approve_capped = _decision(
    "approve_capped", "approved_reduced", lambda s: min(s["loan_amount"], 3 * s["income_monthly"])
)
decline = _decision("decline", "rejected", lambda s: 0.0)


def underwriter_queue(state: Loan) -> dict[str, Any]:
    return {"approval_result": "escalated", "latency_ms": reported_ms("underwriter_queue", state), "error": None}


def sms_gateway(state: Loan) -> dict[str, Any]:
    return {"notified": True, "latency_ms": reported_ms("sms_gateway", state), "error": None}


def kyc_lookup(state: Loan) -> dict[str, Any]:
    """A tool that is no decision of the pack: the agent looks older applicants up first."""
    return {"kyc_done": True, "latency_ms": 5.0, "error": None}


TOOLS = [fraud_api, credit_bureau, auto_approve, approve_capped, decline, underwriter_queue, sms_gateway, kyc_lookup]


def choose_next(state: Loan) -> dict[str, Any]:
    """The agent's router (an LLM's stand-in): writes its choice of the next tool to the state."""
    if state["approval_result"] == "escalated" or state.get("notified"):
        return {"next_action": END}
    if state["approval_result"] != "pending":
        return {"next_action": "sms_gateway"}
    if state["age"] >= 70 and not state.get("kyc_done"):
        return {"next_action": "kyc_lookup"}
    if not state["fraud_check_done"]:
        return {"next_action": "fraud_api"}
    if not state["credit_report_fetched"]:
        return {"next_action": "credit_bureau"}
    if state.get("fraud_flag") or state["credit_score"] < 560:
        return {"next_action": "decline"}
    if state["loan_amount"] > 10 * state["income_monthly"]:
        return {"next_action": "underwriter_queue"}
    return {"next_action": "approve_capped" if state["debt_ratio"] > 0.5 else "auto_approve"}


def follow_next_action(state: Loan) -> str:
    """The agent's conditional edge: go where its router said."""
    return state["next_action"]


def build_graph(edge: Any, *, triage: Any = choose_next, tools: list[Any] = TOOLS, path_map: Any = None) -> Any:
    """The agent's graph: ``edge`` routes out of the ``triage`` node (the agent's own graph:
    :func:`follow_next_action` out of :func:`choose_next`); the tools lead back to ``triage``."""
    graph = StateGraph(Loan)
    graph.add_node("triage", triage)
    for tool in tools:
        graph.add_node(tool.__name__, tool)
        graph.add_edge(tool.__name__, "triage")
    graph.add_edge(START, "triage")
    graph.add_conditional_edges("triage", edge, path_map or [t.__name__ for t in tools] + [END])
    return graph
