"""Promotion seams.

* ``test_racing_promotions_gate_each_candidate_against_the_champion_it_replaces`` caught: two
  ``promote`` runs at once both exited 0 and both moved the champion, the second one gated only
  against the old champion (end state: champion v3, previous v4).
* ``test_a_gate_that_was_not_judged_says_skipped`` caught: a segment with too few episodes was
  shown ``pass``.
* ``test_latency_gate_is_a_ratio_measured_together`` caught: the p99 latency gate compared one
  wall-clock figure with 25 ms, so it passed or failed with the machine's load.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from rlops.pipeline_steps.promotion.outcome import PromotionOutcome, PromotionStatus
from tests.policy_kit import (  # noqa: F401  (fixtures)
    NAME,
    approve_all,
    good,
    pack,
    preference_policy,
    promotion_ctx,
    promotion_sandbox,
    register,
)

pytestmark = pytest.mark.usefixtures("promotion_sandbox")


def test_racing_promotions_gate_each_candidate_against_the_champion_it_replaces(
    pack: Any, good: Any, approve_all: Any
) -> None:
    from rlops.pipeline_steps.promotion.flow import promote

    ctx = promotion_ctx()
    bad = register(ctx, pack, approve_all)
    ctx.tracker.set_alias(NAME, "champion", bad)
    a, b = register(ctx, pack, good), register(ctx, pack, good)
    results: dict[str, PromotionOutcome] = {}
    barrier = threading.Barrier(2)

    def run(version: str) -> None:
        barrier.wait()
        results[version] = promote(promotion_ctx(), version)

    threads = [threading.Thread(target=run, args=(v,)) for v in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    promoted = [r for r in results.values() if r.promoted]
    assert promoted, results
    for r in promoted:  # each one replaced exactly the champion it was gated against
        assert r.status is PromotionStatus.CHAMPION and r.baseline == f"champion v{r.previous}", r
    waited = sorted(r.lock_wait_s for r in results.values() if r.lock_wait_s is not None)
    assert len(waited) == 2  # both took the lock
    assert waited[0] == 0.0 or waited[1] > 0.0  # the second one queued behind the first
    final = ctx.tracker.aliases(NAME)
    first = next(r for r in promoted if r.previous == bad)
    assert final["previous"] in (bad, first.candidate)
    if len(promoted) == 2:
        assert final["previous"] == first.candidate


def _result(returns: list[float]) -> Any:
    r = torch.tensor(returns)
    summary = {
        "mean_return": float(r.mean()),
        "completion_rate": 1.0,
        "mean_handling_ms": 1.0,
        "human_takeover_rate": 0.0,
        "illegal_action_rate": 0.0,
        "illegal_actions": 0,
    }
    return SimpleNamespace(returns=r, summary=lambda: summary)


def test_a_gate_that_was_not_judged_says_skipped() -> None:
    from rlops.pipeline_steps.promotion.gate_table import gate_frame, gate_table_html
    from rlops.pipeline_steps.promotion.gates import GateConfig, comparison_gates

    cfg = GateConfig(bootstrap_samples=200, min_segment_episodes=100)
    rows = np.zeros(300, dtype=bool)
    rows[:10] = True
    gates = comparison_gates(_result([1.0] * 300), _result([0.5] * 300), cfg, {"tiny": rows}, (1.0, 1.0))
    seg = next(g for g in gates if g.gate == "segment:tiny")
    assert seg.to_dict()["status"] == "skipped" and seg.passed  # blocks nothing, but says so
    assert next(g for g in gates if g.gate == "mean_return").to_dict()["status"] == "pass"
    assert "skipped" in gate_frame(gates)["status"].tolist()
    assert "<td>skipped</td>" in gate_table_html(gates, "t", {})


def test_latency_gate_is_a_ratio_measured_together(pack: Any) -> None:
    from rlops.pipeline_steps.promotion.evaluate_sandbox import timed_p99
    from rlops.pipeline_steps.promotion.gates import GateConfig, latency_gate

    cfg = GateConfig()
    assert latency_gate(24.3, 20.0, cfg).passed and latency_gate(26.5, 20.0, cfg).passed
    assert not latency_gate(40.0, 20.0, cfg).passed
    assert latency_gate(26.5, None, cfg).to_dict()["status"] == "skipped"
    p = preference_policy(pack, {"approve": 1})
    obs = torch.zeros(8, p.config.obs_dim)
    cand, champ = timed_p99(p, p, obs, 300, 1.5, tries=5)
    assert champ is not None and cand / champ < 3.0  # the same network, timed together
