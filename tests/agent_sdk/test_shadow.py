"""Shadow mode and propensities: a candidate decides on live requests without serving them, its
decisions land on the served rows, and every served action carries the probability it was served
with, so a candidate's value can be estimated off-policy from the logged rows."""

from __future__ import annotations

import json
import math
import sys
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
import torch

from rlops.agent_sdk import Episode, Tracer
from rlops.agent_sdk.policy_client import PolicyClient
from rlops.agent_sdk.serving import choose
from rlops.common.errors import UserError
from rlops.pipeline_steps.infra.context import StepContext
from tests.agent_sdk.client_kit import (
    NAME,
    PACK_DIR,
    SCENARIO,
    STATE,
    register_pair,
    tracker,
)


@pytest.fixture(scope="module")
def pack() -> Any:
    from rlops.sandbox.pack import load_pack

    return load_pack(PACK_DIR, check_liveness=False)


@pytest.fixture
def pair(tmp_tracking: str, tmp_storage_root: str, pack: Any) -> tuple[str, str]:
    """champion v1 (credit report first); challenger v2 (fraud check first) with no traffic."""
    torch.set_num_threads(1)
    v1, v2 = register_pair(pack)
    t = tracker()
    t.set_alias(NAME, "champion", v1)
    t.set_alias(NAME, "challenger", v2)
    return v1, v2


def test_shadow_decides_beside_the_served_policy_and_is_never_served(pair: tuple[str, str], tmp_tracking: str) -> None:
    v1, v2 = pair
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, shadow="challenger"
    ) as c:
        assert c.refresh() == {"champion": v1, "challenger": v2, "shadow": v2}
        for i in range(20):
            d = c.decide(STATE, key=f"user-{i}")
            assert d.policy_version == f"{NAME}/{v1}" and d.action == "fetch_credit_report"  # served: champion
            s = d.shadow
            assert s is not None and s.policy_version == f"{NAME}/{v2}" and s.action == "initiate_fraud_check"
            assert s.agrees is False and s.error is None and s.test_group == "shadow"
            assert s.served_logp == pytest.approx(math.log(s.probs["fetch_credit_report"]))
            assert s.logp == pytest.approx(math.log(s.probs["initiate_fraud_check"]))
        assert c.shadow_agreement == 0.0 and c.stats()["shadow_decisions"] == 20
        f = d.trace_fields()
        assert f["shadow_policy_version"] == f"{NAME}/{v2}" and f["shadow_action"] == "initiate_fraud_check"
        assert json.loads(f["shadow_probs"]) == pytest.approx(s.probs)
        assert f["shadow_served_logp"] == s.served_logp

        # A shadow that fails never touches what is served.
        def broken(obs: Any) -> Any:
            raise RuntimeError("shadow crashed")

        c.serving.shadow.model.predict_obs = broken
        d = c.decide(STATE, key="x")
        assert not d.fallback and d.action == "fetch_credit_report" and "shadow crashed" in d.shadow.error
        assert c.shadow_errors == 1 and c.shadow_agreement == 0.0
    # The champion's own version as the shadow agrees everywhere; a version that does not exist: no shadow.
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, shadow=f"{NAME}/{v1}"
    ) as c:
        assert all(c.decide(STATE, key=f"u{i}").shadow.agrees for i in range(5)) and c.shadow_agreement == 1.0
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, shadow="99") as c:
        assert c.decide(STATE).shadow is None and c.refresh()["shadow"] is None
    with pytest.raises(UserError, match="shadow"):
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, shadow="rules")
    with pytest.raises(UserError, match="policy 'nonsense!'"):
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, shadow="nonsense!")


def test_propensity_is_the_probability_the_action_was_served() -> None:
    probs = np.array([0.0, 0.6, 0.3, 0.1])
    assert choose(1, probs, 0.0, (0.0, 0.99)) == (1, 1.0)  # greedy: always served, propensity 1
    eps = 0.4
    rng = np.random.default_rng(3)
    draws = [choose(1, probs, eps, (float(u), float(v))) for u, v in rng.random((20000, 2))]
    counts = np.bincount([a for a, _ in draws], minlength=4) / len(draws)
    expected = (1 - eps) * np.eye(4)[1] + eps * probs
    np.testing.assert_allclose(counts, expected, atol=0.015)
    for a, p in draws[:200]:
        assert p == pytest.approx(expected[a]) and probs[a] > 0  # never an illegal action


def test_logged_rows_carry_what_off_policy_evaluation_needs(
    pair: tuple[str, str], tmp_tracking: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Client (exploring 30 %, challenger in shadow) → tracer → capture → the trace store: each row
    has the served propensity (logp) and the shadow's probabilities, so the importance weight
    π_shadow(served action) / propensity is computable per row, and its mean is ~1."""
    from rlops.pipeline_steps.capture.step import capture_step

    v1, v2 = pair
    now = datetime(2026, 11, 30, 5, 3, tzinfo=UTC)
    for module in ("rlops.agent_sdk.tracer", "rlops.agent_sdk.rollout"):
        monkeypatch.setattr(sys.modules[module], "_now", lambda: now)
    ctx = StepContext.create(SCENARIO, "20261130T0500-15m")
    n = 400
    with (
        Tracer(ctx.traces.landing_uri, fsync=False) as tr,
        PolicyClient(
            tmp_tracking,
            SCENARIO,
            PACK_DIR,
            timeout_ms=5000,
            refresh_every_s=None,
            shadow="challenger",
            exploration=0.3,
            seed=7,
        ) as c,
    ):
        for i in range(n):
            with Episode(tr, scenario=SCENARIO, policy_version="?", source="live") as ep:
                d = c.decide(STATE, key=f"user-{i}")
                ep.annotate(**d.trace_fields())
                ep.step(ep.observe(STATE), d.action)
        agreement = c.shadow_agreement
    out = capture_step(ctx).as_dict()
    assert out["rows_accepted"] == n and out["rows_quarantined"] == 0 and out["alerts"] == []
    rows = ctx.traces.read(SCENARIO)
    assert (rows["shadow_policy_version"] == f"{NAME}/{v2}").all() and (rows["policy_version"] == f"{NAME}/{v1}").all()
    propensity = np.exp(rows["logp"].to_numpy())
    greedy = rows["action"] == "fetch_credit_report"
    assert greedy.mean() > 0.6 and (~greedy).sum() > 0  # exploration served other actions too
    assert (propensity[~greedy.to_numpy()] < 0.3).all() and (propensity[greedy.to_numpy()] > 0.7).all()
    probs = rows["shadow_probs"].map(json.loads)
    served_p = np.array([p[a] for p, a in zip(probs, rows["action"])])
    np.testing.assert_allclose(np.exp(rows["shadow_served_logp"]), served_p, rtol=1e-6)
    w = served_p / propensity
    # E_behaviour[π_shadow(a)/propensity(a)] = Σ_a π_shadow(a) = 1 over the legal actions.
    assert abs(w.mean() - 1.0) < 0.25, w.mean()
    assert agreement == pytest.approx((rows["shadow_action"] == rows["action"]).mean())
