"""The rungs of evidence: what the sandbox's trust, the off-policy verdict and live A/B allow,
pinned on hand-made gate rows; and end to end, a candidate whose sandbox over-promises is held
at the canary stage (or refused) with the reason in the table, never promoted to full traffic."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlops.common.params_operations import OpeParams
from rlops.pipeline_steps.promotion.evidence import TRUST_GATE, deciding, judge, trust_row
from rlops.pipeline_steps.promotion.gates import Gate
from rlops.pipeline_steps.promotion.ope import Estimate
from rlops.pipeline_steps.promotion.ope_gate import ope_gate_row, sandbox_gap_row
from rlops.pipeline_steps.promotion.ope_sufficiency import undecided
from rlops.pipeline_steps.promotion.ope_value import OPEResult, value_scale
from tests.policy_kit import pack  # noqa: F401  (fixture)


def _dr(value: float, half: float) -> dict[str, Estimate]:
    return {"dr": Estimate("dr", value, value - half, value + half, half / 1.96, "normal")}


def _result(value: float, half: float, logged: float = 0.5, sd: float = 1.0) -> OPEResult:
    res = OPEResult(episodes=1000, estimates=_dr(value, half), logged_return=logged, logged_return_sd=sd, ess=900)
    res.margin = OpeParams().tolerance * value_scale(logged, sd, OpeParams())
    return res


def test_the_gate_is_scale_free_three_way() -> None:
    """Pass: DR's lower bound at or above logged − margin; fail: its upper bound below; the same
    shapes at a click rate of 0.005 and at a credit return of 0.5 (the margin is 25 % of the value)."""
    cfg = OpeParams()
    for scale in (1.0, 0.01):
        logged, sd = 0.5 * scale, 0.6 * scale  # the scale floor (0.1 sd) is below |value| at both scales
        assert value_scale(logged, sd, cfg) == pytest.approx(logged)
        shown_ok = _result(0.42 * scale, 0.04 * scale, logged, sd)  # lower 0.38 ≥ 0.375
        worse = _result(0.30 * scale, 0.04 * scale, logged, sd)  # upper 0.34 < 0.375
        between = _result(0.40 * scale, 0.04 * scale, logged, sd)  # [0.36, 0.44] straddles 0.375
        assert ope_gate_row(shown_ok, cfg).status == "pass"
        assert ope_gate_row(worse, cfg).status == "fail"
        assert undecided(between, cfg) and "straddles" in str(undecided(between, cfg))
    # a value near 0 keeps a margin: ope.scale_floor of the return's standard deviation
    assert value_scale(0.001, 2.0, cfg) == pytest.approx(cfg.scale_floor * 2.0)
    assert math.isnan(value_scale(float("nan"), 1.0, cfg))


def test_a_sandbox_promising_more_than_the_logs_support_fails_the_gap_row() -> None:
    cfg = OpeParams()
    res = _result(0.5, 0.05)
    assert sandbox_gap_row(res, 0.6, cfg).status == "pass"  # within DR's upper 0.55 + 25 % of 0.5
    row = sandbox_gap_row(res, 1.5, cfg)
    assert row.status == "fail" and "EXPLOITING THE SANDBOX" in row.detail
    res.skipped = "effective sample size 3 of 1000 episodes"
    assert sandbox_gap_row(res, 1.5, cfg).status == "skipped"  # no estimate to hold it to: not a pass


def test_trust_is_the_incumbent_reproduced_within_the_logged_interval() -> None:
    cfg = OpeParams()
    trusted = trust_row(0.52, 0.5, 0.01, 0.6, "rule engine", cfg)
    assert trusted.status == "pass" and trusted.detail.startswith("trusted")
    # 8× the logged click rate (the case): untrusted, the ratio shown
    clicks = trust_row(0.034, 0.0042, 0.0002, 0.065, "rule engine", cfg)
    assert clicks.status == "skipped" and "UNTRUSTED" in clicks.detail and "ratio 8.1" in clicks.detail
    nothing = trust_row(0.5, float("nan"), float("nan"), float("nan"), "champion v2", cfg)
    assert nothing.status == "skipped" and "UNTRUSTED" not in nothing.detail


def _row(name: str, status: str) -> Gate:
    skipped = status == "skipped"
    return Gate(name, 1.0, 1.0, "", status != "fail", "skipped: why" if skipped else "", skipped)


def test_judge_holds_without_off_policy_evidence_and_lets_live_ab_decide() -> None:
    untrusted = Gate(TRUST_GATE, 1.0, 0.1, "", True, "skipped: UNTRUSTED: …", skipped=True)
    ope_pass, ope_thin = _row("ope:dr", "pass"), _row("ope:dr", "skipped")
    assert judge([ope_pass], required=True).hold is None
    held = judge([ope_thin], required=True)
    assert held.ope_state == "insufficient" and held.hold and "insufficient" in held.hold
    assert judge([], required=True).hold and "off" in str(
        judge([], required=True).hold
    )  # ope.enabled false is no evidence either
    assert judge([ope_thin], required=False).hold is None  # ope.required false: the sandbox decides
    # a canary's passing live A/B is the last word
    assert (
        judge([ope_thin, _row("ab:completion_rate", "pass"), _row("ab:handling_ms", "pass")], required=True).hold
        is None
    )
    assert judge([ope_thin, _row("ab:completion_rate", "skipped")], required=True).hold is not None
    # an untrusted sandbox's rows do not decide, either way; the rest do
    rows = [untrusted, _row("mean_return", "fail"), _row("segment:elderly", "fail"), _row("stress_test", "fail")]
    assert [g.gate for g in deciding(rows) if not g.passed] == ["stress_test"]
    assert judge([untrusted, ope_thin], required=True).hold.startswith("the sandbox is untrusted")  # type: ignore[union-attr]


# --------------------------------------------------------------------------- end to end
def optimistic_copy(pack_dir: Path, root: Path) -> Any:
    """The credit pack with a sandbox fitted on too few bad outcomes: it believes fraud and
    defaults a twentieth as frequent as they are, so approving everyone looks far better than it is."""
    import yaml

    from rlops.sandbox.pack import load_pack

    folder = root / "credit_approval"
    shutil.copytree(pack_dir, folder)
    doc = yaml.safe_load((folder / "scenario.yaml").read_text())
    hidden = doc["state"]["hidden"]
    hidden["is_fraud"]["init"]["p"] = f"0.05 * ({hidden['is_fraud']['init']['p']})"
    hidden["default_prob"]["init"]["expr"] = f"0.05 * ({hidden['default_prob']['init']['expr']})"
    for action in doc["actions"]:
        for effect in action.get("effects", []):
            sets = effect.get("set", {})
            if "hidden.default_prob" in sets:
                sets["hidden.default_prob"] = f"0.05 * ({sets['hidden.default_prob']})"
    (folder / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_pack(folder, check_liveness=False)


@pytest.mark.usefixtures("tmp_tracking", "tmp_storage_root")
def test_a_candidate_exploiting_an_over_promising_sandbox_is_not_promoted(
    pack: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The champion (the rule engine's clone) serves production with the default exploration; the
    candidate approves everyone, which a sandbox that under-counts defaults values at ≥ 3× what
    production pays. Every sandbox gate passes it; the evidence holds it at the canary stage (or
    refuses it), and the table says why. Before the gates could refuse or hold, it became champion."""
    from rlops.agent_sdk.serving import choose_batch, exploration_probs
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.sandbox.policies import evaluate_policy
    from rlops.sandbox.traces import rollout_traces
    from rlops.trace_store.store import partition_path
    from tests.policy_kit import NAME, SCENARIO, approve_all_policy, cloned_rules_policy, register

    torch.set_num_threads(1)
    optimistic = optimistic_copy(pack.path, tmp_path)
    monkeypatch.setattr(StepContext, "pack_with", lambda self, calibration: optimistic)
    champion_net, candidate_net = cloned_rules_policy(pack), approve_all_policy(pack)

    def greedy(net: Any) -> Any:
        return lambda env: net.act(env.observe(), deterministic=True).action

    true_value = evaluate_policy(pack, greedy(candidate_net), episodes=3000, seed=5, profile="live").mean_return
    promised = evaluate_policy(optimistic, greedy(candidate_net), episodes=3000, seed=5, profile="live").mean_return
    assert promised >= 3 * abs(true_value) and promised > 0.3, (promised, true_value)  # the sandbox over-promises

    ctx = StepContext.create(
        run_key="20260105T1000",
        overrides={
            "evaluate": {
                "episodes": 1500,
                "bootstrap_samples": 400,
                "latency_samples": 30,
                "latency_p99_ratio": 1000.0,
                "require_stress_test": False,
                "min_segment_episodes": 50,
                "profile": "live",
            },
            # the defaults this test is about, whatever params file another test of the session left set
            "ope": {"dm_episodes": 300, "required": True, "enabled": True},
            "rollout": {"staged_first_champion": True},
            "tracking": {"http_max_retries": 0},
        },
    )
    champ = register(ctx, pack, champion_net)
    ctx.tracker.set_alias(NAME, "champion", champ)
    cand = register(ctx, pack, candidate_net)
    rng = np.random.default_rng(1)

    def served(env: Any) -> Any:  # the champion as a policy client serves it: greedy + 5 % of its own distribution
        out = champion_net.act(env.observe(), deterministic=True)
        probs = out.probs.detach().numpy().astype(np.float64)
        explore = exploration_probs(env.action_masks().numpy(), probs, "policy")
        a, p = choose_batch(out.action.numpy(), explore, 0.05, rng.random((len(probs), 2)))
        return torch.as_tensor(a), {"logp": torch.as_tensor(np.log(p), dtype=torch.float32)}

    rows = rollout_traces(
        pack,
        served,
        3000,
        seed=77,
        profile="live",
        reward_fn="v1",
        source="live",
        policy_version=f"{SCENARIO}-policy/{champ}",
        episode_prefix="live",
        start_ts=datetime(2026, 1, 5, 9, 10, tzinfo=UTC),
    )
    ctx.storage.write_parquet(
        ctx.uri("traces", partition_path(scenario=SCENARIO, date="2026-01-05", hour=9), "part-live.parquet"), rows
    )
    out = promote(ctx, cand)
    gates = {g["gate"]: g for g in out.gates or []}
    assert gates["mean_return"]["status"] == "pass"  # the sandbox alone would promote it
    assert not out.promoted and ctx.tracker.get_alias(NAME, "champion") == champ, out.reason
    held = out.action == "challenger" and "held at the canary stage" in out.reason
    refused = out.status.value == "refused" and {"ope:dr", "ope:sandbox_gap"} & set(out.failed_gates or [])
    assert held or refused, out.reason
    if held:
        assert out.traffic_fraction == pytest.approx(0.05)
    assert gates[TRUST_GATE]["status"] in ("pass", "skipped") and gates["ope:dr"]["status"] in ("fail", "skipped")
