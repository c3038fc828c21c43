"""Evaluate / promote / rollback: paired gates decide, aliases move only when every gate passes,
and any failure (a gate, MLflow, a broken reward function, a failed stress test) changes nothing."""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.outcome import PromotionStatus
from rlops.pipeline_steps.promotion.request import EvaluateRequest
from rlops.registry.client import Tracker
from tests.policy_kit import NAME, SCENARIO, approve_all, good, pack, promotion_ctx, promotion_sandbox, register  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("promotion_sandbox")
RUN_KEY = "20260105T1000"


def aliases(ctx: StepContext) -> dict[str, str]:
    return ctx.tracker.aliases(NAME)


# --------------------------------------------------------------------------- statistics
def test_paired_bootstrap_and_tests() -> None:
    from rlops.pipeline_steps.promotion.gate_stats import paired_bootstrap, two_proportion_z, welch_greater

    rng = np.random.default_rng(0)
    d = rng.normal(0.3, 1.0, 2000)
    mean, lo, hi = paired_bootstrap(d, 1000, 0.95, seed=1)
    se = d.std() / np.sqrt(d.size)
    assert lo < mean < hi and abs((hi - lo) - 2 * 1.96 * se) < 0.2 * (hi - lo)
    assert all(np.isnan(v) for v in paired_bootstrap(np.array([0.1, np.nan]), 200, 0.95))
    z, p = two_proportion_z(60, 100, 40, 100)
    assert z > 2.5 and p < 0.01
    assert two_proportion_z(50, 100, 50, 100)[1] == pytest.approx(0.5)
    t, p = welch_greater(rng.normal(1.0, 1, 300), rng.normal(0.0, 3, 300))
    assert t > 0 and p < 0.001


# --------------------------------------------------------------------------- promotion
def test_good_candidate_beats_bad_champion_and_is_promoted(pack: Any, good: Any, approve_all: Any) -> None:
    from rlops.pipeline_steps.promotion.flow import promote

    ctx = promotion_ctx()
    bad_v = register(ctx, pack, approve_all)
    ctx.tracker.set_alias(NAME, "champion", bad_v)
    cand = register(ctx, pack, good)
    res = promote(ctx, cand)
    assert res.promoted and res.action == "champion" and res.baseline == f"champion v{bad_v}"
    assert res.status is PromotionStatus.CHAMPION and (res.champion, res.previous) == (cand, bad_v)
    assert aliases(ctx) == {"champion": cand, "previous": bad_v}
    gates = {g["gate"]: g for g in res.gates or []}
    assert {
        "mean_return",
        "completion_rate",
        "handling_ms",
        "human_takeover_rate",
        "illegal_action_rate",
        "latency_p99_ratio",
        "segment:base",
        "segment:elderly",
        "segment:low_credit_score",
        "stress_test",
        "finite_returns",
    } <= set(gates)
    assert gates["mean_return"]["candidate"] > gates["mean_return"]["champion"]
    # the gate table went to storage and to an MLflow run; the version carries the verdict
    table = ctx.storage.read_json(f"{res.report_uri}/gates.json")
    assert table["columns"] == ["gate", "candidate", "champion", "threshold", "passed", "status", "detail"]
    assert "<table>" in ctx.storage.read_text(f"{res.report_uri}/gates.html")
    arts = {a.path for a in ctx.tracker.client.list_artifacts(res.eval_run_id)}
    assert {"gates.json", "gates.html"} <= arts
    assert ctx.tracker.model_version_tags(NAME, cand)["eval_passed"] == "true"
    # rollback puts the old champion back
    from rlops.pipeline_steps.promotion.flow import rollback

    rb = rollback(promotion_ctx())
    assert rb.status is PromotionStatus.ROLLED_BACK and (rb.champion, rb.rolled_back_from) == (bad_v, cand)
    assert aliases(ctx) == {"champion": bad_v}


