"""A what-if's change: parsed and checked before anything runs, and written as the base module with
only the changed literals (and a header), so it loads as a reward of its own identity."""

from __future__ import annotations

import difflib
from dataclasses import replace
from pathlib import Path

import pytest

from rlops.common.errors import UserError
from rlops.sandbox.pack import Pack
from rlops.whatif.change import (
    RewardChange,
    changed_reward_fn,
    derivation_header,
    parse_assignment,
    resolve_change,
    rewrite_source,
)


def test_assignments_are_name_and_finite_number() -> None:
    assert parse_assignment("compliance=0.62", "--set") == ("compliance", 0.62)
    assert parse_assignment(" risk = 1.2 ", "--set") == ("risk", 1.2)
    for bad in ["compliance", "=1", "compliance=", "compliance=high", "compliance=nan", "compliance=inf"]:
        with pytest.raises(UserError, match="--set"):
            parse_assignment(bad, "--set")


@pytest.mark.parametrize(
    ("sets", "params", "message"),
    [
        (["speed=1"], [], "has no objective 'speed'"),
        (["compliance=1e9"], [], r"must lie in \[0, 10\]"),
        (["compliance=-0.5"], [], r"must lie in \[0, 10\]"),
        (["compliance=1", "compliance=2"], [], "set twice"),
        ([], ["LOW_SCORE_CAP_MULTIPLE=9"], r"declared range \[1, 5\]"),
        ([], ["nope=1"], "declares no tunable parameter 'nope'"),
        ([], [], "nothing to change"),
    ],
)
def test_bad_changes_are_one_clear_error(credit: Pack, sets: list[str], params: list[str], message: str) -> None:
    with pytest.raises(UserError, match=message):
        resolve_change(credit.reward_fn("v1"), sets, params)


def test_parameter_names_match_without_case(credit: Pack) -> None:
    change = resolve_change(credit.reward_fn("v1"), ["risk=1.5"], ["low_score_cap_multiple=4"])
    assert change == RewardChange((("risk", 1.5),), (("LOW_SCORE_CAP_MULTIPLE", 4.0),))
    assert change.describe() == "risk=1.5, LOW_SCORE_CAP_MULTIPLE=4"


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_rewrite_changes_only_the_constants(credit: Pack) -> None:
    base = credit.reward_fn("v1")
    change = resolve_change(base, ["risk=1.2"], ["DEFAULT_LOSS=4"])
    src = rewrite_source(base, change, "v2", derivation_header(base, change))
    lines = changed_lines(base.source, src)
    removed = [x for x in lines if x.startswith("-")]
    added = [x for x in lines if x.startswith("+") and not x.startswith("+#")]
    assert removed == [
        '-VERSION_LABEL = "v1"',
        '-WEIGHTS = {"compliance": 1.0, "risk": 1.0, "service": 1.0, "efficiency": 1.0}',
        "-DEFAULT_LOSS = 2.5  # margins lost when a loan defaults",
    ]
    assert added == [
        '+VERSION_LABEL = "v2"',
        '+WEIGHTS = {"compliance": 1.0, "risk": 1.2, "service": 1.0, "efficiency": 1.0}',
        "+DEFAULT_LOSS = 4.0  # margins lost when a loan defaults",
    ]
    header = [x for x in lines if x.startswith("+#")]
    assert "reward_v1.py" in header[0] and any("DEFAULT_LOSS 2.5 -> 4" in h for h in header)


def test_an_unlisted_objective_is_added_to_the_weights(credit: Pack) -> None:
    base = credit.reward_fn("v1")
    src = base.source.replace('"service": 1.0, "efficiency": 1.0}', '"service": 1.0}')
    src2 = rewrite_source(replace(base, source=src), RewardChange((("efficiency", 0.5),)), "v2", "")
    assert "\"service\": 1.0, 'efficiency': 0.5}" in src2


def test_the_changed_reward_loads_with_its_own_identity(credit: Pack, tmp_path: Path) -> None:
    base = credit.reward_fn("v1")
    change = resolve_change(base, ["compliance=0.62"], ["HUMAN_COST=0.5"])
    fn = changed_reward_fn(base, change, "v2", tmp_path, credit.rules, credit.scenario.action_names)
    assert fn.label == "v2" and fn.version != base.version
    assert fn.weights_at(0)["compliance"] == 0.62 and fn.weights_at(0)["risk"] == 1.0
    assert {p.name: p.value for p in fn.params}["HUMAN_COST"] == 0.5
    assert fn.rule_refs == base.rule_refs
    # a weight pinned by a what-if no longer follows a business signal
    assert all(sw.objective != "compliance" for sw in fn.signal_weights)
