"""bench/learn_from_logs.py values each policy by its expected reward in the pack's own world."""

from __future__ import annotations

import pytest

from bench.learn_from_logs import true_values
from rlops.common.config import REPO_ROOT
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.sandbox.pack import load_pack


def test_the_logging_value_mixes_rules_and_uniform_and_nothing_beats_the_best() -> None:
    pack = load_pack(REPO_ROOT / "scenarios" / "offer_selection")
    net = PolicyNetwork(PolicyConfig.from_layout(pack.scenario.layout)).eval()
    greedy = true_values(pack, net, 0.0, 3000, seed=1)
    explore = true_values(pack, net, 1.0, 3000, seed=1)
    half = true_values(pack, net, 0.5, 3000, seed=1)
    assert greedy["logging"] == pytest.approx(greedy["rules"])
    assert explore["logging"] == pytest.approx(explore["uniform"])
    assert half["logging"] == pytest.approx((half["rules"] + half["uniform"]) / 2)
    assert half["best"] > max(half["rules"], half["uniform"], half["trained"])
    assert 0.0 <= half["departs_from_rules"] <= 1.0
