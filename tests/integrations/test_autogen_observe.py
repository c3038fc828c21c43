"""An AutoGen loan desk rlops did not shape, plugged in as it is: two ``AssistantAgent``s named its own
way (``intake_clerk``, ``credit_officer``, not the ``loan_desk`` pack's roles) with tools named its own
way (``ask_for_papers``, ``grant``…, not the pack's actions, and a sanctions check that is no pack
action), tools that report their own latency and errors in what they return (the core banking system
times out on the first booking of every fifth application; the officer books again), and the team's own
choices: AutoGen's model-based speaker selection and each agent's tool, made by a scripted model
standing for the LLM (the desk's own rules on the record it works on).

Observe mode leaves every choice to the team and records each tool call — state, mask, the mapped
action, the role, ``logp`` 0 and ``logging_policy: agent_router`` — with the tools' reported latency and
errors, and capture accepts every row; the sanctions check is counted and named once. ``mode="serve"``,
the one argument changed, hands the same team to the policy (the rule engine, no champion promoted):
it selects the speaker and offers it the agent's tool mapped to its action."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.teams import SelectorGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_ext.models.replay import ReplayChatCompletionClient
from pydantic import BaseModel

from rlops.agent_sdk import Tracer
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.integrations.autogen import DecisionLoop, PolicySelector, ToolOutcome, WiringError
from tests.integrations.conftest import capture, example, landing_rows, load_example

PACK = example("autogen").parents[1] / "scenarios" / "loan_desk"
#: The desk's tool names → the pack's actions.
ACTION_NAMES = {
    "ask_for_papers": "request_documents",
    "send_to_credit": "pass_to_underwriting",
    "turn_down": "reject_application",
    "grant": "approve",
    "grant_capped": "approve_reduced",
    "refuse": "decline",
}
AGENTS = {"screener": "intake_clerk", "underwriter": "credit_officer"}


class Desk:
    """The desk's record of the application in hand (the team's shared state) and its own bookkeeping."""

    def __init__(self) -> None:
        self.app: dict[str, Any] = {}
        self.sanctions_checked = False
        self.bookings = 0

    def take(self, application: dict[str, Any]) -> None:
        self.app, self.sanctions_checked, self.bookings = application, False, 0

    def observe(self) -> dict[str, Any]:
        return copy.deepcopy({k: v for k, v in self.app.items() if k != "application_id"})

    @property
    def index(self) -> int:
        return int(self.app["application_id"].rsplit("-", 1)[1])


DESK = Desk()


class Report(BaseModel):
    """What each of the desk's service calls returns: its own report of how long it took and what failed."""

    note: str
    latency_ms: float
    error: str | None = None


def reported_ms(tool: str, index: int, failed: bool = False) -> float:
    return 50.0 + 10.0 * len(tool) + index + (3000.0 if failed else 0.0)


def report(tool: str, note: str, failed: bool = False) -> Report:
    error = "core banking timeout" if failed else None
    return Report(note=note, latency_ms=reported_ms(tool, DESK.index, failed), error=error)


def check_sanctions() -> Report:
    """Screen the applicant against the sanctions list (no decision of the pack)."""
    DESK.sanctions_checked = True
    return report("check_sanctions", "clear")


def ask_for_papers() -> Report:
    """Ask the applicant for the missing documents."""
    app = DESK.app
    app["application"]["document_requests"] += 1
    answered = app["application"]["document_requests"] == 2 or DESK.index % 2 == 0
    app["applicant"]["documents_complete"] = app["applicant"]["documents_complete"] or answered
    return report("ask_for_papers", "received" if answered else "no answer")


def send_to_credit() -> Report:
    """Pass the file to the credit officer."""
    DESK.app["application"]["stage"] = "underwriting"
    return report("send_to_credit", "passed")


def turn_down() -> Report:
    """Reject the application at intake."""
    DESK.app["application"]["stage"] = "closed"
    DESK.app["decision"]["outcome"] = "rejected"
    return report("turn_down", "rejected")


def book(tool: str, outcome: str, amount: float) -> Report:
    DESK.bookings += 1
    if DESK.index % 5 == 1 and DESK.bookings == 1:  # core banking times out on the first booking
        return report(tool, "not booked", failed=True)
    DESK.app["application"]["stage"] = "closed"
    DESK.app["decision"].update(outcome=outcome, approved_amount=amount)
    return report(tool, outcome)


def grant() -> Report:
    """Approve the amount requested."""
    return book("grant", "approved", DESK.app["applicant"]["requested_amount"])


def grant_capped() -> Report:
    """Approve twice the monthly income."""
    return book("grant_capped", "approved_reduced", 2 * DESK.app["applicant"]["income_monthly"])


def refuse() -> Report:
    """Decline the loan."""
    DESK.app["application"]["stage"] = "closed"
    DESK.app["decision"]["outcome"] = "declined"
    return report("refuse", "declined")


CLERK_TOOLS = [check_sanctions, ask_for_papers, send_to_credit, turn_down]
OFFICER_TOOLS = [grant, grant_capped, refuse]


