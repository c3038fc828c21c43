"""The operational budget of a pack (``evaluate.completion_min``, ``handling_max_ms``,
``takeover_max``): a candidate that hands over more, or takes longer, than the champion passes
those gates only within the budget the pack declares; without one the gates stay pure
non-regression, and the return gate still demands a better policy."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.common.config import resolve_params
from rlops.pipeline_steps.promotion.gates import GateConfig, ab_gates, comparison_gates


def _result(returns: list[float], completion: float, handling_ms: float, takeover: float) -> Any:
    r = torch.tensor(returns)
    summary = {
        "mean_return": float(r.mean()),
        "completion_rate": completion,
        "mean_handling_ms": handling_ms,
        "human_takeover_rate": takeover,
        "illegal_action_rate": 0.0,
        "illegal_actions": 0,
    }
    return SimpleNamespace(returns=r, summary=lambda: summary)


def _gates(cfg: GateConfig, cand_returns: float = 1.0) -> dict[str, Any]:
    cand = _result([cand_returns] * 300, completion=0.78, handling_ms=5000.0, takeover=0.22)
    rules = _result([0.5] * 300, completion=1.0, handling_ms=2800.0, takeover=0.0)
    return {g.gate: g for g in comparison_gates(cand, rules, cfg, {}, (1.0, None))}


OPERATIONAL = ("completion_rate", "handling_ms", "human_takeover_rate")


def test_without_a_budget_the_gates_are_non_regression() -> None:
    gates = _gates(GateConfig(bootstrap_samples=200))
    assert [gates[g].passed for g in OPERATIONAL] == [False, False, False]
    assert gates["mean_return"].passed


def test_within_the_budget_a_better_policy_passes_and_says_why() -> None:
    cfg = GateConfig.model_validate(
        {"bootstrap_samples": 200, "completion_min": 0.7, "handling_max_ms": 6000, "takeover_max": 0.3}
    )
    assert cfg.handling_max_ms == 6000.0 and isinstance(cfg.handling_max_ms, float)
    gates = _gates(cfg)
    assert all(gates[g].passed for g in OPERATIONAL)
    assert all("operational budget" in gates[g].detail for g in OPERATIONAL)
    assert gates["human_takeover_rate"].threshold == "<= champion + 0.01 or <= 0.3"


def test_beyond_the_budget_or_with_a_worse_return_it_fails() -> None:
    tight = GateConfig(bootstrap_samples=200, completion_min=0.8, handling_max_ms=4000.0, takeover_max=0.2)
    gates = _gates(tight)
    assert [gates[g].passed for g in OPERATIONAL] == [False, False, False]
    loose = GateConfig(bootstrap_samples=200, completion_min=0.7, handling_max_ms=6000.0, takeover_max=0.3)
    assert not _gates(loose, cand_returns=0.4)["mean_return"].passed  # the budget never excuses a worse return


def test_live_ab_gates_honour_the_budget() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    control = pd.DataFrame(
        {"completed": np.ones(n, bool), "takeover": np.zeros(n, bool), "handling_ms": rng.normal(2800, 300, n)}
    )
    challenger = pd.DataFrame(
        {"completed": rng.random(n) > 0.22, "takeover": rng.random(n) < 0.22, "handling_ms": rng.normal(5000, 300, n)}
    )
    plain = {g.gate: g.passed for g in ab_gates(challenger, control, GateConfig())}
    assert plain == {"ab:completion_rate": False, "ab:human_takeover_rate": False, "ab:handling_ms": False}
    budget = GateConfig(completion_min=0.7, handling_max_ms=6000.0, takeover_max=0.3)
    assert all(g.passed for g in ab_gates(challenger, control, budget))


def test_the_complaint_pack_declares_its_budget() -> None:
    cfg = resolve_params("complaint_handling").model.evaluate  # project + pack params, typed
    assert isinstance(cfg, GateConfig)
    assert cfg.completion_min is not None and cfg.takeover_max is not None and cfg.handling_max_ms is not None
    assert cfg.completion_min + cfg.takeover_max <= 1.0 + 1e-9


def test_the_non_inferiority_z_by_hand() -> None:
    from rlops.pipeline_steps.promotion.gate_stats import proportion_beyond

    # control 95/100 completed, challenger 90/100: is the control ahead by more than 0.01?
    z, p = proportion_beyond(95, 100, 90, 100, 0.01)
    assert z == pytest.approx(0.04 / (0.001375**0.5)) and p == pytest.approx(0.14037, abs=1e-4)
    assert proportion_beyond(100, 100, 100, 100, 0.01) == (-math.inf, 1.0)  # no variance, within the margin
    assert proportion_beyond(100, 100, 0, 100, 0.01) == (math.inf, 0.0)  # no variance, beyond it
    assert all(math.isnan(v) for v in proportion_beyond(1, 0, 1, 10, 0.0))


def test_live_ab_gates_allow_the_sandbox_s_margins() -> None:
    """A challenger slower by 3 % and completing 0.5 point less on 20,000 episodes per group is
    significantly worse, but within the margins its sandbox gates allowed (handling 5 %, completion
    and takeover 0.01): the live gates pass it. Slower by 10 % or 3 points less completion fails."""
    rng = np.random.default_rng(1)
    n = 20_000

    def group(handling: float, completion: float, takeover: float) -> pd.DataFrame:
        return pd.DataFrame(
            {
                "completed": rng.random(n) < completion,
                "takeover": rng.random(n) < takeover,
                "handling_ms": rng.normal(handling, 300, n),
            }
        )

    control = group(3000, 0.95, 0.05)
    close = {g.gate: g for g in ab_gates(group(3090, 0.945, 0.055), control, GateConfig())}
    assert all(g.passed for g in close.values()), {k: g.detail for k, g in close.items()}
    assert close["ab:handling_ms"].threshold == "not above control x 1.05 at p < 0.05"
    assert close["ab:completion_rate"].threshold == "not below control − 0.01 at p < 0.05"
    far = {g.gate: g.passed for g in ab_gates(group(3300, 0.92, 0.08), control, GateConfig())}
    assert far == {"ab:completion_rate": False, "ab:human_takeover_rate": False, "ab:handling_ms": False}
