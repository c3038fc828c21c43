"""Signal-driven reward weights: the declaration, the weight a value gives, and what is refused."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack
from rlops.sandbox.reward_loading import load_reward_fn
from rlops.sandbox.reward_signals import SignalWeight

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


@pytest.fixture(scope="module")
def credit():  # type: ignore[no-untyped-def]
    return load_pack(CREDIT, check_liveness=False)


def test_the_weight_is_linear_between_the_ends() -> None:
    sw = SignalWeight("compliance", "complaint_index", 0.0, 1.0, 1.0, 1.77, 0.0)
    assert (sw.weight(0.0), sw.weight(1.0)) == (1.0, 1.77)
    assert sw.weight(0.5) == pytest.approx(1.385)
    assert sw.refusal(0.5) is None
    assert "outside the declared range [0, 1]" in str(sw.refusal(1.2))
    assert "not a finite number" in str(sw.refusal(math.nan))
    assert "missing" in str(sw.refusal(None))


def test_credit_pack_follows_the_complaint_index_and_is_unchanged_without_it(credit) -> None:  # type: ignore[no-untyped-def]
    fn = credit.reward_fn("v1")
    assert [(s.objective, s.signal) for s in fn.signal_weights] == [("compliance", "complaint_index")]
    # no value set: the module's WEIGHTS, as before the signal existed
    assert fn.weights_at(0) == {"compliance": 1.0, "risk": 1.0, "service": 1.0, "efficiency": 1.0}
    assert fn.signals_in_force == {"complaint_index": 0.0}
    credit.signals = {"complaint_index": 1.0}
    try:
        bound = credit.reward_fn("v1")
        assert bound.weights_at(0)["compliance"] == pytest.approx(1.77)
        assert bound.weights_at(0)["risk"] == 1.0 and bound.version == fn.version  # same source, same sha256
        with pytest.raises(ValueError, match="outside the declared range"):
            fn.with_signals({"complaint_index": 2.0})
    finally:
        credit.signals = {}


def _module(tmp_path: Path, declaration: str, weights: str = '{"compliance": 1.0}', extra: str = "") -> Path:
    pack = tmp_path / "pack"
    shutil.copytree(CREDIT, pack)
    f = pack / "reward_v9.py"
    f.write_text(
        "from rlops.sandbox.reward import component, rule_ref\n"
        f"WEIGHTS = {weights}\n"
        f"{extra}"
        f"SIGNAL_WEIGHTS = {declaration}\n"
        '@component(objective="compliance", reason="r")\n'
        '@rule_ref("CREDIT_POLICY_v2.1_2.1")\n'
        "def c(t):\n    return 0.0\n"
    )
    return f


@pytest.mark.parametrize(
    ("declaration", "weights", "extra", "message"),
    [
        (
            '{"risk": {"signal": "x", "range": (0, 1), "weights": (1, 2)}}',
            '{"compliance": 1.0}',
            "",
            "unknown objective",
        ),
        ('{"compliance": {"signal": "x", "range": (1, 0), "weights": (1, 2)}}', "{}", "", "expected low < high"),
        ('{"compliance": {"signal": "X-1", "range": (0, 1), "weights": (1, 2)}}', "{}", "", "signal name"),
        ('{"compliance": {"signal": "x", "range": (0, 1), "weights": (1, 2), "baseline": 3}}', "{}", "", "baseline"),
        ('{"compliance": {"signal": "x", "range": (0, 1), "weights": (2, 3)}}', '{"compliance": 1.0}', "", "agree"),
        (
            '{"compliance": {"signal": "x", "range": (0, 1), "weights": (1, 2)}}',
            "{}",
            'WEIGHT_SCHEDULE = [(10, {"compliance": 2.0})]\n',
            "WEIGHT_SCHEDULE moves this objective",
        ),
        ('{"compliance": {"signal": "x", "weights": (1, 2)}}', "{}", "", "expected {'signal'"),
    ],
)
def test_a_bad_declaration_names_its_line(
    tmp_path: Path, declaration: str, weights: str, extra: str, message: str, credit
) -> None:  # type: ignore[no-untyped-def]
    f = _module(tmp_path, declaration, weights, extra)
    with pytest.raises(PackError, match=message) as err:
        load_reward_fn(f, credit.rules, credit.scenario.action_names)
    assert err.value.line == 3 + extra.count("\n")  # the SIGNAL_WEIGHTS line