def desk_rules() -> str:
    """The desk's own next step on its record: the tool it calls next."""
    app = DESK.app
    applicant, docs = app["applicant"], app["applicant"]["documents_complete"]
    if app["application"]["stage"] == "intake":
        if not DESK.sanctions_checked:
            return "check_sanctions"
        if applicant["credit_score"] < 450:
            return "turn_down"
        if not docs and app["application"]["document_requests"] < 2:
            return "ask_for_papers"
        return "send_to_credit"
    if not docs or applicant["credit_score"] < 580:
        return "refuse"
    return "grant" if applicant["requested_amount"] <= 3 * applicant["income_monthly"] else "grant_capped"


class DeskLLM(ReplayChatCompletionClient):
    """The LLM's stand-in: asked to select the next speaker (no tools), names the agent whose stage the
    record is in; as a speaker, calls the tool of the desk's rules, or the one tool it is offered."""

    def __init__(self) -> None:
        info = ModelInfo(
            vision=False, function_calling=True, json_output=False, family="unknown", structured_output=False
        )
        super().__init__(["(unused)"], model_info=info)
        self.calls = 0

    async def create(self, messages: Any, *, tools: Any = (), **kwargs: Any) -> CreateResult:
        if not tools:
            stage = DESK.app["application"]["stage"]
            speaker = AGENTS["screener"] if stage == "intake" else AGENTS["underwriter"]
            return CreateResult(finish_reason="stop", content=speaker, usage=RequestUsage(0, 0), cached=False)
        names = [t["name"] if isinstance(t, dict) else t.name for t in tools]
        name = desk_rules() if desk_rules() in names else names[0]
        self.calls += 1
        call = FunctionCall(id=f"call-{self.calls}", arguments="{}", name=name)
        return CreateResult(finish_reason="function_calls", content=[call], usage=RequestUsage(0, 0), cached=False)


def applications(n: int, seed: int) -> list[dict[str, Any]]:
    return load_example(example("autogen") / "loan_desk_team.py").applications(n, seed)  # type: ignore[no-any-return]


def plug_in(world: dict[str, Any], mode: str) -> tuple[PolicySelector, Any, PolicyClient, Tracer]:
    """The rlops lines the team gains, the same in both modes but for ``mode``; the team."""
    tracer = Tracer(world["landing"], flush_every=500)
    client = PolicyClient(world["tracking_uri"], "loan_desk", PACK, refresh_every_s=None)
    outcome = ToolOutcome(latency_key="latency_ms", error_key="error")
    loop = DecisionLoop(client, tracer, scenario="loan_desk", outcome=outcome)
    selector = PolicySelector(loop, DESK, pack_path=PACK, agents=AGENTS, mode=mode, action_names=ACTION_NAMES)
    llm = selector.model_client(DeskLLM())
    clerk = AssistantAgent(
        AGENTS["screener"],
        llm,
        tools=[check_sanctions, ask_for_papers, send_to_credit, turn_down],
        description="intake",
    )
    officer = AssistantAgent(AGENTS["underwriter"], llm, tools=[grant, grant_capped, refuse], description="credit")
    team = SelectorGroupChat(
        [clerk, officer],
        llm,
        selector_func=selector,
        termination_condition=selector.termination(),
        allow_repeated_speaker=True,  # the clerk may ask for papers twice
    )
    return selector, team, client, tracer


async def handle(selector: PolicySelector, team: Any, queue: list[dict[str, Any]]) -> None:
    for application in queue:
        DESK.take(application)
        await selector.run(team, "Handle the application", episode_id=application["application_id"])


def by_episode(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["episode_id"], r["step"])):
        out.setdefault(r["episode_id"], []).append(r)
    return out


def expected_ms(row: dict[str, Any]) -> float:
    tool = {action: name for name, action in ACTION_NAMES.items()}[row["action"]]
    return reported_ms(tool, int(row["episode_id"].rsplit("-", 1)[1]), failed=bool(row["error"]))


SCREENER = {"request_documents", "pass_to_underwriting", "reject_application"}


