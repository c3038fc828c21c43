"""Pack KPIs: declared in scenario.yaml, compiled at load (a bad one is one clear error naming it),
evaluated on final states."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.kpis import compile_kpis, evaluate_kpis
from rlops.sandbox.pack import load_pack

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


def pack_with_kpis(tmp_path: Path, block: str) -> Path:
    dst = tmp_path / "credit_approval"
    shutil.copytree(CREDIT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    text = (dst / "scenario.yaml").read_text()
    (dst / "scenario.yaml").write_text(text[: text.index("\nkpis:")] + "\nkpis:\n" + block)
    return dst


@pytest.mark.parametrize(
    ("block", "message"),
    [
        ("  x: {expr: 'user_profile.salary > 1'}\n", r"unknown field.*at kpis\.x"),
        ("  x: {expr: 'decision.approval_result'}\n", r"a KPI is a number or a condition.*at kpis\.x"),
        ("  x: {expr: 'hidden.defaulted', when: 'user_profile.age'}\n", r"type mismatch.*at kpis\.x"),
        ("  x: {expr: 'hidden.defaulted', rule_ref: NOPE_1}\n", r"dangling rule ref 'NOPE_1'.*at kpis\.x\.rule_ref"),
        ("  x: {expr: 'hidden.defaulted', better: up}\n", r"expected 'higher' or 'lower'.*at kpis\.x\.better"),
        ("  x: {expr: 'hidden.defaulted', weight: 2}\n", r"unknown key 'weight'.*at kpis\.x\.weight"),
        ("  completion_rate: hidden.defaulted\n", "built-in KPI"),
        ("  Bad-Name: hidden.defaulted\n", "lower-case letters"),
        ("  x: {when: 'true'}\n", "missing required key 'expr'"),
    ],
)
def test_a_bad_kpi_fails_the_load_with_its_name_and_line(tmp_path: Path, block: str, message: str) -> None:
    with pytest.raises(PackError, match=message) as err:
        load_pack(pack_with_kpis(tmp_path, block), check_liveness=False)
    assert "scenario.yaml:" in str(err.value) and "\n" not in str(err.value)


def test_kpis_on_final_states_hand_checked() -> None:
    pack = load_pack(CREDIT, check_liveness=False)
    kpis = {k.name: k for k in compile_kpis(pack.scenario, pack.rules)}
    cols = pack.scenario.columns
    S = torch.zeros((3, pack.scenario.n_cols))
    results = pack.scenario.types["decision.approval_result"].values
    S[:, cols["decision.approval_result"]] = torch.tensor(
        [float(results.index(v)) for v in ("approved", "rejected", "approved_reduced")]
    )
    S[:, cols["hidden.defaulted"]] = torch.tensor([1.0, 1.0, 0.0])
    S[:, cols["user_profile.income_monthly"]] = 10_000.0
    S[:, cols["user_profile.credit_score"]] = torch.tensor([500.0, 700.0, 700.0])
    S[:, cols["decision.approved_amount"]] = torch.tensor([40_000.0, 0.0, 30_000.0])
    out = evaluate_kpis((kpis["approval_rate"], kpis["default_rate"], kpis["amount_cap_breach_rate"]), S)
    assert out["approval_rate"][0].tolist() == [1.0, 0.0, 1.0] and out["approval_rate"][1].all()
    values, counted = out["default_rate"]
    assert counted.tolist() == [True, False, True] and values[counted].tolist() == [1.0, 0.0]
    # 40,000 > 3 incomes below a score of 550: a breach; 30,000 <= 5 incomes from 550 on: none
    assert out["amount_cap_breach_rate"][0].tolist() == [1.0, 0.0, 0.0]
