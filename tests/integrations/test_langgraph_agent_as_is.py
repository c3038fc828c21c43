"""A LangGraph agent rlops did not shape (:mod:`tests.integrations.loan_agent`), plugged in as it is:
its own tool names (``fraud_api``, ``credit_bureau``…, not the credit pack's actions), its own router
(a deterministic function standing in for an LLM: a ``triage`` node writes ``next_action``, a
conditional edge follows it), tools that report their own latency and errors in what they return.

Observe mode records what the agent's router chose — state, mask, the mapped action, ``logp`` 0 and
``logging_policy: agent_router`` — with the tools' reported latency and errors, and capture accepts
every row; ``mode="serve"``, the one argument changed, hands the same graph's routing to the policy
(the rule engine, no champion being promoted) through the conditional edge. A graph wired so the
router cannot serve it stops with one WiringError naming the fix; the unchanged graph is traced by
the callback handler alone, its tool names mapped."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from langgraph.graph import END, START, StateGraph

from rlops.agent_sdk import Tracer
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.integrations.core import DecisionLoop, StateMapping, ToolCallRecorder, ToolOutcome, observed_fields
from rlops.integrations.langgraph import PolicyRouter, ToolCallHandler, WiringError
from tests.integrations.conftest import capture, example, landing_rows
from tests.integrations.loan_agent import (
    TOOLS,
    Loan,
    build_graph,
    choose_next,
    follow_next_action,
    index,
    kyc_lookup,
    queue,
    reported_ms,
)

PACK = example("langgraph").parents[1] / "scenarios" / "credit_approval"
#: The pack's actions, as this agent's tool nodes name them.
NODES = {
    "initiate_fraud_check": "fraud_api",
    "fetch_credit_report": "credit_bureau",
    "approve": "auto_approve",
    "approve_reduced": "approve_capped",
    "reject": "decline",
    "escalate_to_human": "underwriter_queue",
    "send_notification": "sms_gateway",
}
ACTION_NAMES = {node: action for action, node in NODES.items()}


def expected_ms(row: dict[str, Any]) -> float:
    """The latency the tool reported for the call a trace row records."""
    node = NODES[row["action"]]
    return 100.0 + 10.0 * len(node) + int(row["episode_id"].rsplit("-", 1)[1]) + (2500.0 if row["error"] else 0.0)


def plug_in(world: dict[str, Any], mode: str) -> tuple[PolicyRouter, PolicyClient, Tracer]:
    """The rlops lines the agent gains: the same in both modes but for ``mode``."""
    tracer = Tracer(world["landing"], flush_every=500)
    client = PolicyClient(world["tracking_uri"], "credit_approval", PACK, refresh_every_s=None)
    loop = DecisionLoop(
        client, tracer, scenario="credit_approval", outcome=ToolOutcome(latency_key="latency_ms", error_key="error")
    )
    mapping = StateMapping.by_leaf_name(observed_fields(PACK))
    router = PolicyRouter(
        loop, mapping, episode_key="application_id", nodes=NODES, mode=mode, agent_router=follow_next_action
    )
    return router, client, tracer


def stored_rows(rows: list[dict[str, Any]]) -> tuple[dict[str, Any], Any]:
    """Capture over the rows' interval (:func:`tests.integrations.conftest.capture`), and what it stored."""
    from rlops.common.run_key import RunKey
    from rlops.pipeline_steps.infra.context import StepContext

    res = capture("credit_approval", rows)
    key = RunKey.covering(min(r["ts"] for r in rows), max(r["ts"] for r in rows))
    ctx = StepContext.create("credit_approval", str(key), overrides={"capture": {"track": False}})
    return res, ctx.traces.read("credit_approval")


def by_episode(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["episode_id"], r["step"])):
        out.setdefault(r["episode_id"], []).append(r)
    return out


