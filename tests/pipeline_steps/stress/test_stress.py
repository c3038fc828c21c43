"""Stress test: the credit pack's reward_v1 passes; a NaN on an edge state, a raising component and
an exploitable "activity" reward each fail with a clear reason; the step writes its report, logs
to MLflow and tags the policy version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rlops.cli import main
from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.stress.edge_states import edge_states, field_edges
from rlops.pipeline_steps.stress.perturbation import STRESS_PROFILE, perturbed_pack
from rlops.pipeline_steps.stress.step import StressConfig, stress_reward_fn
from rlops.sandbox.pack import Pack, load_pack

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"
FAST = StressConfig(edge_states=1024, gaming_episodes=400)

NAN_COMPONENT = """

@component(objective="risk", reason="debt ratio relative to itself")
@rule_ref("RISK_v1.3_5.2")
def debt_ratio_norm(t):
    r = t.s.user_profile.debt_ratio
    return r / r - 1.0
"""
RAISING_COMPONENT = """

@component(objective="risk", reason="age table lookup")
@rule_ref("RISK_v1.3_5.2")
def age_table(t):
    if bool((t.s.user_profile.age >= 90).any()):
        raise ValueError("age outside the actuarial table")
    return torch.zeros_like(t.latency_ms)
"""
ACTIVITY_COMPONENT = """

@component(objective="service", reason="the agent did something")
@rule_ref("CX_v1.0_1.1")
def activity(t):
    return torch.ones_like(t.latency_ms)
