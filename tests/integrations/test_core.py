"""The framework-free part of the integrations on tiny hand-checkable cases: the state mapping, the
decision loop's steps (outcome, an outcome never reported, the end with the final state), a decision
the agent has no tool for, a missing framework named with its extra, and a core that imports none."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from rlops.agent_sdk import Tracer
from rlops.agent_sdk.serving import Decision
from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.integrations import MissingExtraError, require
from rlops.integrations.core import ActionNames, DecisionLoop, StateMapping, ToolOutcome, observed_fields
from rlops.integrations.mapping import OutcomeReader, error_text


class Scripted:
    """A policy answering a fixed sequence of actions, propensity 0.5 each."""

    def __init__(self, actions: Sequence[str]) -> None:
        self.actions = list(actions)
        self.seen: list[tuple[Mapping[str, Any], str | None, tuple[str, ...]]] = []

    def decide(self, state: Mapping[str, Any], key: str | None = None, history: Sequence[str] = ()) -> Decision:
        self.seen.append((state, key, tuple(history)))
        a = self.actions[len(history)]
        return Decision(a, 0, [True, True], None, 0.5, None, None, "s-policy/3", "champion")


class Score:
    component = "csat"

    def reward(self, state: Any, action: str, next_state: Any, episode: Any = None) -> float:
        return float(next_state["n"]) if next_state else -1.0


def rows(folder: Path) -> list[dict[str, Any]]:
    recs = [json.loads(line) for f in sorted(folder.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    return sorted(recs, key=lambda r: r["step"])


def test_state_mapping_reads_nested_keys_and_attributes() -> None:
    class Ctx:
        bureau = {"score": 700}
        amount = None

    m = StateMapping({"user.credit_score": "bureau.score", "app.amount": "amount", "app.term": "term"})
    assert m.read(Ctx()) == {"user": {"credit_score": 700}}  # missing and None keys left out
    by_leaf = StateMapping.by_leaf_name(["user.age", "app.amount"], amount="loan")
    assert by_leaf.fields == {"user.age": "age", "app.amount": "loan"}
    with pytest.raises(UserError, match="share the last name"):
        StateMapping.by_leaf_name(["a.x", "b.x"])
    with pytest.raises(UserError, match="not field names"):
        StateMapping.by_leaf_name(["a.x"], y="z")


def test_the_loop_records_each_step_with_its_outcome(tmp_path: Path) -> None:
    policy = Scripted(["check", "approve"])
    tracer = Tracer(tmp_path)
    loop = DecisionLoop(policy, tracer, scenario="s", reward_provider=Score(), actions=["check", "approve"])
    assert loop.decide("ep-1", {"n": 1}).action == "check"
    loop.outcome("ep-1", error="bureau down", latency_ms=12.0)
    assert loop.decide("ep-1", {"n": 2}).action == "approve"
    loop.annotate("ep-1", role="underwriter")
    loop.end("ep-1", final_state={"n": 3})
    tracer.close()
    first, second = rows(tmp_path)
    assert policy.seen[1] == ({"n": 2}, "ep-1", ("check",))  # the episode id routes, the history grows
    assert (first["episode_id"], first["trace_id"], first["step"]) == ("ep-1", "ep-1", 0)
    assert (first["error"], first["latency_ms"], first["done"]) == ("bureau down", 12.0, False)
    assert first["logp"] == pytest.approx(-0.6931, abs=1e-4) and first["policy_version"] == "s-policy/3"
    assert first["reward_breakdown"][0]["score"] == 2.0  # scored on the next state
    assert second["done"] and second["role"] == "underwriter" and second["error"] is None
    assert second["reward_breakdown"][0]["score"] == 3.0  # scored on the final state
    assert len(loop.decision_ms) == 2 and loop.open_episodes == []


def test_an_outcome_never_reported_is_recorded_at_the_next_decision(tmp_path: Path) -> None:
    tracer = Tracer(tmp_path)
    loop = DecisionLoop(Scripted(["a", "b"]), tracer, scenario="s")
    loop.decide("e", {"n": 1})
    loop.decide("e", {"n": 2})
    loop.end("e", error="RuntimeError: boom")
    tracer.close()
    first, second = rows(tmp_path)
    assert first["latency_ms"] >= 0 and first["error"] is None
    assert second["truncated"] and second["error"] == "RuntimeError: boom"


def test_a_decision_the_agent_has_no_tool_for_is_refused(tmp_path: Path) -> None:
    loop = DecisionLoop(Scripted(["escalate"]), Tracer(tmp_path), scenario="s", actions=["check"])
    with pytest.raises(UserError, match="no tool for it"):
        loop.decide("e", {"n": 1})


def test_a_missing_framework_names_its_extra() -> None:
    with pytest.raises(MissingExtraError, match=r"pip install 'rlops\[autogen\]'") as err:
        require("autogen_not_installed_here", "autogen", "AutoGen")
    assert isinstance(err.value, ImportError) and isinstance(err.value, UserError)


def test_the_core_imports_no_framework() -> None:
    code = (
        "import sys, rlops.integrations.core, rlops.integrations.langgraph, rlops.integrations.openai_agents, "
        "rlops.integrations.autogen, rlops.pipeline_steps.capture.trace_sources; "
        "print(sorted(m for m in ('langgraph', 'langchain_core', 'agents', 'autogen_agentchat', 'opentelemetry.sdk') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class Recording:
    """A policy taking the episode's context as PolicyClient does; answers "a", then "b", ..."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def decide(
        self,
        state: Mapping[str, Any],
        key: str | None = None,
        history: Sequence[str] = (),
        step: int | None = None,
        elapsed_ms: float = 0.0,
        last_error: bool = False,
    ) -> Decision:
        self.seen.append({"history": tuple(history), "step": step, "elapsed_ms": elapsed_ms, "last_error": last_error})
        return Decision("abc"[len(history)], 0, [True, True, True], None, 1.0, None, None, "s-policy/1", "champion")