def test_observe_records_the_agents_own_router_then_one_argument_hands_it_to_the_policy(
    bare_world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    apps = queue(50, seed=5)
    # Observe: the agent's router decides; rlops records.
    router, client, tracer = plug_in(bare_world, mode="observe")
    graph = build_graph(router.route).compile()
    with caplog.at_level(logging.WARNING, logger="rlops.integrations.mapping"):
        finals = [graph.invoke(app, config=router.config()) for app in apps]
    tracer.close()
    assert client.stats()["decisions"] == 0  # the policy was never asked
    client.close()
    rows = landing_rows(bare_world["landing"])
    episodes = by_episode(rows)
    assert set(episodes) == {a["application_id"] for a in apps}
    assert {r["action"] for r in rows} <= set(NODES) and "initiate_fraud_check" in {r["action"] for r in rows}
    assert all(r["logp"] == 0.0 and r["fallback"] is False and r["logging_policy"] == "agent_router" for r in rows)
    assert {r["policy_version"] for r in rows} == {"agent_router"} and all(r["test_group"] is None for r in rows)
    for app, final in zip(apps, finals):
        steps = episodes[app["application_id"]]
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[0]["action"] == "initiate_fraud_check" and steps[0]["action_mask"] == "1100010"
        assert steps[0]["latency_ms"] == reported_ms("fraud_api", app)  # the tool's report, not the wall clock
        assert steps[0]["state.user_profile.age"] == app["age"] and steps[1]["state.system_status.fraud_check_done"]
        assert all(r["action_mask"][list(NODES).index(r["action"])] == "1" for r in steps)  # legal where chosen
        assert final["notified"] or final["approval_result"] == "escalated"
    failed = [r for r in rows if r["error"]]
    assert failed and all(r["action"] == "fetch_credit_report" and r["error"] == "bureau timeout" for r in failed)
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)  # the tools' reports, not the wall clock
    assert {r["episode_id"] for r in failed} == {a["application_id"] for a in apps if index(a) % 7 == 3}
    retried = episodes[failed[0]["episode_id"]]
    assert [r["action"] for r in retried[:3]] == ["initiate_fraud_check", *["fetch_credit_report"] * 2]  # a retry
    elders = sum(1 for a in apps if a["age"] >= 70)
    assert elders and router.unknown == {"kyc_lookup": elders}  # counted, not traced
    assert caplog.text.count("'kyc_lookup' is no pack action") == 1 and "PolicyRouter(nodes=...)" in caplog.text

    res, stored = stored_rows(rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] and res["rows_quarantined"] == 0
    assert len(stored) == len(rows) and all(
        json.loads(e) == {"logging_policy": "agent_router"} for e in stored["extra"]
    )
    assert stored["error"].notna().sum() == len(failed)

    # Serve: the same graph, the one argument changed; the policy (the rule engine: no champion) routes.
    for f in Path(bare_world["landing"]).rglob("*.jsonl"):
        f.unlink()
    router, client, tracer = plug_in(bare_world, mode="serve")
    graph = build_graph(router.route).compile()
    served = queue(12, seed=6)
    finals = [graph.invoke(app, config=router.config()) for app in served]
    tracer.close()
    stats = client.stats()
    client.close()
    rows = landing_rows(bare_world["landing"])
    assert stats["decisions"] == len(rows) and stats["fallbacks"] == {"no_champion": len(rows)}
    assert all(r["policy_version"] == "rules" and r["fallback"] and "logging_policy" not in r for r in rows)
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)
    failing = {a["application_id"] for a in served if index(a) % 7 == 3}
    errored = {r["episode_id"] for r in rows if r["error"]}
    assert errored and errored <= failing  # the bureau's first call times out there, whoever routes
    for app, final in zip(served, finals):
        steps = by_episode(rows)[app["application_id"]]
        assert steps[0]["action"] == "initiate_fraud_check" or steps[0]["explored"]  # the rule engine's first rule
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert final["notified"] or final["approval_result"] == "escalated"  # the graph ended where the pack does
        assert not final.get("kyc_done")  # the policy routes: the agent's own detour is not taken
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"]


@pytest.mark.parametrize("leftover", [None, "decline"], ids=["no-next_action", "stale-next_action"])
def test_a_command_router_left_with_the_agents_conditional_edge_gets_one_clear_error(
    bare_world: dict[str, Any], leftover: str | None
) -> None:
    """The agent's ``triage`` node swapped for the router, its conditional edge kept. Without the
    check: ``KeyError: 'next_action'``, or (a stale one) two tools in one step and LangGraph's
    ``InvalidUpdateError``."""
    router, client, tracer = plug_in(bare_world, mode="serve")
    app = queue(1, seed=7)[0] | ({"next_action": leftover} if leftover else {})
    with pytest.raises(WiringError) as err:
        build_graph(follow_next_action, triage=router).compile().invoke(app, config=router.config())
    client.close()
    tracer.close()
    text = str(err.value)
    assert "routes by Command from node 'triage'" in text and "conditional edge out of 'triage'" in text
    assert "router.route" in text and "remove that edge" in text