"""


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


def pack_with_reward(tmp_path: Path, extra: str) -> tuple[Pack, str]:
    """A copy of the credit pack with ``reward_v9.py`` = reward_v1 plus ``extra``."""
    dst = tmp_path / "credit_approval"
    shutil.copytree(CREDIT, dst)
    (dst / "reward_v9.py").write_text(
        (CREDIT / "reward_v1.py").read_text().replace('VERSION_LABEL = "v1"', 'VERSION_LABEL = "v9"') + extra
    )
    return load_pack(dst, check_liveness=False), str(dst / "reward_v9.py")


def test_edge_values_cover_boundaries_enums_and_bools(credit: Pack) -> None:
    age = credit.scenario.fields["user_profile.age"]
    assert field_edges(age) == [18.0, 19.0, 54.0, 89.0, 90.0]
    assert field_edges(credit.scenario.fields["user_profile.employment"]) == [0.0, 1.0, 2.0, 3.0]
    assert field_edges(credit.scenario.fields["system_status.fraud_flag"]) == [0.0, 1.0]
    S, counts = edge_states(credit, credit.reward_fn("v1"), 1024, seed=3)
    assert S.shape == (1024, credit.scenario.n_cols)
    assert all(n > 0 for n in counts.values()), counts
    # the one-at-a-time rows: each edge value of each field appears
    col = credit.scenario.columns["user_profile.debt_ratio"]
    assert {0.0, 1.5} <= set(S[:, col].tolist())


def test_reward_v1_passes(credit: Pack) -> None:
    res = stress_reward_fn(credit, credit.reward_fn("v1"), FAST)
    assert res.passed, [f.message for f in res.findings] + [p for p in res.probes if not p.passed]
    for cov in res.coverage:
        assert cov.states >= 1000 and cov.legal > 0 and cov.masked > 0, cov
    assert all(v["visible"] > 0 and v["hidden"] > 0 for v in res.visibility.values())
    names = {p.name for p in res.probes}
    assert {"stall", "always_escalate", "repeat:approve"} <= names
    assert set(res.baselines) == {"rules", "oracle"}


def test_nan_on_an_edge_state_fails_with_the_component_and_state(credit: Pack, tmp_path: Path) -> None:
    pack, _ = pack_with_reward(tmp_path, NAN_COMPONENT)
    res = stress_reward_fn(pack, pack.reward_fn("v9"), FAST, probes=False)
    assert not res.passed
    nan = [f for f in res.findings if f.check == "nan"]
    assert nan and all(f.component == "debt_ratio_norm" for f in nan)
    assert "returned NaN" in nan[0].message and "debt_ratio_norm" in nan[0].message
    assert nan[0].example["user_profile.debt_ratio"] == 0.0


def test_raising_component_fails_with_an_example_state(credit: Pack, tmp_path: Path) -> None:
    pack, _ = pack_with_reward(tmp_path, RAISING_COMPONENT)
    res = stress_reward_fn(pack, pack.reward_fn("v9"), FAST)
    raised = [f for f in res.findings if f.check == "raised"]
    assert not res.passed and raised
    assert "age_table" in raised[0].message and "actuarial" in raised[0].message
    assert raised[0].example["user_profile.age"] == 90.0
    assert res.probes == []  # a raising reward cannot be rolled out


def test_activity_reward_fails_the_gaming_probe(credit: Pack, tmp_path: Path) -> None:
    pack, _ = pack_with_reward(tmp_path, ACTIVITY_COMPONENT)
    res = stress_reward_fn(pack, pack.reward_fn("v9"), FAST)
    assert not res.findings  # every value is fine; only the incentive is wrong
    failed = {p.name: p for p in res.probes if not p.passed}
    assert "stall" in failed and failed["stall"].advantage_low > 0
    assert not res.passed


def test_perturbed_pack_scales_latency_errors_and_segment(credit: Pack) -> None:
    p = perturbed_pack(credit, "live", latency=3.0, errors=2.0, segment="elderly")
    prof = p.scenario.spec.profiles[STRESS_PROFILE]
    assert prof.latency_jitter_ms == (600.0, 4500.0)
    assert prof.error_rates["sms"] == pytest.approx(1 - (1 - 0.037) ** 2)  # ≈ 2 × 0.037
    assert [(s.name, s.probability) for s in prof.population] == [("elderly", 1.0)]
    assert p.scenario.spec.actions[0].latency_mean_ms == pytest.approx(900.0)
    env = p.make_env(256, profile=STRESS_PROFILE)
    seg = env.S[:, p.scenario.columns["episode.segment"]]
    assert bool((seg == 1).all())
    assert float(env.S[:, p.scenario.columns["user_profile.age"]].mean()) > 60


def _register_random_policy(
    tracking_uri: str, scenario: str, pack: Pack, tmp_path: Path, extra_features: int = 0
) -> str:
    import dataclasses

    from rlops.model.policy import PolicyConfig, PolicyNetwork
    from rlops.model.policy_io import save_policy
    from rlops.registry.client import Tracker, policy_model_name

    torch.manual_seed(0)
    folder = tmp_path / f"policy{extra_features}"
    config = PolicyConfig.from_layout(pack.scenario.layout)
    config = dataclasses.replace(config, n_features=config.n_features + extra_features)
    save_policy(PolicyNetwork(config), folder)
    tracker = Tracker(tracking_uri, scenario)
    with tracker.start_run("train") as run:
        run.log_artifact(folder, "policy")
        return tracker.register_model(run.run_id, "policy", policy_model_name(scenario))


@pytest.fixture
def fast_params(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The repository's params with a small ``stress`` block, as ``RLOPS_PARAMS``."""
    import yaml

    doc = yaml.safe_load((REPO / "params.yaml").read_text())
    doc["stress"] = {
        "edge_states": 1024,
        "gaming_episodes": 300,
        "policy_episodes": 300,
        "perturbations": {"latency_x3": {"latency": 3.0}},
    }
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("RLOPS_PARAMS", str(path))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    return path


