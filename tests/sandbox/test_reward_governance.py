"""Reward governance: rules.yaml constraints are compiled with the whitelist expression compiler and
checked on the stress test's edge states; the credit pack's reward_v0 (cap ×5 for everyone) fails on
the ×3 rule, reward_v1 passes; a bad constraint fails the pack load at its line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.stress.report import report_dict
from rlops.pipeline_steps.stress.step import StressConfig, stress_reward_fn
from rlops.sandbox.constraints import parse_constraints, transition_matrix
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import Pack, load_pack

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"
FAST = StressConfig(edge_states=1024, gaming_episodes=400)
X3 = "decision.approved_amount <= user_profile.income_monthly * 3 when user_profile.credit_score < 550"


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(CREDIT, check_liveness=False)


def test_credit_pack_states_the_amount_cap_as_constraints(credit: Pack) -> None:
    cons = parse_constraints(credit.rules, credit.scenario, "rules.yaml")
    assert [(c.rule, c.source) for c in cons][-1] == ("CREDIT_POLICY_v2.1_3.4", X3)
    assert all(c.line is not None for c in cons)


def test_constraint_reads_after_before_and_action(credit: Pack) -> None:
    rules = {
        "R": {
            "title": "t",
            "constraints": [
                {"check": "decision.approved_amount <= before.application.loan_amount", "actions": ["approve"]},
                "decision.approved_amount == 0 when action == 'reject'",
            ],
        }
    }
    c1, c2 = parse_constraints(rules, credit.scenario, "rules.yaml")
    cols = credit.scenario.columns
    S = torch.zeros((3, credit.scenario.n_cols))
    S[:, cols["application.loan_amount"]] = 100.0
    nxt = S.clone()
    nxt[:, cols["decision.approved_amount"]] = torch.tensor([50.0, 150.0, 150.0])
    approve, reject = credit.scenario.action_names.index("approve"), credit.scenario.action_names.index("reject")
    X = transition_matrix(S, nxt, torch.tensor([approve, approve, reject]))
    assert c1.violated(X, credit.scenario.action_names).tolist() == [False, True, False]
    assert c2.violated(X, credit.scenario.action_names).tolist() == [False, False, True]


def test_reward_v0_fails_naming_the_x3_rule(credit: Pack) -> None:
    res = stress_reward_fn(credit, credit.reward_fn("v0"), FAST, probes=False)
    assert not res.passed
    bad = [f for f in res.findings if f.check == "rule_violation_rewarded"]
    assert bad and all("CREDIT_POLICY_v2.1_3.4" in f.message and X3 in f.message for f in bad)
    assert {f.component for f in bad} == {"amount_cap"} and {f.action for f in bad} == {"approve"}
    verdict = {c.constraint: c.passed for c in res.constraints}
    assert verdict[X3] is False and verdict["decision.approved_amount <= user_profile.income_monthly * 5"]
    report = report_dict(res, None, {"scenario": "credit_approval"})
    assert report["verdict"] == "fail" and any("CREDIT_POLICY_v2.1_3.4" in r for r in report["reasons"])


def test_reward_v1_satisfies_every_constraint(credit: Pack) -> None:
    res = stress_reward_fn(credit, credit.reward_fn("v1"), FAST, probes=False)
    assert res.passed, [f.message for f in res.findings]
    assert res.constraints and all(c.passed and c.violations > 0 and c.judged >= 1000 for c in res.constraints)


@pytest.mark.parametrize(
    "constraint, expected",
    [
        ("decision.approved_amount <= __import__('os').getpid()", "illegal constraint"),
        ("decision.no_such_field <= 3", "unknown field 'decision.no_such_field'"),
        ("decision.approved_amount * 3", "type mismatch"),
    ],
)
def test_bad_constraint_fails_the_load_at_its_line(tmp_path: Path, constraint: str, expected: str) -> None:
    dst = tmp_path / "credit_approval"
    shutil.copytree(CREDIT, dst)
    text = (
        (dst / "rules.yaml")
        .read_text()
        .replace('      - "decision.approved_amount <= user_profile.income_monthly * 5"', f'      - "{constraint}"')
    )
    (dst / "rules.yaml").write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if constraint in s)
    with pytest.raises(PackError) as exc:
        load_pack(dst, check_liveness=False)
    assert exc.value.line == line and expected in str(exc.value)
    assert "rules.CREDIT_POLICY_v2.1_3.4.constraints[0]" in str(exc.value)