def test_observe_records_the_teams_own_choices_then_one_argument_hands_the_team_to_the_policy(
    bare_world: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    queue = applications(12, seed=30)
    selector, team, client, tracer = plug_in(bare_world, mode="observe")
    with caplog.at_level(logging.WARNING, logger="rlops.integrations.mapping"):
        asyncio.run(handle(selector, team, queue))
    tracer.close()
    assert client.stats()["decisions"] == 0  # the policy was never asked
    client.close()
    rows = landing_rows(bare_world["landing"])
    episodes = by_episode(rows)
    assert set(episodes) == {a["application_id"] for a in queue}
    assert all(r["logp"] == 0.0 and r["fallback"] is False and r["logging_policy"] == "agent_router" for r in rows)
    assert {r["policy_version"] for r in rows} == {"agent_router"} and all(r["test_group"] is None for r in rows)
    assert all(r["role"] == ("screener" if r["action"] in SCREENER else "underwriter") for r in rows)
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)  # the tools' reports, not the wall clock
    for application in queue:
        steps = episodes[application["application_id"]]
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert steps[0]["state.application.stage"] == "intake" and steps[0]["role"] == "screener"
        assert all(r["action_mask"][list(ACTION_NAMES.values()).index(r["action"])] == "1" for r in steps)
        assert application["decision"]["outcome"] != "pending"  # the team ended where the pack does
    failed = [r for r in rows if r["error"]]
    assert failed and all(r["error"] == "core banking timeout" and r["action"].startswith("approve") for r in failed)
    for r in failed:  # the officer booked again, and the retry is the next step
        retry = episodes[r["episode_id"]][r["step"] + 1]
        assert retry["action"] == r["action"] and not retry["error"]
    assert selector.unknown == {"check_sanctions": len(queue)}  # counted, not traced
    assert caplog.text.count("'check_sanctions' is no pack action") == 1
    assert "PolicySelector(action_names=...)" in caplog.text
    res = capture("loan_desk", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] and res["rows_quarantined"] == 0

    # Serve: the same team, the one argument changed; the policy (the rule engine: no champion) selects.
    for f in Path(bare_world["landing"]).rglob("*.jsonl"):
        f.unlink()
    selector, team, client, tracer = plug_in(bare_world, mode="serve")
    served = applications(6, seed=31)
    asyncio.run(handle(selector, team, served))
    tracer.close()
    stats = client.stats()
    client.close()
    rows = landing_rows(bare_world["landing"])
    assert stats["decisions"] == len(rows) and stats["fallbacks"] == {"no_champion": len(rows)}
    assert all(r["policy_version"] == "rules" and r["fallback"] and "logging_policy" not in r for r in rows)
    assert all(r["role"] == ("screener" if r["action"] in SCREENER else "underwriter") for r in rows)
    assert all(r["latency_ms"] == expected_ms(r) for r in rows)  # the served tools' reports, read the same way
    assert not DESK.sanctions_checked  # the policy chooses: the desk's own sanctions check is not made
    for steps in by_episode(rows).values():
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
    res = capture("loan_desk", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"]


def test_a_wrong_mode_or_an_observe_mode_without_what_it_needs_gets_one_clear_error(tmp_path: Path) -> None:
    class NotAsked:
        def decide(self, state: Any, key: Any = None, history: Any = (), **kw: Any) -> Any:
            raise AssertionError("observe mode asked the policy")

    loop = DecisionLoop(NotAsked(), Tracer(tmp_path), scenario="loan_desk", pack_path=PACK)
    with pytest.raises(WiringError, match=r"PolicySelector\(mode='shadow'\): expected one of \['serve', 'observe'\]"):
        PolicySelector(loop, DESK, pack_path=PACK, mode="shadow")
    with pytest.raises(WiringError, match=r"agent_version=''\): expected the name of what chooses"):
        PolicySelector(loop, DESK, pack_path=PACK, mode="observe", agent_version="")

    async def team_selector(messages: Any) -> str | None:
        return None

    with pytest.raises(WiringError, match=r"agent_selector=.*an async one cannot be called"):
        PolicySelector(loop, DESK, pack_path=PACK, mode="observe", agent_selector=team_selector)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\{'grant': 'approve_all'\} map tools to no pack action"):
        PolicySelector(loop, DESK, pack_path=PACK, mode="observe", action_names={"grant": "approve_all"})
    bare = DecisionLoop(NotAsked(), Tracer(tmp_path), scenario="loan_desk")
    with pytest.raises(WiringError, match=r"DecisionLoop\(pack_path=<the pack>\)"):
        PolicySelector(bare, DESK, pack_path=PACK, mode="observe")


def test_the_pages_observe_block_runs(bare_world: dict[str, Any]) -> None:
    """docs/integrations/autogen.md's observe-mode block, over this desk."""
    import ast
    import re

    from rlops.common.config import REPO_ROOT

    page = (REPO_ROOT / "docs" / "integrations" / "autogen.md").read_text()
    blocks = [b for b in re.findall(r"^```python\n(.*?)^```", page, re.S | re.M) if 'mode="observe"' in b]
    assert len(blocks) == 1
    queue = applications(3, seed=32)
    names: dict[str, Any] = {
        **{k: bare_world[k] for k in ("landing", "tracking_uri")},
        "PACK": PACK,
        "DESK": DESK,
        "my_llm": DeskLLM(),
        "CLERK_TOOLS": CLERK_TOOLS,
        "OFFICER_TOOLS": OFFICER_TOOLS,
        "queue": queue,
    }
    code = compile(blocks[0], "<autogen.md, observe block>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    asyncio.run(eval(code, names))  # a block with top-level await evaluates to its coroutine
    names["client"].close()
    rows = landing_rows(bare_world["landing"])
    assert {r["episode_id"] for r in rows} == {a["application_id"] for a in queue}
    assert all(r["logging_policy"] == "agent_router" and r["latency_ms"] == expected_ms(r) for r in rows)
