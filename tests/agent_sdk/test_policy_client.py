"""Policy client: serves the champion, splits a challenger share by hashed keys, encodes production
states exactly like the sandbox, and falls back to the rule engine on any error or timeout."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from typing import Any

import numpy as np
import pytest
import torch

from rlops.agent_sdk.policy_client import (
    ObservationEncoder,
    PolicyClient,
    StateError,
    hash_fraction,
)
from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, STATE, register_pair


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


@pytest.fixture
def versions(tmp_tracking: str, pack: Any) -> tuple[str, str]:
    """v1 = champion (prefers the credit report first), v2 = challenger (fraud check first)."""
    ctx = StepContext.create(run_key="20260105T1000")
    v1, v2 = register_pair(pack)
    ctx.tracker.set_alias(NAME, "champion", v1)
    ctx.tracker.set_alias(NAME, "challenger", v2)
    ctx.tracker.set_model_version_tags(NAME, v2, {"traffic_fraction": 0.2})
    return v1, v2


# --------------------------------------------------------------------------- encoding
def _state_dict(pack: Any, S: torch.Tensor) -> dict[str, Any]:
    """A production-style nested state from one sandbox state row (hidden fields left out)."""
    scn = pack.scenario
    out: dict[str, Any] = {}
    for f in scn.spec.fields:
        if not f.observed:
            continue
        v = float(S[scn.columns[f.path]])
        if f.path in scn.visible and not bool(scn.visible[f.path](S.unsqueeze(0))[0]):
            value: Any = None
        elif f.type == "enum":
            value = f.values[int(v)]
        elif f.type == "bool":
            value = v > 0.5
        else:
            value = v
        node = out
        *parents, leaf = f.path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def test_encoder_matches_the_sandbox_observation(pack: Any) -> None:
    from rlops.sandbox.env import BatchedEnv
    from rlops.sandbox.policies import rule_policy

    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=64, profile="live")
    env.reset(5)
    enc = ObservationEncoder(pack)
    names = pack.scenario.action_names
    history: list[list[str]] = [[] for _ in range(64)]
    for _ in range(4):
        obs, masks = env.observe(), env.action_masks()
        for i in range(0, 64, 7):
            if bool(env.S[i, pack.scenario.columns["episode.step"]] == 0):
                history[i] = []
            S, mask, o = enc.encode(
                _state_dict(pack, env.S[i]),
                history[i],
                last_error=bool(env.S[i, pack.scenario.columns["episode.error"]]),
            )
            assert np.array_equal(mask[0], masks[i].numpy())
            np.testing.assert_array_equal(o[0], obs[i].numpy())
        a = rule_policy(env)
        assert enc.rule_action(env.S[:1].numpy(), masks[:1].numpy()) == int(a[0])
        for i in range(64):
            history[i].append(names[int(a[i])])
        env.step(a)
    with pytest.raises(StateError, match="user_profile.age"):
        enc.encode({"user_profile": {"income_monthly": 9000.0}})
    with pytest.raises(StateError, match="not one of"):
        enc.encode({**STATE, "application": {**STATE["application"], "purpose": "boat"}})


def test_hash_split_is_stable_and_matches_the_fraction() -> None:
    u = np.array([hash_fraction(f"user-{i}", SCENARIO) for i in range(20000)])
    assert u.min() >= 0 and u.max() < 1 and abs((u < 0.2).mean() - 0.2) < 0.01
    assert hash_fraction("user-1", SCENARIO) == hash_fraction("user-1", SCENARIO)


# --------------------------------------------------------------------------- serving
def test_champion_and_challenger_split(versions: tuple[str, str], tmp_tracking: str) -> None:
    v1, v2 = versions
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=2000, exploration=0.0) as client:
        assert client.refresh() == {"champion": v1, "challenger": v2}
        assert client.challenger_fraction == pytest.approx(0.2)
        keys = [f"user-{i}" for i in range(4000)]
        groups = [client.route(k) for k in keys]
        share = groups.count("challenger") / len(keys)
        assert abs(share - 0.2) < 0.03 and [client.route(k) for k in keys[:50]] == groups[:50]
        ch_key = keys[groups.index("challenger")]
        champ_key = keys[groups.index("champion")]
        d = client.decide(STATE, key=champ_key)
        assert not d.fallback and d.policy_version == f"{NAME}/{v1}" and d.test_group == "champion"
        assert d.action == "fetch_credit_report" and abs(sum(d.probs.values()) - 1) < 1e-5
        assert d.propensity == 1.0 and d.logp == 0.0 and d.fallback_reason is None  # greedy serving
        d = client.decide(STATE, key=ch_key)
        assert not d.fallback and d.policy_version == f"{NAME}/{v2}" and d.test_group == "challenger"
        assert d.action == "initiate_fraud_check"
        assert client.decide(STATE).test_group == "champion"  # no key: champion
        fields = d.trace_fields()
        assert fields["fallback"] is False and len(fields["action_mask"]) == 7 and fields["logp"] == 0.0
        assert fields["policy_version"] == f"{NAME}/{v2}" and fields["test_group"] == "challenger"
        assert client.fallback_count == 0
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, challenger_fraction=0.0, exploration=0.0) as client:
        assert {client.route(f"user-{i}") for i in range(500)} == {"champion"}


def test_every_server_explores_by_default_with_the_true_propensity(
    versions: tuple[str, str], tmp_tracking: str
) -> None:
    """Champion and rule engine alike: a share of decisions drawn from the exploration distribution,
    each decision's propensity the probability of its action under that whole rule, the mask never
    violated, and a segment that never explores."""
    from rlops.agent_sdk.serving import DEFAULT_EXPLORATION

    v1, _ = versions
    n = 1500
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, challenger_fraction=0.0, timeout_ms=5000, seed=3) as client:
        assert client.exploration == DEFAULT_EXPLORATION == 0.05 and client.exploration_distribution == "policy"
        decisions = [client.decide(STATE, key=f"u{i}") for i in range(n)]
    assert {d.policy_version for d in decisions} == {f"{NAME}/{v1}"}
    greedy = max(decisions[0].probs, key=decisions[0].probs.get)
    explored = [d for d in decisions if d.explored]
    assert all(d.action != greedy for d in explored) and all(d.action == greedy for d in decisions if not d.explored)
    assert 0 < len(explored) < 0.05 * n * 2  # about ε·(1 − π(greedy)) of them
    for d in decisions:  # (1 − ε)·[a = greedy] + ε·π(a)
        expected = (0.95 if d.action == greedy else 0.0) + 0.05 * d.probs[d.action]
        assert d.propensity == pytest.approx(expected, rel=1e-5) and d.trace_fields()["explored"] == d.explored
        assert d.mask[client.encoder.action_names.index(d.action)]

    # the rule engine, before a champion exists: uniform exploration over the legal actions
    with PolicyClient(tmp_tracking, "credit_approval", PACK_DIR, model_name="nobody-policy", seed=4) as rules:
        answers = [rules.decide(STATE) for _ in range(n)]
    legal = sum(answers[0].mask)
    rule = max({a.action for a in answers}, key=[a.action for a in answers].count)
    assert all(a.fallback and a.policy_version == "rules" for a in answers)
    for a in answers:
        expected = (0.95 if a.action == rule else 0.0) + 0.05 / legal
        assert a.propensity == pytest.approx(expected) and a.explored == (a.action != rule)
        assert a.mask[rules.encoder.action_names.index(a.action)]
    assert 0 < sum(a.explored for a in answers) < 0.1 * n

    # a segment that never explores
    with PolicyClient(
        tmp_tracking,
        SCENARIO,
        PACK_DIR,
        challenger_fraction=0.0,
        timeout_ms=5000,
        no_exploration_segment="user_profile.age >= 18",
        seed=3,
    ) as client:
        assert not any(client.decide(STATE).explored for _ in range(300))


def test_error_and_timeout_fall_back_to_the_rule_engine(
    versions: tuple[str, str], tmp_tracking: str, pack: Any
) -> None:
    rule = ObservationEncoder(pack)
    S, mask, _ = rule.encode(STATE)
    rule_action = pack.scenario.action_names[rule.rule_action(S, mask)]
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, challenger_fraction=0.0, timeout_ms=30, exploration=0.0
    ) as client:
        model = client.policies["champion"].model

        def slow(obs: np.ndarray) -> Any:
            time.sleep(0.5)
            raise AssertionError("never returned in time")

        model.predict_obs = slow
        d = client.decide(STATE, key="u1")
        assert d.fallback and d.policy_version == "rules" and d.action == rule_action and "took over" in d.reason
        assert d.test_group == "fallback" and d.routed_group == "champion" and d.propensity == 1.0
        assert d.fallback_reason.startswith("timeout: ")
        assert d.trace_fields()["fallback"] is True and d.trace_fields()["fallback_reason"] == d.fallback_reason

        def broken(obs: np.ndarray) -> Any:
            raise RuntimeError("CUDA error")

        model.predict_obs = broken
        client.timeout_s = 10.0  # an error, not a timeout, even on a busy machine
        d = client.decide(STATE, key="u1")
        assert d.fallback and "CUDA error" in d.reason and d.action == rule_action
        assert client.fallbacks["timeout"] == 1 and client.fallbacks["error"] == 1 and client.fallback_count == 2

        # Once the client has read a state, an unreadable one never reaches the policy and never
        # raises: the rule engine decides on what can be read, and the decision says why.
        model.predict_obs = broken
        bad = {**STATE, "application": {**STATE["application"], "purpose": "boat"}}
        for state, history in ((bad, ["no_such_action"]), ("not a mapping", []), ({}, [42])):
            d = client.decide(state, key="u1", history=history)  # type: ignore[arg-type]
            assert d.fallback and d.policy_version == "rules" and d.reason.startswith("bad_state: unreadable state")
            assert d.action in pack.scenario.action_names and d.trace_fields()["fallback"] is True
        assert client.fallbacks["bad_state"] == 3 and client.fallback_count == 5


def test_no_policy_or_no_mlflow_means_rules(tmp_tracking: str) -> None:
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR) as client:  # empty registry
        d = client.decide(STATE, key="u")
        assert d.fallback and d.policy_version == "rules" and client.fallbacks["no_champion"] == 1
        assert d.fallback_reason == f"no_champion: {NAME} has no champion alias yet"
    with socket_closed_port() as port:
        client = PolicyClient(f"http://127.0.0.1:{port}", SCENARIO, PACK_DIR, http_max_retries=0)
        assert "champion" in client.load_errors
        d = client.decide(STATE)
        assert d.fallback and "no champion policy loaded" in d.reason and d.reason.startswith("load_error: ")
        client.close()


class socket_closed_port:
    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        return None


def test_agent_sdk_never_imports_pipeline_steps(versions: tuple[str, str], tmp_tracking: str) -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from rlops.agent_sdk.policy_client import PolicyClient
        c = PolicyClient({tmp_tracking!r}, {SCENARIO!r}, {str(PACK_DIR)!r})
        d = c.decide({STATE!r}, key="x")
        assert not d.fallback, d.reason
        bad = sorted(m for m in sys.modules if m.startswith(("rlops.pipeline_steps", "pipeline_steps")))
        assert not bad, bad
        print("ok", d.policy_version)
    """)
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().startswith("ok")