def test_a_second_route_to_a_tool_beside_the_routers_gets_one_clear_error(bare_world: dict[str, Any]) -> None:
    """A Command router with a static edge to a tool as well: without the check, two tools in one step
    and LangGraph's ``InvalidUpdateError``."""
    router, client, tracer = plug_in(bare_world, mode="serve")
    graph = StateGraph(Loan)
    graph.add_node("router", router)
    for tool in TOOLS:
        graph.add_node(tool.__name__, tool)
        graph.add_edge(tool.__name__, END)
    graph.add_edge(START, "router")
    graph.add_edge("router", "decline")
    with pytest.raises(WiringError, match="tool node 'decline' started while the router's choice is 'fraud_api'"):
        graph.compile().invoke(queue(1, seed=7)[0], config=router.config())
    client.close()
    tracer.close()


def test_the_router_as_node_and_edge_at_once_and_a_state_without_the_episode_key_are_refused(
    bare_world: dict[str, Any],
) -> None:
    router, client, tracer = plug_in(bare_world, mode="serve")
    graph = build_graph(router.route, triage=router).compile()
    with pytest.raises(WiringError, match="routes by Command from node 'triage'"):  # its callbacks see the edge
        graph.invoke(queue(1, seed=8)[0], config=router.config())
    router, _, _ = plug_in(bare_world, mode="serve")
    graph = build_graph(router.route, triage=router).compile()
    with pytest.raises(WiringError, match="both a node and the function of a conditional edge"):  # even without
        graph.invoke(queue(1, seed=8)[0])
    router, _, _ = plug_in(bare_world, mode="serve")
    app = {k: v for k, v in queue(1, seed=8)[0].items() if k != "application_id"}
    with pytest.raises(WiringError, match=r"graph state has no 'application_id' \(it has \[.*'age'"):
        build_graph(router.route).compile().invoke(app, config=router.config())
    client.close()
    tracer.close()


def test_an_edge_whose_path_map_lacks_the_tool_node_names_it(bare_world: dict[str, Any]) -> None:
    """The agent's path map names its tools otherwise; without the check, LangGraph's bare ``KeyError``."""
    router, client, tracer = plug_in(bare_world, mode="serve")
    graph = build_graph(router.route, path_map={f"do_{t.__name__}": t.__name__ for t in TOOLS}).compile()
    with pytest.raises(WiringError, match="no path for 'fraud_api'.*give add_conditional_edges the node names"):
        graph.invoke(queue(1, seed=9)[0], config=router.config())
    client.close()
    tracer.close()


def test_observe_mode_needs_the_agents_router_and_a_known_mode() -> None:
    class Stub:
        def decide(self, state: Any, key: Any = None, history: Any = (), **kw: Any) -> Any:
            raise AssertionError("not asked")

    loop = DecisionLoop(Stub(), Tracer(Path("/nonexistent")), scenario="credit_approval", pack_path=PACK)
    mapping = StateMapping.by_leaf_name(observed_fields(PACK))
    with pytest.raises(WiringError, match="agent_router=<the function"):
        PolicyRouter(loop, mapping, episode_key="application_id", mode="observe")
    with pytest.raises(ValueError, match=r"mode='shadow'.*\['serve', 'observe'\]"):
        PolicyRouter(loop, mapping, episode_key="application_id", mode="shadow")
    bare = DecisionLoop(Stub(), Tracer(Path("/nonexistent")), scenario="credit_approval")
    with pytest.raises(WiringError, match=r"DecisionLoop\(pack_path="):
        PolicyRouter(bare, mapping, episode_key="application_id", mode="observe", agent_router=follow_next_action)


