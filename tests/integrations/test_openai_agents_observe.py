"""The loan agent of :mod:`tests.integrations.loan_agent` built with the OpenAI Agents SDK, plugged in as
it is: its own tool names (``fraud_api``, ``credit_bureau``…, not the credit pack's actions), tools
that report their own latency and errors in what they return, and its own choice of the next tool (a
scripted model standing for the LLM: the loan agent's ``choose_next`` on the application it handles,
honouring a ``tool_choice`` it is given, as an LLM does).

Observe mode leaves every choice to that model and records each one — state, mask, the mapped action,
``logp`` 0 and ``logging_policy: agent_router`` — with the tools' reported latency and errors, and
capture accepts every row; the tool that is no pack action is counted and named once. ``mode="serve"``,
the one argument changed, hands the same agent's tool choice to the policy (the rule engine, no
champion being promoted), which is offered the agent's tool mapped to its action."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, Model, ModelResponse, RunContextWrapper, Usage, function_tool, set_trace_processors
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from rlops.agent_sdk import Tracer
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.integrations.core import DecisionLoop, StateMapping, ToolOutcome, observed_fields
from rlops.integrations.openai_agents import PolicyToolChoice, WiringError
from tests.integrations.conftest import capture, landing_rows
from tests.integrations.loan_agent import END, TOOLS, Loan, choose_next, index, queue, reported_ms
from tests.integrations.test_langgraph_agent_as_is import ACTION_NAMES, PACK, by_episode, expected_ms, stored_rows


def sdk_tool(node: Any) -> Any:
    """The loan agent's tool as a function tool over the application in the run's context: it updates
    the application and returns its own report (``latency_ms``, ``error``) with what it found."""

    def run(ctx: RunContextWrapper[Any]) -> dict[str, Any]:
        update: dict[str, Any] = node(ctx.context)
        ctx.context.update(update)
        return update

    return function_tool(run, name_override=node.__name__, description_override=f"The agent's {node.__name__}.")


AGENT_TOOLS = [sdk_tool(node) for node in TOOLS]


class LoanDeskModel(Model):
    """The LLM's stand-in, working through ``loans`` in order (an LLM reads the application in its
    conversation): calls the tool ``tool_choice`` names when it is given one, else the tool the loan
    agent's ``choose_next`` picks for the application in hand; answers, and takes the next application,
    when offered no tool or when ``choose_next`` says the work is done."""

    def __init__(self, loans: list[Loan]) -> None:
        self.loans, self.handled, self.calls = loans, 0, 0

    async def get_response(
        self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *a: Any, **kw: Any
    ) -> ModelResponse:
        names = [t.name for t in tools]
        forced = model_settings.tool_choice
        choice = forced if forced in names else choose_next(self.loans[self.handled])["next_action"]
        if names and choice != END and forced != "none":
            assert choice in names, (choice, names)
            self.calls += 1
            call_id = f"call-{self.calls}"
            call = ResponseFunctionToolCall(arguments="{}", call_id=call_id, name=choice, type="function_call")
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        self.handled += 1
        text = ResponseOutputText(text="The application is handled.", type="output_text", annotations=[])
        message = ResponseOutputMessage(id="msg", content=[text], role="assistant", status="completed", type="message")
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *a: Any, **kw: Any) -> Any:
        raise NotImplementedError("the test does not stream")


def plug_in(world: dict[str, Any], mode: str) -> tuple[PolicyToolChoice, PolicyClient, Tracer]:
    """The rlops lines the agent gains: the same in both modes but for ``mode``."""
    tracer = Tracer(world["landing"], flush_every=500)
    client = PolicyClient(world["tracking_uri"], "credit_approval", PACK, refresh_every_s=None)
    loop = DecisionLoop(
        client, tracer, scenario="credit_approval", outcome=ToolOutcome(latency_key="latency_ms", error_key="error")
    )
    mapping = StateMapping.by_leaf_name(observed_fields(PACK))
    choice = PolicyToolChoice(loop, mapping, pack_path=PACK, mode=mode, action_names=ACTION_NAMES)
    return choice, client, tracer


async def handle(choice: PolicyToolChoice, loans: list[Loan]) -> None:
    agent = Agent(name="loan desk", instructions="Handle the loan application.", tools=AGENT_TOOLS)
    agent.model = choice.model(LoanDeskModel(loans))
    for loan in loans:
        await choice.run(agent, "Handle the application", context=loan, episode_id=loan["application_id"])


def test_observe_records_the_agents_own_tool_choices_then_one_argument_hands_them_to_the_policy(
    bare_world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    set_trace_processors([])  # offline: no export to the OpenAI tracing backend
    loans = queue(30, seed=11)
    choice, client, tracer = plug_in(bare_world, mode="observe")
    with caplog.at_level(logging.WARNING, logger="rlops.integrations.mapping"):
        asyncio.run(handle(choice, loans))
    tracer.close()
    assert client.stats()["decisions"] == 0  # the policy was never asked
    client.close()
    rows = landing_rows(bare_world["landing"])
    episodes = by_episode(rows)
    assert set(episodes) == {loan["application_id"] for loan in loans}
    assert all(r["logp"] == 0.0 and r["fallback"] is False and r["logging_policy"] == "agent_router" for r in rows)
    assert {r["policy_version"] for r in rows} == {"agent_router"} and all(r["test_group"] is None for r in rows)
    for loan in loans:
        steps = episodes[loan["application_id"]]
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[0]["action"] == "initiate_fraud_check" and steps[0]["action_mask"] == "1100010"
        assert steps[0]["latency_ms"] == reported_ms("fraud_api", loan)  # the tool's report, not the wall clock
        assert steps[0]["state.user_profile.age"] == loan["age"] and steps[1]["state.system_status.fraud_check_done"]
        assert steps[-1]["action"] in ("send_notification", "escalate_to_human")
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)
    failed = [r for r in rows if r["error"]]
    assert failed and all(r["action"] == "fetch_credit_report" and r["error"] == "bureau timeout" for r in failed)
    assert {r["episode_id"] for r in failed} == {loan["application_id"] for loan in loans if index(loan) % 7 == 3}
    retried = episodes[failed[0]["episode_id"]]
    assert [r["action"] for r in retried[:3]] == ["initiate_fraud_check", *["fetch_credit_report"] * 2]
    elders = sum(1 for loan in loans if loan["age"] >= 70)
    assert elders and choice.unknown == {"kyc_lookup": elders}  # counted, not traced
    assert caplog.text.count("'kyc_lookup' is no pack action") == 1
    assert "PolicyToolChoice(action_names=...)" in caplog.text and "action_names={'kyc_lookup'" in caplog.text

    res, stored = stored_rows(rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] and res["rows_quarantined"] == 0
    assert all(json.loads(e) == {"logging_policy": "agent_router"} for e in stored["extra"])
    assert stored["error"].notna().sum() == len(failed)

    # Serve: the same agent, the one argument changed; the policy (the rule engine: no champion) chooses.
    for f in Path(bare_world["landing"]).rglob("*.jsonl"):
        f.unlink()
    choice, client, tracer = plug_in(bare_world, mode="serve")
    served = queue(10, seed=12)
    asyncio.run(handle(choice, served))
    tracer.close()
    set_trace_processors([])
    stats = client.stats()
    client.close()
    rows = landing_rows(bare_world["landing"])
    assert stats["decisions"] == len(rows) and stats["fallbacks"] == {"no_champion": len(rows)}
    assert all(r["policy_version"] == "rules" and r["fallback"] and "logging_policy" not in r for r in rows)
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)  # the served tools' reports, read the same way
    errored = {r["episode_id"] for r in rows if r["error"]}
    assert errored <= {loan["application_id"] for loan in served if index(loan) % 7 == 3}
    for loan in served:
        steps = by_episode(rows)[loan["application_id"]]
        assert steps[0]["action"] == "initiate_fraud_check" or steps[0]["explored"]  # the rule engine's first rule
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert not loan.get("kyc_done")  # the policy chooses: the agent's own detour is not taken
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"]


def test_a_wrong_mode_or_an_observe_mode_without_what_it_needs_gets_one_clear_error(tmp_path: Path) -> None:
    class NotAsked:
        def decide(self, state: Any, key: Any = None, history: Any = (), **kw: Any) -> Any:
            raise AssertionError("observe mode asked the policy")

    loop = DecisionLoop(NotAsked(), Tracer(tmp_path), scenario="credit_approval", pack_path=PACK)
    mapping = StateMapping.by_leaf_name(observed_fields(PACK))
    with pytest.raises(WiringError, match=r"PolicyToolChoice\(mode='shadow'\): expected one of \['serve', 'observe'\]"):
        PolicyToolChoice(loop, mapping, pack_path=PACK, mode="shadow")
    with pytest.raises(WiringError, match=r"agent_version='rules'\).*not 'rules', the pack's rule engine"):
        PolicyToolChoice(loop, mapping, pack_path=PACK, mode="observe", agent_version="rules")
    with pytest.raises(WiringError, match=r"deterministic='yes'\): expected True"):
        PolicyToolChoice(loop, mapping, pack_path=PACK, mode="observe", deterministic="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\{'fraud_api': 'fraud_check'\} map tools to no pack action"):
        PolicyToolChoice(loop, mapping, pack_path=PACK, mode="observe", action_names={"fraud_api": "fraud_check"})
    bare = DecisionLoop(NotAsked(), Tracer(tmp_path), scenario="credit_approval")
    with pytest.raises(WiringError, match=r"DecisionLoop\(pack_path=<the pack>\)"):
        PolicyToolChoice(bare, mapping, pack_path=PACK, mode="observe")


def test_served_without_a_tool_for_the_policys_action_says_which_mapping_fixes_it(
    bare_world: dict[str, Any],
) -> None:
    set_trace_processors([])
    tracer = Tracer(bare_world["landing"])
    client = PolicyClient(bare_world["tracking_uri"], "credit_approval", PACK, refresh_every_s=None)
    choice = PolicyToolChoice(
        DecisionLoop(client, tracer, scenario="credit_approval"),
        StateMapping.by_leaf_name(observed_fields(PACK)),
        pack_path=PACK,
    )
    loan = queue(1, seed=13)[0]
    with pytest.raises(WiringError, match=r"none of the agent's tools \[.*'fraud_api'.*action_names=\{<its name>: "):
        asyncio.run(handle(choice, [loan]))
    tracer.close()
    client.close()
    set_trace_processors([])


def test_the_pages_observe_block_runs(bare_world: dict[str, Any]) -> None:
    """docs/integrations/openai-agents.md's observe-mode block, over this agent."""
    import ast
    import re

    from rlops.common.config import REPO_ROOT

    page = (REPO_ROOT / "docs" / "integrations" / "openai-agents.md").read_text()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", page, re.S | re.M) if 'mode="observe"' in b]
    assert len(blocks) == 1
    loans = queue(4, seed=14)
    names: dict[str, Any] = {
        **{k: bare_world[k] for k in ("landing", "tracking_uri")},
        "PACK": PACK,
        "Agent": Agent,
        "AGENT_TOOLS": AGENT_TOOLS,
        "my_model": LoanDeskModel(loans),
        "loans": loans,
    }
    set_trace_processors([])
    code = compile(blocks[0], "<openai-agents.md, observe block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    asyncio.run(eval(code, names))  # a block with top-level await evaluates to its coroutine
    names["client"].close()
    set_trace_processors([])
    rows = landing_rows(bare_world["landing"])
    assert {r["episode_id"] for r in rows} == {loan["application_id"] for loan in loans}
    assert all(r["logging_policy"] == "agent_router" and r["latency_ms"] == expected_ms(r) for r in rows)
