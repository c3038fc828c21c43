"""The SDK never falls back silently: the trace store's own column names decide with the policy, a
state of the wrong shape is an error at the first call, and a client whose decisions fall back
raises an alert within one capture interval (client → tracer → capture, as they run in production)."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.agent_sdk import Episode, Tracer
from rlops.agent_sdk.policy_client import PolicyClient, StateError
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
def champion(tmp_tracking: str, tmp_storage_root: str, pack: Any) -> str:
    torch.set_num_threads(1)
    v1, _ = register_pair(pack)
    tracker().set_alias(NAME, "champion", v1)
    return v1


def nested(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if not k.startswith("state.") or v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        node = out
        *parents, leaf = k[len("state.") :].split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = v
    return out


def test_trace_store_rows_decide_with_the_policy(champion: str, tmp_tracking: str) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.trace_store.store import read_traces

    ctx = StepContext.create(SCENARIO, "20261130T0500-15m")
    capture_step(ctx, CaptureRequest(simulate=True, episodes=40))
    rows = read_traces(ctx.storage, ctx.traces.scenario_uri(SCENARIO)).head(60).to_dict(orient="records")
    assert rows and any(k.startswith("state.") for k in rows[0])
    with PolicyClient(
        tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, exploration=0.0
    ) as client:
        for row in rows:
            from_row = client.decide(row)  # a whole trace row: its state.<path> columns are the state
            assert not from_row.fallback, from_row.fallback_reason
            assert from_row.policy_version == f"{NAME}/{champion}"
            flat = {k: v for k, v in row.items() if k.startswith("state.")}
            for shape in (flat, nested(row), {"state": nested(row)}):
                d = client.decide(shape)
                assert (d.action, d.probs, d.fallback) == (from_row.action, from_row.probs, False)
            _, _, a = client.encoder.encode(row)
            _, _, b = client.encoder.encode(nested(row))
            assert np.array_equal(a, b)
        assert client.fallback_rate == 0.0


def test_a_state_of_the_wrong_shape_is_an_error_at_the_first_call(champion: str, tmp_tracking: str) -> None:
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None) as client:
        wrong = {"profile": STATE["user_profile"], "app": STATE["application"]}
        with pytest.raises(StateError, match=r"lacks field\(s\).*user_profile.age.*no scenario field.*app") as exc:
            client.decide(wrong)
        assert isinstance(exc.value, UserError) and "state.user_profile.age" in str(exc.value)
        with pytest.raises(StateError, match="expected a number"):
            client.decide({**STATE, "user_profile": {**STATE["user_profile"], "age": "thirty"}})
        with pytest.raises(StateError, match="given twice"):
            client.decide({**STATE, "state.user_profile.age": 31})
        with pytest.raises(StateError, match="history holds unknown action"):
            client.decide(STATE, history="approve")  # a string, not a list of actions
        assert client.decisions == 0 and client.fallback_count == 0  # errors, not fallbacks
        na = {**STATE, "user_profile": {**STATE["user_profile"], "age": pd.NA}}  # pandas' missing value
        with pytest.raises(StateError, match=r"lacks field\(s\) \['user_profile.age'\]"):
            client.decide(na)
        assert not client.decide(STATE).fallback
        # Once a state was read, one bad request falls back with its reason instead of failing the agent.
        d = client.decide(wrong)
        assert d.fallback and d.fallback_reason.startswith("bad_state: ") and d.test_group == "fallback"
        assert client.fallback_rate == 0.5
    with PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, bad_state="raise") as client:
        client.decide(STATE)
        with pytest.raises(StateError):
            client.decide(wrong)
    with pytest.raises(UserError, match="bad_state"):
        PolicyClient(tmp_tracking, SCENARIO, PACK_DIR, refresh_every_s=None, bad_state="sometimes")


def _serve(client: PolicyClient, tracer: Tracer, n: int) -> list[Any]:
    out = []
    for i in range(n):
        state = {**STATE, "user_profile": {**STATE["user_profile"], "age": 20 + i}}
        with Episode(tracer, scenario=SCENARIO, policy_version="unknown", source="live") as ep:
            d = client.decide(state, key=f"user-{i}")
            ep.annotate(**d.trace_fields())
            ep.step(ep.observe(state), d.action, latency_ms=d.latency_ms)
        out.append(d)
    tracer.flush()
    return out


class _FixedNow:
    def __init__(self) -> None:
        self.t = datetime(2026, 11, 30, 5, 3, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.t


def test_every_decision_falling_back_raises_the_alert_within_one_interval(
    champion: str, tmp_tracking: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from rlops.cli import main
    from rlops.pipeline_steps.capture.step import capture_step
    from tests.agent_sdk.test_policy_client import socket_closed_port

    now = _FixedNow()
    for module in ("rlops.agent_sdk.tracer", "rlops.agent_sdk.rollout"):  # files and rows at a fixed time
        monkeypatch.setattr(sys.modules[module], "_now", now)
    ctx = StepContext.create(SCENARIO, "20261130T0500-15m")
    # An agent pointed at a registry it cannot reach: every decision is the rule engine's.
    with socket_closed_port() as port, Tracer(ctx.traces.landing_uri, fsync=False) as tracer:
        broken = PolicyClient(f"http://127.0.0.1:{port}", SCENARIO, PACK_DIR, http_max_retries=0, refresh_every_s=None)
        decisions = _serve(broken, tracer, 30)
        broken.close()
    assert all(d.fallback for d in decisions) and broken.fallback_rate == 1.0
    out = capture_step(ctx).as_dict()
    assert out["rows_accepted"] == 30 and out["fallbacks"]["share"] == 1.0
    assert out["fallbacks"]["by_reason"] == {"load_error": 30}
    assert len(out["alerts"]) == 1 and "fallback share 100.0% of 30 live decisions" in out["alerts"][0]
    rows = ctx.traces.read(SCENARIO)
    assert rows["fallback_reason"].str.startswith("load_error: no champion policy loaded").all()
    assert (rows["policy_version"] == "rules").all() and (rows["test_group"] == "fallback").all()
    run = _capture_run(ctx)
    assert run.data.metrics["fallback_share"] == 1.0 and "fallback share" in run.data.tags["rlops.alert.fallback"]
    # The command line prints it (the same interval captured again).
    assert main(["capture", "--scenario", SCENARIO, "--run-key", "20261130T0500-15m"]) == 0
    assert "ALERT: rule-engine fallback share 100.0%" in capsys.readouterr().err

    # The next interval, the same agent with a reachable registry: served by the policy, no alert.
    now.t = datetime(2026, 11, 30, 5, 18, tzinfo=UTC)
    nxt = StepContext.create(SCENARIO, "20261130T0515-15m")
    with (
        Tracer(nxt.traces.landing_uri, fsync=False) as tracer,
        PolicyClient(
            tmp_tracking, SCENARIO, PACK_DIR, timeout_ms=5000, refresh_every_s=None, exploration=0.0
        ) as healthy,
    ):
        assert not any(d.fallback for d in _serve(healthy, tracer, 30))
    out = capture_step(nxt).as_dict()
    assert out["fallbacks"]["share"] == 0.0 and out["fallbacks"]["decisions"] == 30 and out["alerts"] == []
    rows = nxt.traces.read(SCENARIO, window=(nxt.key.start, nxt.key.end))
    assert (rows["policy_version"] == f"{NAME}/{champion}").all() and rows["fallback_reason"].isna().all()
    assert (rows["logp"] == 0.0).all()  # greedy serving: the served action's propensity is 1


def _capture_run(ctx: StepContext) -> Any:
    from mlflow import MlflowClient

    c = MlflowClient(str(ctx.tracker.tracking_uri))
    exp = c.get_experiment_by_name(SCENARIO)
    runs = c.search_runs(
        [exp.experiment_id], filter_string="tags.`rlops.step` = 'capture'", order_by=["attributes.start_time DESC"]
    )
    return runs[0]


def test_fallback_summary_counts_no_champion_only_once_a_champion_exists() -> None:
    from rlops.pipeline_steps.capture.fallbacks import alert_text, summarize

    rows = pd.DataFrame(
        {
            "source": ["live"] * 40 + ["sandbox"] * 10,
            "fallback": [True] * 30 + [False] * 5 + [None] * 5 + [True] * 10,
            "fallback_reason": ["no_champion: none yet"] * 25 + ["timeout: slow"] * 4 + [None] * 21,
        }
    )
    s = summarize(rows)
    assert (s.decisions, s.fallbacks, s.by_reason) == (35, 30, {"no_champion": 25, "timeout": 4, "unspecified": 1})
    assert s.share == pytest.approx(30 / 35) and alert_text(s, 0.05, 20)
    before = summarize(rows, champion_exists=False)  # the rule engine serves until the first promotion
    assert before.share == pytest.approx(5 / 10) and alert_text(before, 0.05, 20) is None  # 10 < 20 decisions
    assert alert_text(before, 0.05, 10) is not None
    assert alert_text(summarize(rows.iloc[30:40]), 0.05, 1) is None  # no fallbacks among 5 decisions
