"""A promotion requested through an alias stress-tests the version it gates; a first champion
needs no live A/B against nothing; a rejected version serves no traffic; the gate table has one
row per segment."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.promotion.outcome import PromotionStatus
from rlops.pipeline_steps.promotion.request import EvaluateRequest
from rlops.pipeline_steps.stress.request import StressRequest
from rlops.registry.aliases import move_champion
from tests.policy_kit import NAME, SCENARIO, approve_all, good, pack, promotion_ctx, promotion_sandbox, register  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("promotion_sandbox")
RUN_KEY = "20260105T1000"
LOOSE = {"min_improvement": -0.5, "segment_tolerance": 1.0}  # the cloned rule engine against the rules
STRESS = {"edge_states": 1000, "gaming_episodes": 400, "policy_episodes": 300}


def _ctx(rollout: dict[str, Any] | None = None, dry_run: bool = False, **evaluate: Any) -> StepContext:
    base = promotion_ctx(RUN_KEY, **{**LOOSE, **evaluate})
    return StepContext.create(
        run_key=RUN_KEY,
        dry_run=dry_run,
        overrides={
            "evaluate": base.params["evaluate"],
            "tracking": {"http_max_retries": 0},
            "stress": STRESS,
            "rollout": rollout or {},
            "ope": {"required": False},
        },
    )


def test_a_cli_trained_version_requested_in_the_ui_passes_its_stress_gate(
    pack: Any, good: Any, approve_all: Any
) -> None:
    from rlops.pipeline_steps.promotion.flow import promote_from_alias
    from rlops.pipeline_steps.stress.step import stress_test
    from rlops.pipeline_steps.stress.version import stress_version

    ctx = _ctx(require_stress_test=True)
    v = register(ctx, pack, good)  # as `rlops train policy` registers it: no stress verdict
    assert "stress_test" not in ctx.tracker.model_version_tags(NAME, v)
    ctx.tracker.client.set_registered_model_alias(NAME, "challenger", v)  # set in the MLflow UI
    res = promote_from_alias(ctx, v)
    assert res.stress is not None and res.stress.ran and res.stress.verdict == "pass", res.stress
    assert res.outcome == "champion" and ctx.tracker.get_alias(NAME, "champion") == v, res.reason
    out = res.as_dict()  # what the webhook receiver answers and the promotion DAG pushes
    assert (out["outcome"], out["version"], out["requested_by"], out["stress"]["verdict"]) == (
        "champion",
        v,
        "mlflow-ui-alias",
        "pass",
    )
    assert "gates" not in out and out["failed_gates"] == []
    tags = ctx.tracker.model_version_tags(NAME, v)
    assert tags["stress_test"] == "pass" and tags["stress_report"].endswith(f"/{RUN_KEY}/v{v}/report.json")
    # the passing report of this very version is used again, not run again
    again = stress_version(ctx, v)
    assert not again.ran and again.report_uri == tags["stress_report"]

    # a second version stressed under the same run key keeps its own report beside the first
    w = register(ctx, pack, approve_all)
    other = stress_test(ctx, StressRequest(policy_version=w))
    assert other.report_uri != tags["stress_report"]
    assert ctx.storage.read_json(tags["stress_report"])["meta"]["policy_version"] == v
    assert ctx.storage.read_json(other.report_uri)["meta"]["policy_version"] == w


def test_a_first_champion_is_staged_unless_told_otherwise(pack: Any, good: Any) -> None:
    from rlops.pipeline_steps.promotion.flow import promote

    cand = register(_ctx(), pack, good)
    would = promote(_ctx(dry_run=True), cand, staged=True)  # the default: the first champion rolls out too
    assert would.action == "would_stage" and "champion in 120 min" in would.reason, would.reason
    assert would.status is PromotionStatus.WOULD_STAGE and "champion_in_min" not in would.as_dict()
    not_staged = {"staged_first_champion": False}
    res = promote(_ctx(not_staged), cand, staged=True)
    assert res.action == "champion" and res.promoted, res.reason
    assert "first champion" in res.reason and "rule engine" in res.reason
    assert _ctx().tracker.aliases(NAME) == {"champion": cand}
    # with a champion to compare against live, the roll-out is staged and says how long it takes
    nxt = register(_ctx(), pack, good)
    staged = promote(_ctx(not_staged), nxt, staged=True)
    assert staged.action == "challenger" and staged.champion_in_min == 120.0, staged.reason
    assert "can become champion in 120 min" in staged.reason
    assert staged.as_dict()["champion"] == cand and staged.as_dict()["champion_in_min"] == 120.0


def test_a_rejected_hand_set_challenger_serves_no_traffic(pack: Any, good: Any, approve_all: Any) -> None:
    from rlops.pipeline_steps.promotion.flow import promote_from_alias

    ctx = _ctx()
    champ = register(ctx, pack, good)
    move_champion(ctx.tracker, NAME, champ)
    bad = register(ctx, pack, approve_all)
    ctx.tracker.set_model_version_tags(NAME, bad, {"traffic_fraction": 0.05})  # from an earlier roll-out
    ctx.tracker.client.set_registered_model_alias(NAME, "challenger", bad)
    res = promote_from_alias(ctx, bad)
    assert res.outcome == "rejected" and "mean_return" in (res.failed_gates or [])
    assert res.status is PromotionStatus.REFUSED and res.as_dict()["action"] == "none"
    assert ctx.tracker.aliases(NAME) == {"champion": champ}
    tags = ctx.tracker.model_version_tags(NAME, bad)
    assert float(tags["traffic_fraction"]) == 0.0 and tags["rlops.promotion.outcome"] == "rejected"


def test_a_candidate_a_retrain_could_not_promote_is_tagged_rejected(pack: Any, good: Any, approve_all: Any) -> None:
    """What a scheduled retrain calls: the version list in MLflow tells a refused candidate from one
    never judged (the tags a request through an alias gets)."""
    from rlops.pipeline_steps.promotion.flow import promote

    ctx = _ctx()
    champ = register(ctx, pack, good)
    move_champion(ctx.tracker, NAME, champ)
    bad = register(ctx, pack, approve_all)
    res = promote(ctx, bad, staged=True)
    assert res.status is PromotionStatus.REFUSED
    tags = ctx.tracker.model_version_tags(NAME, bad)
    assert tags["rlops.promotion.outcome"] == "rejected" and "mean_return" in tags["rlops.promotion.reason"]
    assert ctx.tracker.model_version_tags(NAME, champ)["rlops.promotion.outcome"] == "champion"


def test_the_gate_table_names_each_segment_once(
    pack: Any, good: Any, approve_all: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Judged in a profile with a population of its own (as a calibrated sandbox has), the
    stand-in's named segments are judged too — and ``base``, which both have, once."""
    from rlops.pipeline_steps.promotion.evaluate import evaluate_candidate
    from rlops.sandbox.pack import load_pack

    scen = tmp_path / "scenarios" / SCENARIO
    shutil.copytree(REPO_ROOT / "scenarios" / SCENARIO, scen)
    doc = (scen / "scenario.yaml").read_text()
    aged = (
        "  profiles:\n    aged:\n      description: a fitted world with a population of its own\n"
        "      population:\n        - name: retirees\n          probability: 0.3\n          init:\n"
        "            user_profile.age: {dist: normal, mean: 70, std: 5}\n"
    )
    (scen / "scenario.yaml").write_text(doc.replace("  profiles:\n", aged, 1))
    aged_pack = load_pack(scen, check_liveness=False)
    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: aged_pack)
    ctx = _ctx(profile="aged", episodes=400)
    champ = register(ctx, aged_pack, approve_all)
    move_champion(ctx.tracker, NAME, champ)
    cand = register(ctx, aged_pack, good)
    names = [g["gate"] for g in evaluate_candidate(ctx, EvaluateRequest(cand)).gates]
    assert {"segment:base", "segment:retirees", "segment:elderly"} <= set(names)
    assert len(names) == len(set(names)), names
