"""No train/serve skew: a decision served through the integrations' decision loop sees the state the
sandbox trains the policy on. The agent acts in a sandbox world (its tools fail and take the time the
sandbox draws); for every decision, the observation the policy client encoded equals the sandbox's own
observation of that state and the observation the pipeline rebuilds from the decision's trace row,
also right after a tool error and after a long tool latency."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.agent_sdk import Tracer
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.integrations.core import DecisionLoop, ToolCallRecorder
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import load_pack
from rlops.trace_store.states import observations_from_traces
from tests.agent_sdk.client_kit import CREDIT_FIRST, NAME, PACK_DIR, SCENARIO, register, tracker
from tests.policy_kit import preference_policy

#: A profile whose tools fail often and take seconds, so an episode meets both within a few steps.
FLAKY = """\
    flaky:
      description: an unreliable day (the serving-context test)
      latency_jitter_ms: {min: 0, max: 4000}
      error_rates: {fraud_api: 0.5, credit_bureau: 0.5, sms: 0.3}
"""
#: Escalation allowed once the episode took long or its last tool failed: a mask (part of what the
#: policy sees) that reads ``episode.elapsed_ms`` and ``episode.error``.
ESCALATE = "decision.approval_result == 'pending' and (episode.elapsed_ms > 2500 or episode.error)"
SLOW_MS = 2500.0
EPISODE_COLUMNS = ("episode.step", "episode.last_action", "episode.repeat_count", "episode.error")


def flaky_pack(folder: Path) -> Path:
    """The credit pack with the flaky profile and the escalation rule above."""
    pack = folder / SCENARIO
    shutil.copytree(PACK_DIR, pack)
    path = pack / "scenario.yaml"
    text = path.read_text()
    escalate = text.index("- name: escalate_to_human")
    old = "precondition: \"decision.approval_result == 'pending'\""
    at = text.index(old, escalate)
    text = text[:at] + f'precondition: "{ESCALATE}"' + text[at + len(old) :]
    text = text.replace("  profiles:\n", "  profiles:\n" + FLAKY, 1)
    path.write_text(text)
    return pack


def production_state(pack: Any, row: torch.Tensor) -> dict[str, Any]:
    """What the agent's database holds for one sandbox state row: the observed fields, nested, those
    not visible yet left out."""
    scn = pack.scenario
    out: dict[str, Any] = {}
    for f in scn.spec.fields:
        if not f.observed or (f.path in scn.visible and not bool(scn.visible[f.path](row.unsqueeze(0))[0])):
            continue
        v = float(row[scn.columns[f.path]])
        value: Any = f.values[int(v)] if f.type == "enum" else (v > 0.5 if f.type == "bool" else v)
        node = out
        *groups, leaf = f.path.split(".")
        for g in groups:
            node = node.setdefault(g, {})
        node[leaf] = value
    return out


class Served:
    """Records what the client's encoder returned for each decision (the features the policy saw)."""

    def __init__(self, client: PolicyClient) -> None:
        self.encode = client.encoder.encode
        self.calls: list[dict[str, Any]] = []
        client.encoder.encode = self  # type: ignore[method-assign]

    def __call__(self, state: Mapping[str, Any], history: Sequence[str] = (), *args: Any, **kw: Any) -> Any:
        S, mask, obs = self.encode(state, history, *args, **kw)
        self.calls.append({"S": S[0].copy(), "obs": obs[0].copy(), "args": (tuple(history), *args)})
        return S, mask, obs


@pytest.fixture
def flaky_world(tmp_tracking: str, tmp_path: Path) -> dict[str, Any]:
    folder = flaky_pack(tmp_path / "packs")
    pack = load_pack(folder, check_liveness=False)
    version = register(pack, preference_policy(pack, CREDIT_FIRST))
    tracker().set_alias(NAME, "champion", version)
    return {"pack": pack, "folder": folder, "tracking": tmp_tracking, "version": version}


