"""The LangGraph example end to end, offline: the rule engine routes the graph before any policy is
promoted, a trained champion routes it after, every decision lands in the trace store (rows in =
accepted + quarantined), and the adapter stays within 20 lines. The reverse path: a LangChain callback
handler traces the tool calls of an unchanged agent."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.integrations.conftest import adapter_lines, capture, example, landing_rows, load_example

EXAMPLE = example("langgraph") / "credit_agent.py"


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return load_example(EXAMPLE)


def test_the_adapter_is_at_most_20_lines() -> None:
    assert adapter_lines(EXAMPLE) <= 20


@pytest.mark.slow  # trains the champion (PPO, a tiny budget) once per session
def test_the_champion_routes_the_graph_and_every_decision_lands(agent: ModuleType, world: dict[str, Any]) -> None:
    out = agent.run_agent(agent.applications(12, seed=1), world["landing"], world["tracking_uri"])
    rows = landing_rows(world["landing"])
    assert out["decisions"] == len(rows) > 12  # several tool steps per application
    assert out["fallbacks"] == {}  # the trained champion served every decision
    assert {r["policy_version"] for r in rows} == {"credit_approval-policy/1"}
    assert all(r["action_mask"][agent_index(r)] == "1" for r in rows)  # each action legal in its state
    assert all(r["logp"] <= 0.0 and r["test_group"] == "champion" for r in rows)
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_episode.setdefault(r["episode_id"], []).append(r)
    assert set(by_episode) == {f"app-1-{i}" for i in range(12)}  # the application id is the episode id
    for steps in by_episode.values():
        steps.sort(key=lambda r: r["step"])
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[0]["state.system_status.fraud_check_done"] is False
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_quarantined"] == 0


ACTIONS = (
    "initiate_fraud_check",
    "fetch_credit_report",
    "approve",
    "approve_reduced",
    "reject",
    "escalate_to_human",
    "send_notification",
)


def agent_index(row: dict[str, Any]) -> int:
    return ACTIONS.index(row["action"])


def test_without_a_champion_the_rule_engine_routes_with_its_true_propensity(
    agent: ModuleType, bare_world: dict[str, Any]
) -> None:
    import math

    world = bare_world
    out = agent.run_agent(agent.applications(3, seed=2), world["landing"], world["tracking_uri"])
    rows = landing_rows(world["landing"])
    assert out["fallbacks"] == {"no_champion": len(rows)}
    assert {r["policy_version"] for r in rows} == {"rules"}
    for r in rows:  # the rule engine explores too: (1 − ε)·[its choice] + ε / |legal|
        legal = str(r["action_mask"]).count("1")
        expected = (0.0 if r["explored"] else 0.95) + 0.05 / legal
        assert math.exp(r["logp"]) == pytest.approx(expected), r
    first = sorted(rows, key=lambda r: (r["episode_id"], r["step"]))
    assert [r["action"] for r in first[:2]] == ["initiate_fraud_check", "fetch_credit_report"]  # rule_policy's order
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"]


def test_a_callback_handler_traces_an_unchanged_agent(agent: ModuleType, tmp_path: Path) -> None:
    from langchain_core.runnables import RunnableLambda
    from langchain_core.tools import tool

    from rlops.agent_sdk import Tracer
    from rlops.integrations.core import ToolCallRecorder, observed_fields
    from rlops.integrations.langgraph import StateMapping, ToolCallHandler

    # The agent as it was: a plain loop over LangChain tools, its own fixed order.
    state: dict[str, dict[str, Any]] = {}

    def make(name: str) -> Any:
        fn = agent.TOOLS[name]

        @tool(name)
        def run(application_id: str) -> str:
            """One business action on the application."""
            app = state[application_id]
            if name == "fetch_credit_report" and application_id.endswith("1"):
                raise ConnectionError("credit bureau timeout")
            app.update(fn(app))
            return app.get("approval_result", "")

        return run

    tools = {n: make(n) for n in ("initiate_fraud_check", "fetch_credit_report", "approve", "send_notification")}

    @tool
    def web_search(application_id: str) -> str:
        """A tool that is no pack action (not a decision the policy makes)."""
        return "nothing found"

    def handle(inputs: dict[str, Any], config: Any) -> str:
        app_id = inputs["application_id"]
        web_search.invoke({"application_id": app_id}, config)
        for name in tools:
            try:
                tools[name].invoke({"application_id": app_id}, config)
            except ConnectionError:
                continue
        return "done"

    mapping = StateMapping.by_leaf_name(observed_fields(agent.PACK))
    tracer = Tracer(tmp_path)
    recorder = ToolCallRecorder(
        tracer, scenario="credit_approval", pack_path=agent.PACK, observer=lambda ep: mapping.read(state[ep])
    )
    handler = ToolCallHandler(recorder, episode_key="application_id")
    for app in agent.applications(2, seed=3):
        state[app["application_id"]] = dict(app)
        RunnableLambda(handle).invoke({"application_id": app["application_id"]}, config={"callbacks": [handler]})
    tracer.close()
    rows = sorted(landing_rows(str(tmp_path)), key=lambda r: (r["episode_id"], r["step"]))
    assert recorder.skipped == 2  # web_search, once per application
    assert [r["action"] for r in rows[:4]] == list(tools)
    assert [r["done"] for r in rows[:4]] == [False, False, False, True]
    errors = [r for r in rows if r["error"]]
    assert [(r["episode_id"], r["action"]) for r in errors] == [("app-3-1", "fetch_credit_report")]
    assert errors[0]["error"].startswith("ConnectionError: credit bureau timeout")
    assert (
        rows[0]["action_mask"] == "1100010" and rows[0]["policy_version"] == "agent_router" and rows[0]["logp"] == 0.0
    )
    assert rows[1]["state.system_status.fraud_check_done"] is True
