"""Roll-out segments: compiled by the whitelist compiler over fields an agent always sees and that
keep their value through an episode; anything else is one clear error."""

from __future__ import annotations

import numpy as np
import pytest

from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr_numpy import NUMPY_OPS
from rlops.sandbox.layout import StateLayout
from rlops.sandbox.segments import compile_segment, read_spec, segment_fields

SPEC = read_spec(REPO_ROOT / "scenarios" / "credit_approval")


def test_region_and_the_applicant_are_segment_fields_decisions_are_not() -> None:
    fields = segment_fields(SPEC)
    assert {"user_profile.region", "user_profile.age", "application.purpose"} <= fields
    # hidden until fetched (visible_when), set by an action's effects, never observed
    assert not fields & {"user_profile.credit_score", "decision.approval_result", "hidden.is_fraud"}


def test_a_segment_selects_rows_by_region() -> None:
    seg = compile_segment(SPEC, "user_profile.region in ['jiangsu', 'shanghai']", ops=NUMPY_OPS)
    layout = StateLayout.of(SPEC)
    regions = ["guangdong", "jiangsu", "zhejiang", "shanghai", "other"]
    S = np.zeros((5, len(layout.columns)), dtype=np.float32)
    S[:, layout.columns["user_profile.region"]] = np.arange(5)  # enum codes in declaration order
    assert [r for r, inside in zip(regions, seg(S)) if inside] == ["jiangsu", "shanghai"]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("decision.approval_result == 'pending'", "reads decision.approval_result"),
        ("user_profile.credit_score < 550", "reads user_profile.credit_score"),
        ("user_profile.region == 'tibet'", "tibet"),
        ("user_profile.nation == 'cn'", "unknown field 'user_profile.nation'"),
        ("user_profile.age + 1", "type mismatch"),
        ("__import__('os')", "'__import__' is not allowed"),
    ],
)
def test_a_bad_segment_says_why(source: str, message: str) -> None:
    with pytest.raises(ExprError, match=message):
        compile_segment(SPEC, source, ops=NUMPY_OPS)
