"""The grammar of a scenario name and the rule that a pack's name is its folder's name."""

from __future__ import annotations

import pytest

from rlops.common.errors import UserError
from rlops.common.scenario_name import (
    MAX_SCENARIO_NAME,
    check_scenario_name,
    identity_problem,
    scenario_name_problem,
)


@pytest.mark.parametrize(
    "name",
    ["credit_approval", "credit-approval_v2", "2026", "a__b", "A", "p" * MAX_SCENARIO_NAME],
)
def test_a_name_of_letters_digits_underscores_and_dashes_is_a_scenario_name(name: str) -> None:
    assert scenario_name_problem(name) is None
    assert check_scenario_name(name) == name


@pytest.mark.parametrize(
    "name",
    [
        "cred?t_approval",
        "credit_approva*",
        "[c]redit_approval",
        "{credit,loan}",
        "credit.approval",
        "..",
        "a/b",
        "a\\b",
        "my pack",
        "-pack",
        "_pack",
        "café",
        "信用审批",
        "pack\u200b",
        "a\nb",
        "",
        "p" * (MAX_SCENARIO_NAME + 1),
    ],
)
def test_any_other_name_is_refused_with_one_line_naming_it(name: str) -> None:
    problem = scenario_name_problem(name, "--scenario")
    assert problem is not None and "\n" not in problem
    assert problem.startswith("--scenario ") and "ASCII letters, digits, '_' and '-'" in problem
    assert repr(name)[:30] in problem
    with pytest.raises(UserError, match="is not a scenario name"):
        check_scenario_name(name)


@pytest.mark.parametrize("value", [None, 7, ["credit_approval"]])
def test_a_name_that_is_no_text_is_refused(value: object) -> None:
    problem = scenario_name_problem(value, "params 'scenario'")
    assert problem is not None and problem.startswith("params 'scenario' is a ") and "not a text" in problem


def test_a_pack_whose_name_is_not_its_folder_s_is_refused_naming_both() -> None:
    problem = identity_problem("zz_copy", "credit_approval", "/s/zz_copy/scenario.yaml")
    assert problem is not None and "\n" not in problem
    assert "'zz_copy'" in problem and "name: 'credit_approval'" in problem
    assert "/s/zz_copy/scenario.yaml" in problem and "set name: 'zz_copy'" in problem
    assert identity_problem("credit_approval", "credit_approval", "f") is None
    assert identity_problem("credit_approval", None, "f") is None  # the pack loader reports a missing name
    # A name that is no scenario name is the pack loader's to refuse, with its file and line.
    assert identity_problem("credit_approval", "cred?t_approval", "f") is None
