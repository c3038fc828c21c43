"""The three operational gates at their boundaries, by hand: ``completion_rate`` may drop by
``completion_epsilon``, ``handling_ms`` grow by ``handling_epsilon`` of the champion's and
``human_takeover_rate`` rise by ``takeover_epsilon``; equal to the line passes, the next float past
it fails, and the pack's operational budget lets a candidate past the line pass, saying so.

Every number is exact in binary (0.75 − 0.25 = 0.5, 100 × 1.25 = 125, 0.25 + 0.125 = 0.375), so
each line is the value written here."""

from __future__ import annotations

import math

from rlops.common.params_promotion import GateConfig
from rlops.pipeline_steps.promotion.gates import Gate, completion_gate, handling_gate, takeover_gate

BUDGET = "within the pack's operational budget"
EPSILONS = {"completion_epsilon": 0.25, "handling_epsilon": 0.25, "takeover_epsilon": 0.125}
NO_BUDGET = GateConfig.model_validate(EPSILONS)
WITH_BUDGET = GateConfig.model_validate(
    {**EPSILONS, "completion_min": 0.375, "handling_max_ms": 150.0, "takeover_max": 0.5}
)


def test_completion_may_drop_by_the_epsilon_or_stay_above_the_budget() -> None:
    past = math.nextafter(0.5, 0.0)
    assert completion_gate(0.5, 0.75, NO_BUDGET) == Gate("completion_rate", 0.5, 0.75, ">= champion - 0.25", True)
    assert completion_gate(past, 0.75, NO_BUDGET) == Gate("completion_rate", past, 0.75, ">= champion - 0.25", False)
    line = ">= champion - 0.25 or >= 0.375"
    assert completion_gate(0.5, 0.75, WITH_BUDGET) == Gate("completion_rate", 0.5, 0.75, line, True)
    assert completion_gate(0.375, 0.75, WITH_BUDGET) == Gate("completion_rate", 0.375, 0.75, line, True, BUDGET)
    assert completion_gate(0.25, 0.75, WITH_BUDGET) == Gate("completion_rate", 0.25, 0.75, line, False)


def test_handling_may_grow_by_the_epsilon_or_stay_within_the_budget() -> None:
    past = math.nextafter(125.0, math.inf)
    assert handling_gate(125.0, 100.0, NO_BUDGET) == Gate("handling_ms", 125.0, 100.0, "<= champion x 1.25", True)
    assert handling_gate(past, 100.0, NO_BUDGET) == Gate("handling_ms", past, 100.0, "<= champion x 1.25", False)
    line = "<= champion x 1.25 or <= 150"
    assert handling_gate(125.0, 100.0, WITH_BUDGET) == Gate("handling_ms", 125.0, 100.0, line, True)
    assert handling_gate(150.0, 100.0, WITH_BUDGET) == Gate("handling_ms", 150.0, 100.0, line, True, BUDGET)
    assert handling_gate(175.0, 100.0, WITH_BUDGET) == Gate("handling_ms", 175.0, 100.0, line, False)


def test_takeover_may_rise_by_the_epsilon_or_stay_within_the_budget() -> None:
    name, past = "human_takeover_rate", math.nextafter(0.375, 1.0)
    assert takeover_gate(0.375, 0.25, NO_BUDGET) == Gate(name, 0.375, 0.25, "<= champion + 0.125", True)
    assert takeover_gate(past, 0.25, NO_BUDGET) == Gate(name, past, 0.25, "<= champion + 0.125", False)
    line = "<= champion + 0.125 or <= 0.5"
    assert takeover_gate(0.375, 0.25, WITH_BUDGET) == Gate(name, 0.375, 0.25, line, True)
    assert takeover_gate(0.5, 0.25, WITH_BUDGET) == Gate(name, 0.5, 0.25, line, True, BUDGET)
    assert takeover_gate(0.625, 0.25, WITH_BUDGET) == Gate(name, 0.625, 0.25, line, False)
