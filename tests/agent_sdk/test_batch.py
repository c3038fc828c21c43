"""Batched decisions through the policy client: the same serving state, greedy choice, exploration
propensities and fallbacks as one request at a time, for episodes stepped in a batch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rlops.agent_sdk.batch import batch_policy, serving_version
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.agent_sdk.serving import choose, choose_batch
from tests.agent_sdk.client_kit import NAME, PACK_DIR, SCENARIO, register_pair, tracker
from tests.agent_sdk.test_policy_client import _state_dict


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


def test_choose_batch_is_choose_row_by_row() -> None:
    rng = np.random.default_rng(0)
    probs = rng.random((500, 6)) * (rng.random((500, 6)) > 0.3)
    probs[:, 2] += 0.01  # one legal action per row
    probs /= probs.sum(1, keepdims=True)
    greedy = probs.argmax(1)
    u = rng.random((500, 2))
    for eps in (0.0, 0.25, 1.0):
        a, p = choose_batch(greedy, probs, eps, u)
        expected = [choose(int(g), pr, eps, (float(x), float(y))) for g, pr, (x, y) in zip(greedy, probs, u)]
        assert a.tolist() == [e[0] for e in expected]
        np.testing.assert_allclose(p, [e[1] for e in expected])
        assert (probs[np.arange(500), a] > 0).all()


def test_batch_decisions_match_single_requests_and_count(tmp_tracking: str, pack: Any) -> None:
    from rlops.sandbox.env import BatchedEnv
    from rlops.sandbox.traces import rollout_traces

    torch.set_num_threads(1)
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, exploration=0.0) as c:
        env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=32, profile="live")
        env.reset(3)
        a, extras = batch_policy(c)(env)  # no champion yet: the rule engine, every row a fallback
        assert extras["fallback"].all() and c.fallbacks["no_champion"] == 32 and c.decisions == 32
        assert all(r.startswith("no_champion: ") for r in extras["fallback_reason"])  # the reason, as decide() gives it
        v1, _ = register_pair(pack)
        tracker().set_alias(NAME, "champion", v1)
        c.refresh()
        serving = c.serving
        assert serving_version(serving, "challenger") == f"{NAME}/{v1}"  # no challenger: the champion serves
        a, extras = batch_policy(c, serving=serving)(env)
        assert not extras["fallback"].any() and (extras["logp"] == 0).all()  # greedy: propensity 1
        assert (extras["fallback_reason"] == None).all()  # noqa: E711 - element-wise over an object array
        single = [c.decide(_state_dict(pack, env.S[i])).action for i in range(32)]
        assert [pack.scenario.action_names[int(x)] for x in a] == single
        assert c.first_served_at(v1) is not None
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, exploration=0.3, seed=1) as c:
        rows = rollout_traces(
            pack,
            batch_policy(c),
            200,
            seed=11,
            profile="live",
            reward_fn="v1",
            policy_version=serving_version(c.serving, "champion"),
            source="live",
        )
        p = np.exp(rows["logp"].to_numpy())
        assert (p <= 1.0).all() and (p > 0).all() and (p < 0.7).any() and (p >= 0.7).mean() > 0.5
        assert c.decisions >= len(rows) and not rows["fallback"].any()  # every row act() decided is counted
        assert rows["fallback_reason"].isna().all()
