"""Observe mode of the LangGraph integration, probed through its Python API: a ``PolicyRouter`` built
with a mode that is no mode, a ``nodes`` mapping naming no pack action, two actions on one node, names
that are no text, an agent router that is no function, an agent version that is blank or claims to
be the rule engine, a ``deterministic`` that is no boolean, a mapping that is no ``StateMapping`` —
each is refused when the router is built, with a :class:`UserError` (a ``ValueError``) naming the
argument and what is expected. Called with a graph state that is no mapping, lacks the episode key or
holds no usable episode id, the router raises a :class:`WiringError` saying so; a state lacking pack
fields is recorded with a warning naming them (the agent keeps running: observe mode never breaks
it). One test per probe."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError

langgraph = pytest.importorskip("langgraph.types")

from rlops.agent_sdk import Tracer  # noqa: E402 - only with LangGraph installed
from rlops.integrations.core import DecisionLoop, StateMapping, observed_fields  # noqa: E402
from rlops.integrations.langgraph import PolicyRouter, WiringError  # noqa: E402

PACK = REPO_ROOT / "scenarios" / "credit_approval"


class NotAsked:
    """A policy observe mode must never ask."""

    def decide(self, state: Any, key: Any = None, history: Any = (), **kw: Any) -> Any:
        raise AssertionError("observe mode asked the policy")


def follow(state: Any) -> str:
    return str(state["next_action"])


@pytest.fixture
def loop(tmp_path: Path) -> DecisionLoop:
    return DecisionLoop(NotAsked(), Tracer(tmp_path), scenario="credit_approval", pack_path=PACK)


@pytest.fixture
def mapping() -> StateMapping:
    return StateMapping.by_leaf_name(observed_fields(PACK))


def router(loop: DecisionLoop, mapping: Any, **kw: Any) -> PolicyRouter:
    args: dict[str, Any] = {"episode_key": "application_id", "mode": "observe", "agent_router": follow, **kw}
    return PolicyRouter(loop, mapping, **args)


BAD_ARGUMENTS: dict[str, tuple[dict[str, Any], str]] = {
    "mode-upper-case": ({"mode": "OBSERVE"}, r"mode='OBSERVE'\): expected one of \['serve', 'observe'\]"),
    "mode-none": ({"mode": None}, r"mode=None\): expected one of"),
    "mode-a-list": ({"mode": ["observe"]}, r"mode=\['observe'\]\): expected one of"),
    "nodes-unknown-action": ({"nodes": {"teleport": "x"}}, r"'teleport' is no pack action; expected keys among"),
    "nodes-two-actions-one-node": (
        {"nodes": {"approve": "decide", "reject": "decide"}},
        r"\['decide'\] would perform more than one pack action \(approve -> decide, reject -> decide\)",
    ),
    "nodes-onto-another-action": ({"nodes": {"approve": "reject"}}, r"\['reject'\] would perform more than one"),
    "nodes-number-key": ({"nodes": {1: "x"}}, r"nodes=\.\.\.\): 1 is no pack action"),
    "nodes-number-name": ({"nodes": {"approve": 5}}, r"'approve' maps to 5; expected a tool node's name"),
    "nodes-blank-name": ({"nodes": {"approve": " "}}, r"'approve' maps to ' '; expected a tool node's name"),
    "nodes-a-list": ({"nodes": ["approve"]}, r"nodes=\['approve'\]\): expected a mapping"),
    "agent-router-a-name": ({"agent_router": "triage"}, r"agent_router='triage'\): expected the agent's routing"),
    "agent-version-blank": ({"agent_version": ""}, r"agent_version=''\): expected the name of the agent's router"),
    "agent-version-number": ({"agent_version": 3}, r"agent_version=3\): expected the name"),
    "agent-version-rules": ({"agent_version": "rules"}, r"other than 'rules' \(the pack's rule engine"),
    "deterministic-text": ({"deterministic": "no"}, r"deterministic='no'\): expected True"),
    "deterministic-number": ({"deterministic": 1}, r"deterministic=1\): expected True"),
    "episode-key-none": ({"episode_key": None}, r"episode_key=None\): expected the graph state key"),
    "episode-key-blank": ({"episode_key": ""}, r"episode_key=''\): expected the graph state key"),
}


@pytest.mark.parametrize("case", list(BAD_ARGUMENTS), ids=list(BAD_ARGUMENTS))
def test_a_bad_argument_is_refused_when_the_router_is_built(case: str, loop: DecisionLoop, mapping: Any) -> None:
    kwargs, message = BAD_ARGUMENTS[case]
    with pytest.raises(ValueError, match=message) as err:
        router(loop, mapping, **kwargs)
    assert isinstance(err.value, UserError)


def test_observe_without_the_agents_router_is_a_wiring_error(loop: DecisionLoop, mapping: Any) -> None:
    with pytest.raises(WiringError, match=r"give agent_router=<the function"):
        router(loop, mapping, agent_router=None)


def test_a_mapping_that_is_no_state_mapping_is_refused(loop: DecisionLoop) -> None:
    with pytest.raises(UserError, match=r"mapping=\{'age': 'age'\}\): expected a StateMapping"):
        router(loop, {"age": "age"})


@pytest.mark.parametrize(
    "fields",
    [{"user_profile.age": 5}, {"user_profile.age": ""}, {3: "age"}, ["user_profile.age"]],
    ids=["key-a-number", "key-blank", "field-a-number", "a-list"],
)
def test_a_state_mapping_of_no_names_is_refused(fields: Any) -> None:
    with pytest.raises(UserError, match=r"StateMapping.*expected \{pack field path: state key\}"):
        StateMapping(fields)


STATES: dict[str, tuple[Any, str]] = {
    "a-list": (["application_id"], r"the graph state has no 'application_id' \(it has list\)"),
    "none": (None, r"the graph state has no 'application_id' \(it has NoneType\)"),
    "no-episode-key": ({"next_action": "approve"}, r"has no 'application_id' \(it has \['next_action'\]\)"),
    "episode-id-none": ({"application_id": None, "next_action": "approve"}, r"'application_id' is None; expected"),
    "episode-id-blank": ({"application_id": "  ", "next_action": "approve"}, r"is '  '; expected the episode's id"),
    "episode-id-a-dict": ({"application_id": {"a": 1}, "next_action": "approve"}, r"is \{'a': 1\}; expected"),
    "episode-id-a-bool": ({"application_id": True, "next_action": "approve"}, r"is True; expected the episode's id"),
}


@pytest.mark.parametrize("case", list(STATES), ids=list(STATES))
def test_a_state_without_a_usable_episode_is_a_wiring_error(case: str, loop: DecisionLoop, mapping: Any) -> None:
    state, message = STATES[case]
    with pytest.raises(WiringError, match=message):
        router(loop, mapping).route(state)
    with pytest.raises(WiringError, match=message):
        router(loop, mapping)(state)  # the node style (a router of its own: one style per router)


def test_the_agents_router_returning_no_name_is_a_wiring_error(loop: DecisionLoop, mapping: Any) -> None:
    r = router(loop, mapping, agent_router=lambda state: 3)
    with pytest.raises(WiringError, match=r"agent_router=\.\.\.\) returned 3; observe mode serves a router"):
        r.route({"application_id": "a1"})


def test_a_state_lacking_pack_fields_is_recorded_with_a_warning_naming_them(
    loop: DecisionLoop, mapping: Any, caplog: pytest.LogCaptureFixture
) -> None:
    r = router(loop, mapping)
    with caplog.at_level(logging.WARNING):
        chosen = r.route({"application_id": "a1", "next_action": "approve"})
    assert chosen == "approve"  # the agent keeps its own choice
    assert "user_profile.age" in caplog.text and "state lacks field(s)" in caplog.text


def test_a_node_that_is_no_pack_action_is_counted_and_named_once(
    loop: DecisionLoop, mapping: Any, caplog: pytest.LogCaptureFixture
) -> None:
    r = router(loop, mapping, agent_router=lambda state: "web_search")
    with caplog.at_level(logging.WARNING, logger="rlops.integrations.mapping"):
        for i in range(3):
            assert r.route({"application_id": f"a{i}"}) == "web_search"
    assert r.unknown == {"web_search": 3}
    assert caplog.text.count("'web_search' is no pack action") == 1