def test_the_unchanged_graph_is_traced_by_the_callback_handler_its_tool_names_mapped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_core.tools import tool

    @tool
    def kyc_registry(application_id: str) -> str:
        """The registry lookup the agent's kyc node makes: a tool that is no pack action."""
        return "clear"

    def kyc_with_registry(state: Loan) -> dict[str, Any]:
        kyc_registry.invoke({"application_id": state["application_id"]})
        return kyc_lookup(state)

    kyc_with_registry.__name__ = "kyc_lookup"
    graph = build_graph(follow_next_action, tools=[*TOOLS[:-1], kyc_with_registry]).compile()  # the agent as it is
    tracer = Tracer(tmp_path)
    mapping = StateMapping.by_leaf_name(observed_fields(PACK))
    recorder = ToolCallRecorder(
        tracer,
        scenario="credit_approval",
        pack_path=PACK,
        action_names=ACTION_NAMES,
        outcome=ToolOutcome(latency_key="latency_ms", error_key="error"),
    )
    handler = ToolCallHandler(recorder, episode_key="application_id", mapping=mapping)
    apps = queue(15, seed=10)
    with caplog.at_level(logging.WARNING, logger="rlops.integrations.mapping"):
        for app in apps:
            graph.invoke(app, config={"callbacks": [handler]})
    tracer.close()
    rows = landing_rows(str(tmp_path))
    episodes = by_episode(rows)
    assert set(episodes) == {a["application_id"] for a in apps}
    elders = sum(1 for a in apps if a["age"] >= 70)
    assert elders and recorder.unknown == {"kyc_registry": elders} and recorder.skipped == elders
    assert caplog.text.count("'kyc_registry' is no pack action") == 1 and "action_names={'kyc_registry'" in caplog.text
    assert {r["action"] for r in rows} <= set(NODES)
    assert all(r["logp"] == 0.0 and r["logging_policy"] == "agent_router" for r in rows)
    for app in apps:
        steps = episodes[app["application_id"]]
        assert steps[0]["action"] == "initiate_fraud_check" and steps[0]["action_mask"] == "1100010"
        assert steps[0]["latency_ms"] == reported_ms("fraud_api", app)
        assert steps[-1]["done"] and steps[-1]["action"] in ("send_notification", "escalate_to_human")
    failed = [r for r in rows if r["error"]]
    assert {r["episode_id"] for r in failed} == {a["application_id"] for a in apps if index(a) % 7 == 3}
    assert all(r["error"] == "bureau timeout" for r in failed)


def test_the_pages_python_blocks_run(bare_world: dict[str, Any]) -> None:
    """docs/integrations/langgraph.md's Python blocks, in order, over this agent and the example's."""
    import re

    from rlops.common.config import REPO_ROOT
    from tests.integrations.conftest import load_example

    page = (REPO_ROOT / "docs" / "integrations" / "langgraph.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", page, re.S | re.M)
    example_agent = load_example(example("langgraph") / "credit_agent.py")
    names: dict[str, Any] = {
        **{k: bare_world[k] for k in ("landing", "tracking_uri")},
        "PACK": PACK,
        "TOOLS": example_agent.TOOLS,
        "build_graph": example_agent.build_graph,
        "queue": example_agent.applications(3, seed=20),
        "Loan": Loan,
        "choose_next": choose_next,
        "follow_next_action": follow_next_action,
        "AGENT_TOOLS": TOOLS,
        "loans": queue(6, seed=21),
        "agent": build_graph(follow_next_action).compile(),
    }
    clients = []
    for n, block in enumerate(blocks, 1):
        exec(compile(block, f"<docs/integrations/langgraph.md, python block {n}>", "exec"), names)
        clients.append(names.get("client"))
    for client in {id(c): c for c in clients if c is not None}.values():
        client.close()
    assert len(blocks) == 4
    rows = landing_rows(bare_world["landing"])
    observed = [r for r in rows if r.get("logging_policy") == "agent_router"]
    assert {r["episode_id"] for r in rows if r["episode_id"].startswith("app-20-")}  # the whole adapter's
    assert {r["episode_id"] for r in observed} == {loan["application_id"] for loan in names["loans"]}
    for steps in by_episode(observed).values():  # observe mode and the reverse path: the same choices, twice
        by_step = sorted((r["step"], r["action"], r["latency_ms"], r["action_mask"]) for r in steps)
        assert by_step[::2] == by_step[1::2]