def test_each_decision_gets_the_episodes_context(tmp_path: Path) -> None:
    """The step, the tools' summed latency and whether the last tool failed: what the sandbox trains on."""
    policy = Recording()
    loop = DecisionLoop(policy, Tracer(tmp_path), scenario="s")
    loop.decide("e", {"n": 1})
    loop.outcome("e", error="bureau down", latency_ms=1200.0)
    loop.decide("e", {"n": 2})
    assert loop.context("e").step == 2 and not loop.context("e").last_error  # the pending one as it would land
    loop.decide("e", {"n": 3})  # the second outcome never reported: it took the time between the decisions
    first, second, third = policy.seen
    assert first == {"history": (), "step": 0, "elapsed_ms": 0.0, "last_error": False}
    assert second == {"history": ("a",), "step": 1, "elapsed_ms": 1200.0, "last_error": True}
    assert third["history"] == ("a", "b") and third["step"] == 2 and not third["last_error"]
    assert third["elapsed_ms"] >= 1200.0
    loop.end("e")
    assert loop.context("e").step == 0  # an episode that ended starts again from nothing


def test_a_policy_without_the_context_is_still_asked_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = Scripted(["check"])
    with caplog.at_level("WARNING", logger="rlops.integrations.core"):
        loop = DecisionLoop(policy, Tracer(tmp_path), scenario="s")
    assert "takes no step/elapsed_ms/last_error" in caplog.text
    assert loop.decide("e", {"n": 1}).action == "check" and policy.seen == [({"n": 1}, "e", ())]


