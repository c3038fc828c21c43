"""The OpenAI Agents SDK example, offline: the policy chooses each tool (rules before a promotion, the
trained champion after), the model answers once no action is legal, every decision lands (rows in =
accepted + quarantined), the adapter is at most 20 lines. The reverse path: the SDK's function spans
of an unchanged agent become trace rows, a failing tool's error included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.integrations.conftest import (
    adapter_lines,
    assert_rule_engine_propensities,
    capture,
    example,
    landing_rows,
    load_example,
)

EXAMPLE = example("openai_agents") / "credit_agent.py"


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return load_example(EXAMPLE)


def test_the_adapter_is_at_most_20_lines() -> None:
    assert adapter_lines(EXAMPLE) <= 20


def episodes(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["episode_id"], r["step"])):
        out.setdefault(r["episode_id"], []).append(r)
    return out


@pytest.mark.slow  # a run and a capture: the LangGraph example keeps this path in the default suite
def test_the_rule_engine_chooses_the_tools_before_a_promotion(agent: ModuleType, bare_world: dict[str, Any]) -> None:
    out = asyncio.run(agent.run_agent(agent.applications(3, seed=4), bare_world["landing"], bare_world["tracking_uri"]))
    rows = landing_rows(bare_world["landing"])
    assert out["fallbacks"] == {"no_champion": len(rows)} and len(out["decision_ms"]) == len(rows)
    assert_rule_engine_propensities(rows)
    for steps in episodes(rows).values():
        if not any(r["explored"] for r in steps[:2]):  # the rule engine's own order
            assert [r["action"] for r in steps[:2]] == ["initiate_fraud_check", "fetch_credit_report"]
        assert steps[-1]["done"]
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_quarantined"] == 0


@pytest.mark.slow  # trains the champion (PPO, a tiny budget) once per session
def test_the_champion_chooses_the_tools(agent: ModuleType, world: dict[str, Any]) -> None:
    out = asyncio.run(agent.run_agent(agent.applications(8, seed=5), world["landing"], world["tracking_uri"]))
    rows = landing_rows(world["landing"])
    assert out["fallbacks"] == {} and out["decisions"] == len(rows)
    assert {r["test_group"] for r in rows} == {"champion"} and all(r["logp"] <= 0.0 for r in rows)
    assert all(steps[-1]["done"] for steps in episodes(rows).values())
    res = capture("credit_approval", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] + res["rows_quarantined"]


def test_function_spans_of_an_unchanged_agent_become_rows(agent: ModuleType, tmp_path: Path) -> None:
    from agents import Agent, RunConfig, Runner, function_tool, set_trace_processors

    from rlops.agent_sdk import Tracer
    from rlops.integrations.core import ToolCallRecorder, observed_fields
    from rlops.integrations.openai_agents import StateMapping, ToolSpanProcessor

    @function_tool(name_override="fetch_credit_report")
    def bureau_down() -> str:
        """The bureau times out."""
        raise ConnectionError("credit bureau timeout")

    class Fixed(agent.ScriptedModel):  # the agent's own order: fraud check, the bureau, then answer
        calls = 0

        async def get_response(
            self, system_instructions: Any, input: Any, model_settings: Any, tools: Any, *a: Any, **kw: Any
        ) -> Any:
            order = ["initiate_fraud_check", "fetch_credit_report"]
            Fixed.calls += 1
            offered = [t for t in tools if t.name == order[Fixed.calls - 1]] if Fixed.calls <= 2 else []
            return await super().get_response(system_instructions, input, model_settings, offered, *a, **kw)

    app = agent.applications(1, seed=6)[0]
    mapping = StateMapping.by_leaf_name(observed_fields(agent.PACK))
    tracer = Tracer(tmp_path)
    recorder = ToolCallRecorder(
        tracer, scenario="credit_approval", pack_path=agent.PACK, observer=lambda _: mapping.read(app)
    )
    set_trace_processors([ToolSpanProcessor(recorder)])
    unchanged = Agent(name="desk", tools=[agent.initiate_fraud_check, bureau_down], model=Fixed())
    asyncio.run(Runner.run(unchanged, "go", context=app, run_config=RunConfig(group_id=app["application_id"])))
    set_trace_processors([])
    tracer.close()
    rows = sorted(landing_rows(str(tmp_path)), key=lambda r: r["step"])
    assert [(r["action"], r["done"]) for r in rows] == [("initiate_fraud_check", False), ("fetch_credit_report", True)]
    assert rows[0]["episode_id"] == app["application_id"] and rows[0]["action_mask"] == "1100010"
    assert rows[0]["error"] is None and rows[1]["error"]  # the span's error (the SDK may redact its details)
