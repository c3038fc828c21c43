"""``rlops train tune --budget-s``: a budget that is no finite positive number of seconds is refused by
the bounds of TuneRequest.budget_s
(NaN compares false with every bound and would have meant "no limit")."""

from __future__ import annotations

import pytest

from rlops.cli import main


@pytest.mark.parametrize("budget", ["nan", "inf", "-inf", "0", "-1"])
def test_a_budget_that_is_no_finite_positive_number_is_refused(budget: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "tune", "--scenario", "credit_approval", "--dry-run", f"--budget-s={budget}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--budget-s" in err and "expected a number >= 0.001" in err
    assert len(err.splitlines()) == 1
