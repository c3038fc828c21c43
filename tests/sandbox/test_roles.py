"""Multi-agent scenarios (``roles:``): role parsing and its errors (file, line, path; exit 2 from
``rlops env validate``), masks per acting role, role-owned reward components that score only their
role's steps, and the team / per-role split of a hand-checked episode of the loan-desk pack."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.cli import main
from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack
from rlops.sandbox.reward_loading import load_reward_fn

REPO = REPO_ROOT
DESK = REPO / "scenarios" / "loan_desk"
CREDIT = REPO / "scenarios" / "credit_approval"
S, V1 = "scenario.yaml", "reward_v1.py"
SCREENER = "  - name: screener"
UNDERWRITER = "  - name: underwriter"


@pytest.fixture(scope="module")
def pack() -> Any:
    return load_pack(DESK)


def _copy(tmp_path: Path, src: Path = DESK) -> Path:
    dst = tmp_path / src.name  # a pack given by path is named by its folder
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def _edit(file: str, old: str, new: str) -> Callable[[Path], None]:
    def mutate(pack: Path) -> None:
        text = (pack / file).read_text()
        assert old in text, old
        (pack / file).write_text(text.replace(old, new, 1))

    return mutate


# ------------------------------------------------------------------------------------ parsing
def test_roles_are_parsed_in_order_and_own_every_action(pack: Any) -> None:
    scn = pack.scenario
    assert scn.role_names == ("screener", "underwriter")
    owner = dict(zip(scn.action_names, scn.action_roles))
    assert owner == {
        "request_documents": 0,
        "pass_to_underwriting": 0,
        "reject_application": 0,
        "approve": 1,
        "approve_reduced": 1,
        "decline": 1,
    }
    assert scn.layout.action_roles == scn.action_roles and scn.layout.role_names == scn.role_names
    roles = {c.name: c.role for c in pack.reward_fn("v1").components}
    assert roles == {
        "loan_margin": None,
        "handling_time": None,
        "incomplete_file": "screener",
        "document_request": "screener",
        "affordability_cap": "underwriter",
    }


def test_a_pack_without_roles_has_none(pack: Any) -> None:
    credit = load_pack(CREDIT, check_liveness=False)
    assert credit.scenario.role_names == () and credit.scenario.action_roles == ()
    assert credit.scenario.layout.action_roles == ()
    env = credit.make_env(8)
    assert env.acting_role().tolist() == [0] * 8


@dataclass
class Case:
    id: str
    mutate: Callable[[Path], None]
    file: str
    expect: tuple[str, ...]
    path: str
    line_of: str | None  # the error's line: the first line holding this text


CASES = [
    Case(
        "roles_not_a_list",
        lambda p: (p / S).write_text(
            re.sub(r"roles:\n.*?\n\n", "roles: screener\n\n", (p / S).read_text(), count=1, flags=re.S)
        ),
        S,
        ("expected a list of at least two roles",),
        "roles",
        "roles: screener",
    ),
    Case(
        "one_role",
        _edit(
            S,
            "    acts_when: \"application.stage == 'intake'\"\n  - name: underwriter\n"
            "    description: decides on the loan once the file is in underwriting\n"
            "    actions: [approve, approve_reduced, decline]\n",
            "",
        ),
        S,
        ("expected a list of at least two roles", "got 1 role(s)"),
        "roles",
        "roles:",
    ),
    Case(
        "undefined_action",
        _edit(S, "actions: [approve, approve_reduced, decline]", "actions: [approve, aprove_reduced, decline]"),
        S,
        ("undefined action 'aprove_reduced'",),
        "roles.underwriter.actions",
        "aprove_reduced, decline]",
    ),
    Case(
        "action_in_two_roles",
        _edit(
            S,
            "actions: [approve, approve_reduced, decline]",
            "actions: [approve, approve_reduced, decline, reject_application]",
        ),
        S,
        ("action 'reject_application' already belongs to role 'screener'",),
        "roles.underwriter.actions",
        "decline, reject_application]",
    ),
    Case(
        "action_in_no_role",
        _edit(S, "actions: [approve, approve_reduced, decline]", "actions: [approve, decline]"),
        S,
        ("action(s) ['approve_reduced'] belong to no role",),
        "roles",
        "roles:",
    ),
    Case(
        "acts_when_missing_before_the_last",
        _edit(S, "    acts_when: \"application.stage == 'intake'\"\n", ""),
        S,
        ("only the last role may leave out 'acts_when'",),
        "roles.screener.acts_when",
        SCREENER,
    ),
    Case(
        "acts_when_unknown_field",
        _edit(S, "acts_when: \"application.stage == 'intake'\"", "acts_when: \"application.phase == 'intake'\""),
        S,
        ("illegal expression", "unknown field 'application.phase'"),
        "roles.screener.acts_when",
        SCREENER,
    ),
    Case(
        "acts_when_not_a_condition",
        _edit(S, "acts_when: \"application.stage == 'intake'\"", 'acts_when: "application.document_requests + 1"'),
        S,
        ("type mismatch: expected bool, got number",),
        "roles.screener.acts_when",
        SCREENER,
    ),
    Case(
        "acts_when_a_list",
        _edit(S, "acts_when: \"application.stage == 'intake'\"", "acts_when: [intake]"),
        S,
        ("acts_when expects a condition", "got a list"),
        "roles.screener.acts_when",
        "acts_when: [intake]",
    ),
    Case(
        "duplicate_role",
        _edit(S, "  - name: underwriter", "  - name: screener"),
        S,
        ("duplicate role 'screener'",),
        "roles.screener",
        "  - name: screener\n    description: decides",
    ),
    Case(
        "role_named_team",
        _edit(S, "  - name: underwriter", "  - name: team"),
        S,
        ("an identifier other than 'team'",),
        "roles[1]",
        "  - name: team",
    ),
    Case(
        "unknown_role_key",
        _edit(S, "    description: checks the file at intake", "    descripton: checks the file at intake"),
        S,
        ("unknown key 'descripton'",),
        "roles[0].descripton",
        "descripton:",
    ),
    Case(
        "component_names_an_unknown_role",
        _edit(V1, 'role="underwriter")', 'role="underwritter")'),
        V1,
        ("names role 'underwritter'", "roles are ['screener', 'underwriter']"),
        "affordability_cap",
        '@component(objective="compliance", reason="approved over',
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_a_malformed_roles_block_is_one_error_with_file_line_and_path(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pack = _copy(tmp_path)
    case.mutate(pack)
    text = (pack / case.file).read_text()
    line = None if case.line_of is None else text.count("\n", 0, text.index(case.line_of)) + 1
    with pytest.raises(PackError) as info:
        load_pack(pack)
    err = info.value
    assert (err.file, err.line, err.path) == (str(pack / case.file), line, case.path), err.message
    for want in case.expect:
        assert want in err.message
    capsys.readouterr()
    assert main(["env", "validate", "--scenario", str(pack)]) == 2
    out, stderr = capsys.readouterr()
    assert out == "" and "Traceback" not in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert stderr.startswith(f"error: {pack / case.file}:{line}: ")


def test_a_role_component_in_a_pack_without_roles_is_an_error(tmp_path: Path) -> None:
    credit = load_pack(CREDIT, check_liveness=False)
    src = (
        (CREDIT / "reward_v1.py")
        .read_text()
        .replace('@component(objective="compliance"', '@component(role="underwriter", objective="compliance"', 1)
    )
    (tmp_path / "reward_v9.py").write_text(src)
    with pytest.raises(PackError, match="the scenario declares no roles: block"):
        load_reward_fn(tmp_path / "reward_v9.py", credit.rules, credit.scenario.action_names)


# ------------------------------------------------------------------------------------ masks
def test_only_the_acting_roles_actions_are_legal(pack: Any) -> None:
    env = pack.make_env(512, seed=7)
    owner = torch.tensor(pack.scenario.action_roles)
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(pack.scenario.spec.horizon):
        role, masks = env.acting_role(), env.action_masks()
        assert bool(masks.any(dim=1).all())
        legal_roles = torch.where(masks, owner.expand_as(masks), role.unsqueeze(1))
        assert bool((legal_roles == role.unsqueeze(1)).all()), "an action of another role is legal"
        intake = env.S[:, env.scenario.columns["application.stage"]] == 0
        assert torch.equal(role == 0, intake)
        seen |= set(role.tolist())
        actions = torch.multinomial(masks.float(), 1, generator=gen).squeeze(1)
        _, _, _, _, info = env.step(actions)
        assert torch.equal(info.role, role), "info.role is the role that took the step"
    assert seen == {0, 1}


# ------------------------------------------------------------------------------------ rewards
def _set(env: Any, rows: list[dict[str, float]]) -> None:
    """Put each episode of ``env`` in a hand-written state (all other fields as sampled)."""
    sd = env.state_dict()
    for i, row in enumerate(rows):
        for path, value in row.items():
            sd["S"][i, env.scenario.columns[path]] = value
    env.load_state_dict(sd)


def _step(env: Any, names: list[str]) -> tuple[torch.Tensor, dict[str, torch.Tensor], torch.Tensor]:
    a = torch.tensor([env.action_names.index(n) for n in names])
    _, reward, _, _, info = env.step(a)
    return reward, env.reward.by_role(info.reward_breakdown), info.reward_breakdown


def _p_default(score: float, amount: float, income: float) -> float:
    return 1 / (1 + math.exp(-((600 - score) / 40 + 0.5 * (amount / income - 4))))


def test_a_hand_checked_episode_splits_into_team_and_role_parts(pack: Any) -> None:
    env = pack.make_env(2, seed=0)
    base = {"applicant.income_monthly": 10_000.0, "application.document_requests": 0, "application.stage": 0}
    _set(
        env,
        [
            {
                **base,
                "applicant.credit_score": 700,
                "applicant.requested_amount": 30_000,
                "applicant.documents_complete": 0,
            },
            {
                **base,
                "applicant.credit_score": 560,
                "applicant.requested_amount": 50_000,
                "applicant.documents_complete": 1,
            },
        ],
    )
    # Step 1, the screener passes both files on: the first is incomplete (its own rule, -0.5).
    reward, parts, _ = _step(env, ["pass_to_underwriting", "pass_to_underwriting"])
    assert parts["team"].tolist() == pytest.approx([-0.02, -0.02])
    assert parts["screener"].tolist() == pytest.approx([-0.5, 0.0])
    assert parts["underwriter"].tolist() == [0.0, 0.0]
    assert reward.tolist() == pytest.approx([-0.52, -0.02])
    # Step 2, the underwriter: declines the incomplete file; approves 50,000 on an income of
    # 10,000 with a score of 560 (over the cap of three incomes: its own rule, -1.0).
    assert env.acting_role().tolist() == [1, 1]
    assert not bool(env.action_masks()[0, env.action_names.index("approve")])
    reward, parts, breakdown = _step(env, ["decline", "approve"])
    p = _p_default(560, 50_000, 10_000)
    margin = 5.0 * (0.4 * (1 - p) - 0.6 * p)  # 50,000 CNY = 5 units, margin 40%, loss 60%
    assert parts["team"].tolist() == pytest.approx([-0.02, margin - 0.02], abs=1e-5)
    assert parts["underwriter"].tolist() == pytest.approx([0.0, -1.0])
    assert parts["screener"].tolist() == [0.0, 0.0]
    assert reward.tolist() == pytest.approx([-0.02, margin - 1.02], abs=1e-5)
    total = sum(parts.values())
    assert torch.allclose(total, reward) and torch.allclose(breakdown.sum(dim=1), reward)


def test_a_role_component_scores_only_the_steps_of_its_role(tmp_path: Path) -> None:
    # Two components that score every transition alike, one for each role: each must show up
    # only on the steps its role takes.
    root = _copy(tmp_path)
    (root / "reward_v2.py").write_text(
        (root / V1).read_text().replace('VERSION_LABEL = "v1"', 'VERSION_LABEL = "v2"')
        + """