def test_worse_candidate_fails_and_champion_stays(
    pack: Any, good: Any, approve_all: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.cli import main

    ctx = promotion_ctx()
    champ = register(ctx, pack, good)
    ctx.tracker.set_alias(NAME, "champion", champ)
    cand = register(ctx, pack, approve_all)
    # the CLI builds its context from params; give it the test's overrides
    monkeypatch.setattr("rlops.commands.model.context_from_args", lambda a: promotion_ctx())
    assert main(["model", "promote", "--candidate", cand, "--json", "--run-key", RUN_KEY]) == 1
    res = json.loads(capsys.readouterr().out)
    assert not res["promoted"] and "mean_return" in res["failed_gates"] and "champion unchanged" in res["reason"]
    assert res["action"] == "none" and res["passed"] is False and "gates" in res and "lock_wait_s" in res
    assert aliases(ctx) == {"champion": champ}
    assert ctx.tracker.model_version_tags(NAME, cand)["eval_passed"] == "false"


def test_first_champion_is_judged_against_the_rule_engine(pack: Any, good: Any) -> None:
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate
    from rlops.pipeline_steps.promotion.flow import promote

    ctx = promotion_ctx(min_improvement=-0.5, segment_tolerance=1.0)
    cand = register(ctx, pack, good)
    dry = evaluate_candidate(
        promotion_ctx(dry_run=True, min_improvement=-0.5, segment_tolerance=1.0), EvaluateRequest(cand)
    ).as_dict()
    assert dry["baseline"] == "rules" and "report_uri" not in dry
    would = promote(promotion_ctx(dry_run=True, min_improvement=-0.5, segment_tolerance=1.0), cand)
    assert would.action == "would_promote" and not would.promoted and aliases(ctx) == {}
    assert would.as_dict()["report_uri"] is None  # a dry run writes no report; the key stays
    assert "eval_passed" not in ctx.tracker.model_version_tags(NAME, cand)
    res = promote(ctx, cand)
    assert res.promoted and res.baseline == "rules" and aliases(ctx) == {"champion": cand}
    assert res.as_dict()["previous"] is None  # no earlier champion: the key says so


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mlflow_unreachable_during_the_move_leaves_champion(
    pack: Any, good: Any, approve_all: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rlops.pipeline_steps.promotion.evaluate as ev
    import rlops.pipeline_steps.promotion.flow as flow

    ctx = promotion_ctx()
    bad_v = register(ctx, pack, approve_all)
    ctx.tracker.set_alias(NAME, "champion", bad_v)
    cand = register(ctx, pack, good)
    real = ev.evaluate_candidate

    def then_outage(c: StepContext, *a: Any, **kw: Any) -> dict[str, Any]:
        report = real(c, *a, **kw)
        # MLflow goes away between the evaluation and the alias move
        c.__dict__["tracker"] = Tracker(
            f"http://127.0.0.1:{_closed_port()}", SCENARIO, http_max_retries=0, http_timeout_s=2
        )
        return report

    monkeypatch.setattr(ev, "evaluate_candidate", then_outage)
    res = flow.promote(ctx, cand)
    assert res.passed and not res.promoted and "MLflow failed" in res.reason
    assert res.status is PromotionStatus.FAILED
    assert promotion_ctx().tracker.aliases(NAME) == {"champion": bad_v}

    # a failure half-way through the move (champion alias write) restores the aliases
    monkeypatch.setattr(ev, "evaluate_candidate", real)
    ctx2 = promotion_ctx()
    orig_set = Tracker.set_alias

    def flaky(self: Tracker, name: str, alias: str, version: str) -> None:
        if alias == "champion" and version == cand:
            from rlops.registry.client import TrackingError

            raise TrackingError("connection reset")
        orig_set(self, name, alias, version)

    monkeypatch.setattr(Tracker, "set_alias", flaky)
    res = flow.promote(ctx2, cand)
    assert not res.promoted and aliases(promotion_ctx()) == {"champion": bad_v}


def test_nan_reward_and_failed_stress_test_block_promotion(
    pack: Any, good: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.sandbox.pack import load_pack

    # a pack copy whose reward v2 yields NaN for low credit scores
    scen = tmp_path / "scenarios" / SCENARIO
    shutil.copytree(REPO_ROOT / "scenarios" / SCENARIO, scen)
    src = (scen / "reward_v1.py").read_text().replace('VERSION_LABEL = "v1"', 'VERSION_LABEL = "v2"')
    src += (
        '\n\n@component(objective="risk", reason="broken")\n@rule_ref("CREDIT_POLICY_v2.1_2.1")\n'
        'def broken(t):\n    return torch.where(t.s.user_profile.credit_score < 600, float("nan"), 0.0)\n'
    )
    (scen / "reward_v2.py").write_text(src)
    nan_pack = load_pack(scen, check_liveness=False)
    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: nan_pack)
    ctx = promotion_ctx(min_improvement=-3.5, segment_tolerance=17.0)
    cand = register(ctx, nan_pack, good, reward_fn="v2")
    res = promote(ctx, cand)
    assert not res.promoted and "finite_returns" in (res.failed_gates or []) and aliases(ctx) == {}
    assert res.status is PromotionStatus.REFUSED

    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: pack)
    ctx = promotion_ctx(min_improvement=-3.5, segment_tolerance=17.0, require_stress_test=True)
    cand = register(ctx, pack, good)
    res = promote(ctx, cand)  # no stress test recorded yet
    assert not res.promoted and res.failed_gates == ["stress_test"]
    ctx.tracker.set_model_version_tags(NAME, cand, {"stress_test": "fail"})
    assert promote(ctx, cand).failed_gates == ["stress_test"] and aliases(ctx) == {}
    ctx.tracker.set_model_version_tags(NAME, cand, {"stress_test": "pass"})
    assert promote(ctx, cand).promoted and aliases(ctx) == {"champion": cand}


def test_staged_rollout_advances_5_15_100(pack: Any, good: Any, approve_all: Any) -> None:
    from rlops.pipeline_steps.promotion.flow import promote

    ctx = promotion_ctx(episodes=300)
    bad_v = register(ctx, pack, approve_all)
    ctx.tracker.set_alias(NAME, "champion", bad_v)
    cand = register(ctx, pack, good)
    seen = []
    for _ in range(3):
        res = promote(ctx, cand, staged=True)
        seen.append((res.action, res.traffic_fraction))
        if res.action == "challenger":
            assert aliases(ctx) == {"champion": bad_v, "challenger": cand}
            assert float(ctx.tracker.model_version_tags(NAME, cand)["traffic_fraction"]) == res.traffic_fraction
    assert seen == [("challenger", 0.05), ("challenger", 0.15), ("champion", 1.0)]
    assert aliases(ctx) == {"champion": cand, "previous": bad_v}


def test_live_ab_traffic_feeds_gates(pack: Any, good: Any, approve_all: Any) -> None:
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate
    from rlops.trace_store.store import partition_path

    ctx = promotion_ctx(ab_min_episodes=50)
    bad_v = register(ctx, pack, approve_all)
    ctx.tracker.set_alias(NAME, "champion", bad_v)
    cand = register(ctx, pack, good)
    rng = np.random.default_rng(0)

    def episodes(group: str, version: str, n: int, takeover_p: float, latency: float) -> pd.DataFrame:
        rows = []
        for i in range(n):
            esc = rng.random() < takeover_p
            acts = (
                ["initiate_fraud_check", "escalate_to_human"]
                if esc
                else ["initiate_fraud_check", "fetch_credit_report", "approve", "send_notification"]
            )
            for k, a in enumerate(acts):
                rows.append(
                    {
                        "episode_id": f"{group}-{i}",
                        "step": k,
                        "test_group": group,
                        "policy_version": version,
                        "action": a,
                        "latency_ms": rng.normal(latency, 20),
                        "done": k == len(acts) - 1,
                    }
                )
        return pd.DataFrame(rows)

    traces = pd.concat([episodes("challenger", cand, 120, 0.30, 300), episodes("champion", bad_v, 300, 0.02, 300)])
    uri = ctx.uri("traces", partition_path(scenario=SCENARIO, date="2026-01-05", hour=9), "part-x.parquet")
    ctx.storage.write_parquet(uri, traces)
    res = evaluate_candidate(ctx, EvaluateRequest(cand)).as_dict()
    gates = {g["gate"]: g for g in res["gates"]}
    assert not gates["ab:human_takeover_rate"]["passed"] and not gates["ab:completion_rate"]["passed"]
    assert gates["ab:handling_ms"]["passed"] and not res["passed"]
    assert "ab:human_takeover_rate" in res["failed_gates"]


def test_bad_input_is_reported(pack: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate
    from rlops.pipeline_steps.promotion.flow import rollback

    ctx = promotion_ctx()
    with pytest.raises(ValueError, match="no version 42"):
        evaluate_candidate(ctx, EvaluateRequest("42"))
    with pytest.raises(ValueError, match="no 'previous' version"):
        rollback(ctx)