def test_a_served_decision_sees_the_state_the_sandbox_trains_on(flaky_world: dict[str, Any], tmp_path: Path) -> None:
    pack, scn = flaky_world["pack"], flaky_world["pack"].scenario
    names = scn.action_names
    n = 8
    env = BatchedEnv(scn, pack.reward_fn("v1"), num_envs=n, profile="flaky", illegal_action="noop")
    env.reset(11)
    landing = tmp_path / "landing"
    tracer = Tracer(landing)
    client = PolicyClient(
        flaky_world["tracking"],
        SCENARIO,
        flaky_world["folder"],
        refresh_every_s=None,
        exploration=0.0,
        challenger_fraction=0.0,
    )
    served = Served(client)
    loop = DecisionLoop(client, tracer, scenario=SCENARIO, source="live")
    decisions: dict[tuple[str, int], dict[str, Any]] = {}
    live = list(range(n))
    previous: dict[int, tuple[float, bool]] = {}  # the last tool's latency and error, per episode
    for step in range(env.horizon):
        S, obs = env.S.clone(), env.observe().clone()
        actions = torch.zeros(n, dtype=torch.long)
        for i in live:
            d = loop.decide(f"ep-{i}", production_state(pack, S[i]))
            assert d.fallback_reason is None and d.policy_version == f"{NAME}/{flaky_world['version']}"
            latency, error = previous.get(i, (0.0, False))
            decisions[(f"ep-{i}", step)] = {
                **served.calls[-1],
                "sandbox_S": S[i].numpy(),
                "sandbox_obs": obs[i].numpy(),
                "after_latency_ms": latency,
                "after_error": error,
            }
            actions[i] = names.index(d.action)
        _, _, terminated, truncated, info = env.step(actions)
        for i in list(live):
            latency, error = float(info.latency_ms[i]), bool(info.error[i])
            previous[i] = (latency, error)
            loop.outcome(
                f"ep-{i}", error=f"{names[int(actions[i])]}: the API failed" if error else None, latency_ms=latency
            )
            if bool(terminated[i] | truncated[i]):
                loop.end(f"ep-{i}")
                live.remove(i)
        if not live:
            break
    for i in live:
        loop.end(f"ep-{i}")
    tracer.close()
    client.close()

    # what the policy saw is the sandbox's observation of the same state, episode variables included
    col = scn.columns
    for key, d in decisions.items():
        np.testing.assert_array_equal(d["obs"], d["sandbox_obs"], err_msg=str(key))
        for c in EPISODE_COLUMNS:
            assert d["S"][col[c]] == d["sandbox_S"][col[c]], (key, c)
        assert d["S"][col["episode.elapsed_ms"]] == pytest.approx(d["sandbox_S"][col["episode.elapsed_ms"]], rel=1e-6)

    # and what the pipeline rebuilds from each decision's trace row
    rows = [json.loads(line) for f in sorted(landing.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    assert len(rows) == len(decisions)
    df = pd.DataFrame(rows)
    rebuilt, _ = observations_from_traces(pack, df)
    for r, o in zip(rows, rebuilt.numpy()):
        np.testing.assert_array_equal(o, decisions[(r["episode_id"], r["step"])]["obs"], err_msg=str(r["trace_id"]))

    # the cases that matter were met: without the episode's context the policy would have seen otherwise
    error_bit = scn.layout.feature_names.index("episode.error")
    escalate = scn.layout.n_features + names.index("escalate_to_human")
    after_error = [d for d in decisions.values() if d["after_error"]]
    assert after_error and all(d["obs"][error_bit] == 1.0 for d in after_error)
    slow = [
        d
        for d in decisions.values()
        if d["after_latency_ms"] > SLOW_MS and not d["after_error"] and d["obs"][escalate] == 1.0
    ]
    assert slow  # escalation legal only because of the time the tools took
    for d in after_error + slow:  # the state and history alone, as the loop passed them before
        _, _, blind = served.encode(production_state(pack, torch.from_numpy(d["sandbox_S"])), d["args"][0])
        assert not np.array_equal(blind[0], d["obs"])


def test_an_agents_own_tool_calls_are_masked_in_the_episodes_context(tmp_path: Path) -> None:
    """The reverse path: the mask on a traced tool call is the sandbox's after the calls before it."""
    folder = flaky_pack(tmp_path / "packs")
    pack = load_pack(folder, check_liveness=False)
    state = production_state(pack, pack.make_env(1, seed=0).S[0])
    tracer = Tracer(tmp_path / "landing")
    recorder = ToolCallRecorder(tracer, scenario=SCENARIO, pack_path=folder, observer=lambda episode: state)
    recorder.started("e", "call-1", "initiate_fraud_check")
    recorder.finished("call-1", error="ConnectionError: fraud API timeout")
    recorder.started("e", "call-2", "initiate_fraud_check")
    recorder.finished("call-2")
    recorder.end("e")
    tracer.close()
    rows = sorted(
        (json.loads(line) for f in (tmp_path / "landing").rglob("*.jsonl") for line in f.read_text().splitlines()),
        key=lambda r: r["step"],
    )
    escalate = pack.scenario.action_names.index("escalate_to_human")
    assert [r["action_mask"][escalate] for r in rows] == ["0", "1"]  # legal once a tool failed


def test_the_reverse_path_never_labels_an_agents_choices_as_the_rule_engine(tmp_path: Path) -> None:
    """Rows of the agent's own tool choices said ``rules`` — the pack's rule engine, rlops' fallback —
    so capture counted them as fallbacks and off-policy evaluation took them for the rules' choices."""
    from rlops.integrations.mapping import WiringError

    folder = flaky_pack(tmp_path / "packs")
    tracer = Tracer(tmp_path / "landing")
    recorder = ToolCallRecorder(tracer, scenario=SCENARIO, pack_path=folder, observer=lambda episode: {})
    assert recorder.policy_version == "agent_router" and recorder.deterministic
    named = ToolCallRecorder(tracer, scenario=SCENARIO, pack_path=folder, policy_version="support-agent-v3")
    assert not named.deterministic  # an LLM's choice: no propensity is claimed
    for bad in ("rules", " "):
        with pytest.raises(WiringError, match="agent_router"):
            ToolCallRecorder(tracer, scenario=SCENARIO, pack_path=folder, policy_version=bad)
    tracer.close()
