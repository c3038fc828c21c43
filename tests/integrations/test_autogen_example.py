"""The AutoGen loan-desk example, offline: the policy of the multi-role pack selects the speaker (the role
of its action) and the tool; rows carry the role and the desk's margin as the reward hook's component;
every decision lands (rows in = accepted + quarantined); the adapter is at most 20 lines."""

from __future__ import annotations

import asyncio
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

EXAMPLE = example("autogen") / "loan_desk_team.py"
SCREENER = {"request_documents", "pass_to_underwriting", "reject_application"}


@pytest.fixture(scope="module")
def team() -> ModuleType:
    return load_example(EXAMPLE)


def test_the_adapter_is_at_most_20_lines() -> None:
    assert adapter_lines(EXAMPLE) <= 20


def check_rows(rows: list[dict[str, Any]], n: int) -> None:
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: (r["episode_id"], r["step"])):
        by_episode.setdefault(r["episode_id"], []).append(r)
    assert len(by_episode) == n
    for steps in by_episode.values():
        assert [r["done"] for r in steps] == [False] * (len(steps) - 1) + [True]
        assert all(r["role"] == ("screener" if r["action"] in SCREENER else "underwriter") for r in steps)
        assert steps[0]["role"] == "screener" and steps[-1]["role"] in ("screener", "underwriter")
        margin = [c["score"] for r in steps for c in r["reward_breakdown"] if c["component"] == "hook:desk_margin"]
        last = steps[-1]
        assert len(margin) == len(steps) and all(m == 0.0 for m in margin[:-1])
        assert (margin[-1] > 0) == last["action"].startswith("approve")  # booked at approval only
        assert "reward_total" not in last  # the pack's team reward is computed from the rows, not replaced


@pytest.mark.slow  # a run and a capture: the LangGraph example keeps this path in the default suite
def test_the_rule_engine_runs_the_desk_before_a_promotion(team: ModuleType, bare_world: dict[str, Any]) -> None:
    out = asyncio.run(team.run_team(team.applications(4, seed=7), bare_world["landing"], bare_world["tracking_uri"]))
    rows = landing_rows(bare_world["landing"])
    assert out["fallbacks"] == {"no_champion": len(rows)}
    assert_rule_engine_propensities(rows)
    check_rows(rows, 4)
    res = capture("loan_desk", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_quarantined"] == 0


@pytest.mark.slow  # trains the champion (PPO, a tiny budget) once per session
def test_the_champion_selects_speakers_and_tools(team: ModuleType, world: dict[str, Any]) -> None:
    out = asyncio.run(team.run_team(team.applications(8, seed=8), world["landing"], world["tracking_uri"]))
    rows = landing_rows(world["landing"])
    assert out["fallbacks"] == {} and out["decisions"] == len(rows)
    assert {r["policy_version"] for r in rows} == {"loan_desk-policy/1"} and all(r["logp"] <= 0 for r in rows)
    check_rows(rows, 8)
    res = capture("loan_desk", rows)
    assert res["rows_in"] == len(rows) == res["rows_accepted"] + res["rows_quarantined"]
