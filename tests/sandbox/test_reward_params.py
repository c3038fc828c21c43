"""``PARAMS`` of a reward module: each names a number constant of the module, with a range that
holds its value and a rule of rules.yaml; anything else fails the load at the PARAMS line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack
from rlops.sandbox.reward_params import numeric_constants

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


def test_the_credit_pack_declares_its_cap_and_costs() -> None:
    fn = load_pack(CREDIT, check_liveness=False).reward_fn("v1")
    got = {p.name: (p.value, p.low, p.high, p.rule_ref) for p in fn.params}
    assert got["LOW_SCORE_CAP_MULTIPLE"] == (3.0, 1.0, 5.0, "CREDIT_POLICY_v2.1_3.4")
    assert got["DEFAULT_LOSS"] == (2.5, 0.5, 10.0, "RISK_v1.3_5.2")


def test_numeric_constants_are_top_level_number_assignments() -> None:
    src = "A = 1\nB = -2.5\nC, D = 1, 2\nE = 'x'\nF = A\ndef f():\n    G = 3\n"
    assert {k: v for k, (v, _) in numeric_constants(src).items()} == {"A": 1.0, "B": -2.5}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ('{"NOPE": {"range": [0, 1]}}', "'NOPE' is not a module-level constant"),
        ('{"HUMAN_COST": {"range": [1, 2]}}', r"value 0.3 lies outside its declared range \[1, 2\]"),
        ('{"HUMAN_COST": {"range": [2, 1]}}', "low <= high"),
        ('{"HUMAN_COST": {"range": [0, float("nan")]}}', "two finite numbers"),
        ('{"HUMAN_COST": {"range": [0, 1], "rule_ref": "X_1"}}', "dangling rule ref 'X_1'"),
        ('{"HUMAN_COST": {"range": [0, 1], "step": 0.1}}', "expected {'range'"),
        ("[1, 2]", "expected a mapping"),
    ],
)
def test_a_bad_declaration_fails_the_load(tmp_path: Path, params: str, message: str) -> None:
    dst = tmp_path / "credit_approval"
    shutil.copytree(CREDIT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    text = (dst / "reward_v1.py").read_text()
    start = text.index("PARAMS = {")
    end = text.index("\n}\n", start) + 3
    (dst / "reward_v1.py").write_text(text[:start] + f"PARAMS = {params}\n" + text[end:])
    with pytest.raises(PackError, match=message) as err:
        load_pack(dst, check_liveness=False)
    assert "reward_v1.py:" in str(err.value)