def test_the_outcome_hook_reads_latency_and_error_from_the_tools_result(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tracer = Tracer(tmp_path)
    loop = DecisionLoop(
        Scripted(["a", "b", "a", "b"]), tracer, scenario="s", outcome=ToolOutcome("meta.ms", "meta.error")
    )
    loop.decide("e", {"n": 1})
    loop.outcome("e", result={"meta": {"ms": 812, "error": {"code": 503}}})  # dotted keys, a structured error
    loop.decide("e", {"n": 2})
    loop.outcome("e", error="ConnectionError: down", result={"meta": {"ms": 40.5, "error": "ignored"}})
    loop.decide("e", {"n": 3})
    with caplog.at_level("WARNING", logger="rlops.integrations.mapping"):
        loop.outcome("e", result={"meta": {"ms": -3, "error": False}})  # no latency: the wall clock stands
        loop.decide("e", {"n": 4})
        loop.outcome("e", result={"meta": {"ms": float("nan")}})
    loop.end("e")
    tracer.close()
    first, second, third, fourth = rows(tmp_path)
    assert (first["latency_ms"], first["error"]) == (812.0, '{"code": 503}')
    assert (second["latency_ms"], second["error"]) == (40.5, "ConnectionError: down")  # the exception wins
    assert 0 <= third["latency_ms"] < 1000 and third["error"] is None and fourth["error"] is None
    assert caplog.text.count("read the latency") == 1  # said once, not per call


def test_a_broken_outcome_hook_never_breaks_the_agent(caplog: pytest.LogCaptureFixture) -> None:
    def broken(result: Any) -> tuple[Any, Any]:
        raise KeyError("latency")

    read = OutcomeReader(broken, "DecisionLoop")
    with caplog.at_level("WARNING", logger="rlops.integrations.mapping"):
        assert read({}) == (None, None) and read({}) == (None, None)
    assert caplog.text.count("outcome hook raised KeyError") == 1
    assert [error_text(v) for v in (None, False, "", "none", True, "boom", 3)] == [None] * 4 + ["error", "boom", "3"]


def test_tool_names_map_to_pack_actions_and_an_unmapped_one_is_named_once(caplog: pytest.LogCaptureFixture) -> None:
    names = ActionNames(["check", "approve"], {"fraud_api": "check", "web": None}, where="R(names=...)", hint="{name}")
    with caplog.at_level("WARNING", logger="rlops.integrations.mapping"):
        got = [names.action(n) for n in ("fraud_api", "approve", "web", "kyc", "kyc", "crm")]
    assert got == ["check", "approve", None, None, None, None]
    assert names.unknown == {"kyc": 2, "crm": 1}
    assert caplog.text.count("'kyc' is no pack action") == 1 and "unmapped so far: ['crm', 'kyc']" in caplog.text
    with pytest.raises(UserError, match=r"R\(names=...\): \{'x': 'nope'\} map tools to no pack action"):
        ActionNames(["check"], {"x": "nope"}, where="R(names=...)", hint="")


def test_an_observed_decision_is_recorded_as_the_agents_router_chose_it(tmp_path: Path) -> None:
    pack = REPO_ROOT / "scenarios" / "credit_approval"
    tracer = Tracer(tmp_path)
    loop = DecisionLoop(Scripted([]), tracer, scenario="credit_approval", pack_path=pack)
    flat = {"age": 30, "income_monthly": 9e3, "employment": "salaried", "region": "other", "loan_amount": 5e4}
    flat |= {"purpose": "car", "term_months": 12, "fraud_check_done": False, "credit_report_fetched": False}
    state = StateMapping.by_leaf_name(observed_fields(pack)).read(
        flat | {"approval_result": "pending", "approved_amount": 0.0, "notified": False}
    )
    loop.observed("e", state, "initiate_fraud_check")
    loop.outcome("e", latency_ms=7.0)
    checked = {**state, "system_status": {**state["system_status"], "fraud_check_done": True, "fraud_flag": False}}
    loop.observed("e", checked, "fetch_credit_report", policy_version="support-llm", deterministic=False)
    loop.end("e")
    tracer.close()
    first, second = rows(tmp_path)
    assert (first["action"], first["logp"], first["policy_version"], first["latency_ms"]) == (
        "initiate_fraud_check", 0.0, "rules", 7.0
    )  # fmt: skip
    assert first["logging_policy"] == "agent_router" and first["fallback"] is False and first["test_group"] is None
    assert second["policy_version"] == "support-llm" and second["logp"] is None  # an LLM's propensity is unknown
    assert first["action_mask"] == "1100010" and second["action_mask"] == "0100010"  # the pack's, state by state
    with pytest.raises(UserError, match="'wire_money' is no pack action"):
        loop.observed("e", state, "wire_money")