@component(objective="operations", reason="screener turn", role="screener")
@rule_ref("SCREENING_v1.0_3.2")
def screener_turn(t):
    return torch.full_like(t.latency_ms, -0.25)


@component(objective="operations", reason="underwriter turn", role="underwriter")
@rule_ref("SCREENING_v1.0_3.2")
def underwriter_turn(t):
    return torch.full_like(t.latency_ms, -0.125)
"""
    )
    pack = load_pack(root)
    env = pack.make_env(256, reward_fn="v2", seed=1)
    names = env.reward.names
    s_col, u_col = names.index("screener_turn"), names.index("underwriter_turn")
    gen = torch.Generator().manual_seed(1)
    for _ in range(4):
        actions = torch.multinomial(env.action_masks().float(), 1, generator=gen).squeeze(1)
        _, reward, _, _, info = env.step(actions)
        b = info.reward_breakdown
        assert torch.equal(b[:, s_col], torch.where(info.role == 0, -0.25, 0.0))
        assert torch.equal(b[:, u_col], torch.where(info.role == 1, -0.125, 0.0))
        parts = env.reward.by_role(b)
        assert torch.allclose(parts["team"] + parts["screener"] + parts["underwriter"], reward)


def test_validate_and_describe_show_the_roles(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "validate", "--scenario", str(DESK)]) == 0
    out = capsys.readouterr().out
    assert "role screener (3 actions), role underwriter (3 actions)" in out
    assert main(["env", "describe", "--scenario", str(DESK)]) == 0
    out = capsys.readouterr().out
    assert "role screener (acts when application.stage == 'intake'): request_documents" in out
    assert "role underwriter (acts when no role above acts): approve, approve_reduced, decline" in out
    assert "incomplete_file [screener]" in out and "loan_margin [team]" in out
