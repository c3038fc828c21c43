"""The reward runtime: breakdown sums to the total (clip included), delayed settlement, the
repeated-action penalty, weight schedules, reward hooks, hot swap and versions, and the credit
pack's v0 bug (cap ×5 where the rule says ×3 below a credit score of 550) against its v1 fix."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import random_policy, rule_policy
from rlops.sandbox.reward_loading import load_reward_fn
from rlops.sandbox.reward_runtime import RewardError, render_breakdown
from rlops.sandbox.traces import rollout_traces

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"
COUNTER = REPO / "tests" / "data" / "packs" / "counter"

HEADER = """import torch

from rlops.sandbox.reward import component, rule_ref

"""
PROGRESS = """
@component(objective="progress", reason="the counter went up")
@rule_ref("R_PROGRESS")
def progress(t):
    return t.ns.counter - t.s.counter
"""
COST = """
@component(objective="cost", reason="step cost")
@rule_ref("R_COST")
def step_cost(t):
    return torch.full_like(t.latency_ms, -0.1)
"""


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


def counter_pack(tmp_path: Path, reward_src: str, name: str = "counter", probe: bool = False) -> Pack:
    """A copy of the counter pack whose ``reward_v1.py`` is ``reward_src`` (probed on edge
    states, as validation does, with ``probe``)."""
    dst = tmp_path / name
    shutil.copytree(COUNTER, dst)
    (dst / "reward_v1.py").write_text(HEADER + reward_src)
    return load_pack(dst, check_liveness=False, probe_rewards=probe)


def act(pack: Pack, name: str, n: int = 1) -> torch.Tensor:
    return torch.full((n,), pack.scenario.action_names.index(name), dtype=torch.long)


def entry(env: BatchedEnv, info, name: str) -> torch.Tensor:
    return info.reward_breakdown[:, env.reward.names.index(name)]


# ------------------------------------------------------------------------------- breakdown
@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_breakdown_sums_to_total_over_many_steps(credit: Pack, profile: str) -> None:
    env = credit.make_env(256, profile=profile, seed=3, illegal_action="noop")
    policy = random_policy(seed=1)
    names = env.reward.names
    assert names[-1] == "clip" and "repeat_penalty" in names
    assert len(env.reward.rule_refs) == len(names) == len(env.reward.reasons)
    for _ in range(25):
        _, reward, _, _, info = env.step(policy(env))
        assert info.reward_breakdown.shape == (256, len(names))
        assert torch.allclose(info.reward_breakdown.sum(dim=1), reward, atol=1e-5)
        assert torch.isfinite(reward).all()
        assert (reward.abs() <= 5.0 + 1e-6).all(), "CLIP = 5.0"


def test_clip_is_its_own_entry(tmp_path: Path) -> None:
    pack = counter_pack(tmp_path, "CLIP = 0.5\n" + PROGRESS + COST)
    env = pack.make_env(2)
    _, reward, _, _, info = env.step(act(pack, "bump", 2))
    # raw: progress 1 + cost -0.1 = 0.9, clipped to 0.5: the clip entry is -0.4.
    assert torch.allclose(reward, torch.full((2,), 0.5))
    assert torch.allclose(entry(env, info, "clip"), torch.full((2,), -0.4))
    assert torch.allclose(info.reward_breakdown.sum(dim=1), reward)
    _, reward, _, _, info = env.step(act(pack, "wait", 2))
    assert torch.allclose(reward, torch.full((2,), -0.1))
    assert (entry(env, info, "clip") == 0).all()


def test_render_breakdown_lists_non_zero_components(credit: Pack) -> None:
    env = credit.make_env(1, seed=0)
    _, reward, _, _, info = env.step(act(credit, "escalate_to_human"))
    doc = render_breakdown(
        float(reward[0]), info.reward_breakdown[0].tolist(), env.reward.names, env.reward.reasons, env.reward.rule_refs
    )
    assert set(doc) == {"total", "breakdown"}
    comps = {b["component"]: b for b in doc["breakdown"]}
    assert set(comps) == {"handling_time", "human_cost"}
    assert comps["human_cost"] == {
        "component": "human_cost",
        "score": -0.3,
        "reason": "case handed to a human underwriter",
        "rule_ref": "OPS_v2.0_2.2",
    }
    assert doc["total"] == pytest.approx(sum(b["score"] for b in doc["breakdown"]), abs=1e-5)


# ------------------------------------------------------------------------------- settlement
def test_delayed_settlement_pays_on_notification(credit: Pack) -> None:
    n = 256
    env = credit.make_env(n, seed=77)
    c = credit.scenario.columns
    for name in ("initiate_fraud_check", "fetch_credit_report"):
        env.step(act(credit, name, n))
    S = env.S.clone()
    _, _, _, _, info = env.step(act(credit, "approve", n))
    assert (entry(env, info, "loan_outcome") == 0).all(), "held back until the applicant is notified"
    defaulted = env.S[:, c["hidden.defaulted"]] > 0.5
    fraud = S[:, c["hidden.is_fraud"]] > 0.5
    expected = torch.where(fraud, -4.0, torch.where(defaulted, -2.5, 1.0))  # approved share is 1
    assert torch.allclose(
        env.reward.pending[:, [cc.name for cc in env.reward_fn.components].index("loan_outcome")], expected
    )
    _, reward, term, _, info = env.step(act(credit, "send_notification", n))
    assert bool(term.all())
    assert torch.allclose(entry(env, info, "loan_outcome"), expected)
    assert bool((expected == -2.5).any()) and bool((expected == 1.0).any())
    assert (env.reward.pending == 0).all()


def test_settlement_pays_at_episode_end_without_the_action(tmp_path: Path) -> None:
    src = PROGRESS.replace('reason="the counter went up"', 'reason="paid on finish", settle_on="finish"')
    pack = counter_pack(tmp_path, src + COST)
    env = pack.make_env(1)
    bumps = []
    for _ in range(pack.scenario.spec.horizon):
        _, _, term, trunc, info = env.step(act(pack, "bump"))
        bumps.append(float(entry(env, info, "progress")[0]))
    assert bool(trunc[0]) and not bool(term[0])
    assert bumps == [0.0] * 5 + [6.0], "accrued and paid when the episode is truncated"
    env.step(act(pack, "bump"))
    _, _, term, _, info = env.step(act(pack, "finish"))
    assert bool(term[0]) and float(entry(env, info, "progress")[0]) == 1.0


# ------------------------------------------------------------------------------- repeat penalty
def test_repeat_penalty(tmp_path: Path) -> None:
    pack = counter_pack(
        tmp_path, 'REPEAT_PENALTY = {"penalty": 0.2, "after": 2, "rule_ref": "R_REPEAT"}\n' + PROGRESS + COST
    )
    env = pack.make_env(1)
    penalties = []
    for name in ("wait", "wait", "wait", "wait", "bump", "wait"):
        _, reward, _, _, info = env.step(act(pack, name))
        penalties.append(round(float(entry(env, info, "repeat_penalty")[0]), 6))
        assert torch.allclose(info.reward_breakdown.sum(dim=1), reward)
    # repeat counts 0, 1, 2, 3, 0, 0: the third and fourth wait in a row are penalised.
    assert penalties == [0.0, 0.0, -0.2, -0.2, 0.0, 0.0]
    assert env.reward.rule_refs[env.reward.names.index("repeat_penalty")] == "R_REPEAT"
    assert "R_REPEAT" in env.reward_fn.rule_refs


def test_no_repeat_penalty_without_the_setting(tmp_path: Path) -> None:
    pack = counter_pack(tmp_path, PROGRESS + COST)
    env = pack.make_env(1)
    for _ in range(4):
        _, _, _, _, info = env.step(act(pack, "wait"))
        assert float(entry(env, info, "repeat_penalty")[0]) == 0.0


# ------------------------------------------------------------------------------- weights
def test_weights_and_schedule_switch_at_the_step(tmp_path: Path) -> None:
    src = 'WEIGHTS = {"progress": 2.0}\nWEIGHT_SCHEDULE = [(12, {"progress": 5.0, "cost": 0.0})]\n' + PROGRESS + COST
    pack = counter_pack(tmp_path, src)
    fn = pack.reward_fn()
    assert fn.weights == {"progress": 2.0, "cost": 1.0}
    assert fn.weights_at(11) == {"progress": 2.0, "cost": 1.0}
    assert fn.weights_at(12) == {"progress": 5.0, "cost": 0.0}
    env = pack.make_env(4)  # global step counts env steps: 0, 4, 8, 12, ...
    seen = []
    for _ in range(5):
        _, reward, _, _, info = env.step(act(pack, "bump", 4))
        seen.append(
            (round(float(entry(env, info, "progress")[0]), 6), round(float(entry(env, info, "step_cost")[0]), 6))
        )
    assert seen == [(2.0, -0.1)] * 3 + [(5.0, 0.0)] * 2
    assert env.global_step == 20


def test_schedule_with_unknown_objective_is_rejected(tmp_path: Path) -> None:
    from rlops.sandbox.errors import PackError

    with pytest.raises(PackError, match=r"unknown objective\(s\) \['speed'\]"):
        counter_pack(tmp_path, 'WEIGHT_SCHEDULE = [(10, {"speed": 1.0})]\n' + PROGRESS)


# ------------------------------------------------------------------------------- hooks
def test_reward_hook_injects_its_own_entry(credit: Pack) -> None:
    env = credit.make_env(64, seed=8)
    c = credit.scenario.columns
    env.add_reward_hook("risk_model", lambda t: t.s.user_profile.debt_ratio, weight=-0.5, rule_ref="RISK_v1.3_5.2")
    names = env.reward.names
    assert "hook:risk_model" in names and names[-1] == "clip"
    assert env.reward.rule_refs[names.index("hook:risk_model")] == "RISK_v1.3_5.2"
    debt = env.S[:, c["user_profile.debt_ratio"]].clone()
    _, reward, _, _, info = env.step(act(credit, "initiate_fraud_check", 64))
    assert torch.allclose(entry(env, info, "hook:risk_model"), -0.5 * debt)
    assert torch.allclose(info.reward_breakdown.sum(dim=1), reward, atol=1e-6)
    # Without the hook the total differs by exactly the hook's score.
    plain = credit.make_env(64, seed=8)
    _, reward_plain, _, _, _ = plain.step(act(credit, "initiate_fraud_check", 64))
    assert torch.allclose(reward - reward_plain, -0.5 * debt, atol=1e-6)


# ------------------------------------------------------------------------------- versions and swap
def test_version_is_the_sha256_of_the_source(credit: Pack) -> None:
    for label in ("v0", "v1"):
        fn = credit.reward_fn(label)
        src = (CREDIT / f"reward_{label}.py").read_text()
        assert fn.version == hashlib.sha256(src.encode()).hexdigest()
        assert fn.label == label
        assert fn.rule_refs == sorted(set(fn.rule_refs)) and "OPS_v2.0_2.3" in fn.rule_refs
        assert all(ref in credit.rules for ref in fn.rule_refs)
    assert credit.reward_fn("v0").version != credit.reward_fn("v1").version
    with pytest.raises(KeyError, match="no reward function 'v7'"):
        credit.reward_fn("v7")


def test_hot_swap_changes_version_and_rewards(credit: Pack) -> None:
    env = credit.make_env(8, seed=1, reward_fn="v1")
    assert env.reward_fn.version == credit.reward_fn("v1").version
    env.step(act(credit, "initiate_fraud_check", 8))
    env.set_reward_fn(credit.reward_fn("v0"))
    assert env.reward_fn.version == credit.reward_fn("v0").version
    assert env.reward_fn.label == "v0"
    _, reward, _, _, info = env.step(act(credit, "fetch_credit_report", 8))
    assert torch.allclose(info.reward_breakdown.sum(dim=1), reward)


def _approve_everything(credit: Pack, version: str, n: int, seed: int):
    """Fraud check, credit report, approve the full amount, notify: per-step S, breakdown, reward."""
    env = BatchedEnv(credit.scenario, credit.reward_fn(version), n)
    env.reset(seed)
    out = []
    for name in ("initiate_fraud_check", "fetch_credit_report", "approve", "send_notification"):
        S = env.S.clone()
        _, reward, _, _, info = env.step(act(credit, name, n))
        out.append((name, S, info.reward_breakdown.clone(), reward.clone()))
    return env, out


def test_v0_and_v1_differ_exactly_on_the_low_score_cap(credit: Pack) -> None:
    n = 2000
    env0, run0 = _approve_everything(credit, "v0", n, seed=500)
    env1, run1 = _approve_everything(credit, "v1", n, seed=500)
    names = env1.reward.names
    assert names == env0.reward.names
    j_cap = names.index("amount_cap")
    c = credit.scenario.columns
    for (name, S0, b0, r0), (_, S1, b1, r1) in zip(run0, run1):
        assert torch.equal(S0, S1), "the reward never changes the dynamics"
        others = [j for j in range(len(names)) if j not in (j_cap, len(names) - 1)]
        assert torch.equal(b0[:, others], b1[:, others])
        if name != "approve":
            assert torch.equal(b0, b1) and torch.equal(r0, r1)
            continue
        score, income = S1[:, c["user_profile.credit_score"]], S1[:, c["user_profile.income_monthly"]]
        amount = S1[:, c["application.loan_amount"]]
        # The bug's footprint: a low score and an amount between 3 and 5 monthly incomes.
        case = (score < 550) & (amount > income * 3.0) & (amount <= income * 5.0)
        differ = b0[:, j_cap] != b1[:, j_cap]
        assert torch.equal(differ, case)
        assert int(case.sum()) >= 30, "the sample holds enough bug cases"
        assert torch.allclose(b0[case, j_cap], torch.full((int(case.sum()),), 0.3))
        assert torch.allclose(b1[case, j_cap], torch.full((int(case.sum()),), -0.4))
        assert torch.allclose((r0 - r1)[case], torch.full((int(case.sum()),), 0.7), atol=1e-5)
        assert torch.equal(r0[~case], r1[~case])


def test_v1_caps_at_three_incomes_below_550(credit: Pack) -> None:
    n = 2000
    env, run = _approve_everything(credit, "v1", n, seed=9)
    name, S, b, _ = run[2]
    c = credit.scenario.columns
    cap = b[:, env.reward.names.index("amount_cap")]
    score, income = S[:, c["user_profile.credit_score"]], S[:, c["user_profile.income_monthly"]]
    amount = S[:, c["application.loan_amount"]]
    mult = torch.where(score < 550, 3.0, 5.0)
    assert torch.equal(cap == 0.3, amount <= income * mult)
    assert bool((cap == -0.4).any())


# ------------------------------------------------------------------------------- authoring errors at run time
def broken_swap(tmp_path: Path, src: str) -> tuple[Pack, BatchedEnv]:
    """A valid counter pack with an environment whose reward is swapped for the module ``src``
    (validation would refuse such a module: the runtime's own checks are reached this way)."""
    pack = counter_pack(tmp_path, PROGRESS)
    (tmp_path / "reward_v9.py").write_text(HEADER + src)
    fn = load_reward_fn(tmp_path / "reward_v9.py", pack.rules, pack.scenario.action_names)
    env = pack.make_env(2)
    env.set_reward_fn(fn)
    return pack, env


def test_component_with_a_wrong_shape_is_reported(tmp_path: Path) -> None:
    src = (
        PROGRESS
        + '''
@component(objective="cost")
@rule_ref("R_COST")
def broken(t):
    """wrong shape"""
    return torch.zeros(3, 2)
'''
    )
    with pytest.raises(PackError, match=r"reward component returned shape \(3, 2\), expected one score per episode"):
        counter_pack(tmp_path / "load", src, probe=True)
    pack, env = broken_swap(tmp_path, src)
    with pytest.raises(RewardError, match=r"reward component 'broken' returned shape \(3, 2\), expected \(2,\)"):
        env.step(act(pack, "wait", 2))


def test_component_that_raises_is_reported_with_its_line(tmp_path: Path) -> None:
    src = (
        PROGRESS
        + """
@component(objective="cost")
@rule_ref("R_COST")
def typo(t):
    return t.ns.countr
"""
    )
    with pytest.raises(
        PackError,
        match=r"reward_v1\.py:\d+: reward component raised AttributeError: "
        r"unknown state field 'countr'.* at typo",
    ):
        counter_pack(tmp_path / "load", src, probe=True)
    pack, env = broken_swap(tmp_path, src)
    with pytest.raises(
        RewardError,
        match=r"reward_v9\.py:\d+: reward component 'typo' raised AttributeError: "
        r"unknown state field 'countr'",
    ):
        env.step(act(pack, "wait", 2))


def test_component_returning_nan_is_refused(tmp_path: Path) -> None:
    src = (
        PROGRESS
        + """
@component(objective="cost")
@rule_ref("R_COST")
def ratio(t):
    return t.ns.counter / t.s.counter
"""
    )
    with pytest.raises(
        PackError,
        match=r"reward component returned nan for an illegal action on a sampled "
        r"initial state \(scores must be finite\) at ratio",
    ):
        counter_pack(tmp_path / "load", src, probe=True)
    pack = counter_pack(tmp_path / "plain", src)
    with pytest.raises(RewardError, match=r"reward entry 'ratio' is not a finite number .* no trace rows"):
        rollout_traces(pack, rule_policy, 4)


def test_scalar_component_broadcasts_and_reason_defaults_to_docstring(tmp_path: Path) -> None:
    src = '''
@component(objective="cost")
@rule_ref("R_COST")
def flat(t):
    """Flat fee per step.

    Longer text that is not shown."""
    return -0.25
'''
    pack = counter_pack(tmp_path, src)
    env = pack.make_env(3)
    _, reward, _, _, info = env.step(act(pack, "wait", 3))
    assert torch.allclose(reward, torch.full((3,), -0.25))
    assert env.reward.reasons[0] == "Flat fee per step."


def test_transition_view_of_enums_and_actions(credit: Pack) -> None:
    env = credit.make_env(16, seed=2)
    seen = {}

    def hook(t):
        seen["pending"] = t.s.decision.approval_result == "pending"
        seen["action"] = t.action.isin(["initiate_fraud_check"])
        seen["by_path"] = t.ns["system_status.fraud_check_done"]
        with pytest.raises(KeyError, match="'maybe' is not a value of decision.approval_result"):
            _ = t.s.decision.approval_result == "maybe"
        return torch.zeros(16)

    env.add_reward_hook("probe", hook)
    env.step(act(credit, "initiate_fraud_check", 16))
    assert bool(seen["pending"].all()) and bool(seen["action"].all()) and bool(seen["by_path"].all())


def test_rule_policy_return_is_positive_on_average(credit: Pack) -> None:
    # A sanity anchor for the reward scale: the pack's own rule engine earns money on average.
    env = credit.make_env(1000, seed=0)
    total = torch.zeros(1000)
    for _ in range(4):
        _, reward, _, _, _ = env.step(rule_policy(env))
        total += reward
    assert float(total.mean()) > 0