def test_step_writes_report_logs_and_tags_policy(
    credit: Pack,
    tmp_path: Path,
    tmp_tracking: str,
    tmp_storage_root: str,
    fast_params: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rlops.registry.client import Tracker, policy_model_name
    from rlops.storage.backend import Storage

    version = _register_random_policy(tmp_tracking, "credit_approval", credit, tmp_path)
    code = main(
        [
            "stress",
            "--scenario",
            str(CREDIT),
            "--reward-fn",
            "v1",
            "--policy-version",
            version,
            "--run-key",
            "20261130T0500",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == (0 if out["passed"] else 1)
    assert out["reward_fn"] == "v1" and out["report_uri"].endswith(
        f"reports/stress/credit_approval/20261130T0500/v{version}/report.json"
    )
    report = Storage(tmp_storage_root).read_json(out["report_uri"])
    # the pack's own perturbations (its population segment included) win over the project's block
    import yaml

    pack_perturbations = list(yaml.safe_load((CREDIT / "params.yaml").read_text())["stress"]["perturbations"])
    assert pack_perturbations == ["latency_x3", "errors_x5", "elderly"]
    assert report["reward"]["passed"] and [r["scenario"] for r in report["policy"]] == ["nominal", *pack_perturbations]
    tags = Tracker(tmp_tracking, "credit_approval").model_version_tags(policy_model_name("credit_approval"), version)
    assert tags["stress_test"] == out["verdict"] and tags["stress_report"] == out["report_uri"]
    assert "<table>" in Storage(tmp_storage_root).read_text(out["html_uri"])


def test_cli_exits_1_on_a_nan_reward(
    tmp_path: Path, tmp_tracking: str, tmp_storage_root: str, fast_params: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack, reward_file = pack_with_reward(tmp_path, NAN_COMPONENT)
    code = main(
        ["stress", "--scenario", str(pack.path), "--reward-fn", reward_file, "--run-key", "20261130T0500", "--dry-run"]
    )
    out = capsys.readouterr().out
    assert code == 1 and "FAIL" in out and "debt_ratio_norm" in out


def test_a_perturbation_nobody_survives_judges_the_candidate_against_the_fallback_and_the_champion(
    credit: Pack,
) -> None:
    """The credit bureau all but always down (error rates ×1000): no policy completes an episode, so the
    completion floor is what the rule engine reaches (0), not 90 % of nominal; a candidate that
    keeps calling the bureau earns less than the rule engine and fails — unless the champion in
    production fails the same way, when the perturbation cannot tell them apart."""
    from rlops.pipeline_steps.stress.step import stress_policy
    from rlops.sandbox.policies import rule_policy

    cfg = StressConfig(policy_episodes=300, policy_profile="live", perturbations={"down": {"errors": 1000.0}})
    fetch = credit.scenario.action_names.index("fetch_credit_report")

    def stubborn(env):  # type: ignore[no-untyped-def]
        rules = rule_policy(env)
        return torch.where(env.action_masks()[:, fetch], torch.full_like(rules, fetch), rules)

    fn = credit.reward_fn("v1")
    (_, rules_down) = stress_policy(credit, fn, rule_policy, cfg)
    assert rules_down.completion_rate == 0.0 and rules_down.completion_floor == 0.0 and rules_down.passed
    (_, alone) = stress_policy(credit, fn, stubborn, cfg)
    assert not alone.passed and alone.mean_return < rules_down.mean_return == alone.return_floor
    assert "completion" not in alone.reason
    (_, beside) = stress_policy(credit, fn, stubborn, cfg, champion=stubborn)
    assert beside.passed and beside.return_floor == pytest.approx(beside.mean_return)


def test_the_champion_reference_is_one_that_can_read_the_candidates_observations(
    credit: Pack, tmp_path: Path, tmp_tracking: str, tmp_storage_root: str
) -> None:
    """The perturbed runs compare the candidate with the champion only when the champion is another
    version that reads the same observation layout; a champion trained before the pack's state
    changed (another feature count) is left out rather than fed observations it cannot read."""
    from rlops.common.config import load_params
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.policy_loader import load_policy_ref
    from rlops.pipeline_steps.stress.step import champion_reference
    from rlops.registry.client import CHAMPION, Tracker, policy_model_name

    params = load_params(overrides={"storage": {"root": tmp_storage_root}, "tracking": {"uri": tmp_tracking}})
    ctx = StepContext.create("credit_approval", "20261130T0500", params=params)
    name, tracker = policy_model_name("credit_approval"), Tracker(tmp_tracking, "credit_approval")
    candidate = _register_random_policy(tmp_tracking, "credit_approval", credit, tmp_path)
    loaded = load_policy_ref(ctx, candidate)
    assert loaded is not None and champion_reference(ctx, loaded) is None  # no champion yet
    tracker.set_alias(name, CHAMPION, candidate)
    assert champion_reference(ctx, loaded) is None  # the candidate is the champion
    same = _register_random_policy(tmp_tracking, "credit_approval", credit, tmp_path / "same")
    tracker.set_alias(name, CHAMPION, same)
    reference = champion_reference(ctx, loaded)
    assert reference is not None and reference.version == same
    older = _register_random_policy(tmp_tracking, "credit_approval", credit, tmp_path, extra_features=3)
    tracker.set_alias(name, CHAMPION, older)
    assert champion_reference(ctx, loaded) is None
