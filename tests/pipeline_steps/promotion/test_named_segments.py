"""The segments a pack's author named in its production stand-in (the complaint pack's angry
customers) are judged in the world the gates judge in: after the phone API slowed down, a candidate
that stops calling back is compared with a champion that calls back on the slow calls the
calibration measured, not on the stand-in's declared 1.5 s ones."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.common.params_promotion import GateConfig
from rlops.pipeline_steps.promotion.evaluate_sandbox import named_segment_gates
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import evaluate_policy, rule_policy

#: What a recalibration writes once follow-up calls take 6x as long and customers turned angrier.
SLOW_CALLS = {
    "simulation": {
        "profiles": {
            "calibrated": {
                "latency_jitter_ms": {"min": 200, "max": 1200},
                "error_rates": {"crm": 0.01, "billing": 0.015, "phone": 0.06},
                "action_latency_ms": {"follow_up": {"mean": 9000.0, "std": 1800.0}},
            }
        }
    },
    "fields": {"customer.sentiment": {"dist": "normal", "mean": -0.7, "std": 0.3}},
}


@pytest.fixture(scope="module")
def pack() -> Pack:
    return load_pack(REPO_ROOT / "scenarios" / "complaint_handling", calibration=SLOW_CALLS, check_liveness=False)


def calls_back(env: BatchedEnv) -> torch.Tensor:
    """The rule engine, but it calls the customer back after each offer and refunds when the
    complaint is still open."""
    c, S = env.scenario.columns, env.S
    index = {name: i for i, name in enumerate(env.action_names)}
    act = rule_policy(env).clone()
    identified, offers = S[:, c["case.identified"]] > 0, S[:, c["case.offers"]]
    checked, satisfied = S[:, c["case.checked"]] > 0, S[:, c["case.satisfied"]] > 0
    act = torch.where(identified & (offers >= 1) & ~checked, torch.full_like(act, index["follow_up"]), act)
    again = identified & checked & ~satisfied & (offers < 2)
    return torch.where(again, torch.full_like(act, index["offer_refund"]), act)


def judged(pack: Pack, world: str = "calibrated") -> tuple[dict[str, Any], list[str]]:
    worlds: list[str] = []

    def run(act: Any, profile: str = world) -> Any:
        worlds.append(profile)
        env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=3000, profile=profile, illegal_action="noop")
        return evaluate_policy(pack, act, seed=0, env=env), env

    cfg = GateConfig(segment_tolerance=0.02)
    gates = named_segment_gates(pack, world, run, rule_policy, calls_back, cfg, judged={"base"})
    return {g.gate: g for g in gates}, worlds


def test_a_named_segment_is_judged_with_the_calibrated_latencies(pack: Pack) -> None:
    gates, worlds = judged(pack)
    assert set(gates) == {"segment:angry"}
    world = pack.scenario.profiles[worlds[0]]
    follow_up = pack.scenario.action_names.index("follow_up")
    assert float(world["latency_mean"][follow_up]) == 9000.0  # the calibrated call, not the declared 1.5 s
    angry = gates["segment:angry"]
    # the slow calls cost more than the second offer recovers: not calling back is better here
    assert isinstance(angry.candidate, float) and isinstance(angry.champion, float)
    assert angry.passed and angry.candidate - angry.champion > 0.3, angry


def test_on_the_stand_ins_declared_latencies_the_same_candidate_looks_worse(pack: Pack) -> None:
    """What the gate judged before: the stand-in's own world, where calls are cheap and calling
    back angry customers pays."""
    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=3000, profile="live", illegal_action="noop")
    cand = evaluate_policy(pack, rule_policy, seed=0, env=env)
    env = BatchedEnv(pack.scenario, pack.reward_fn("v1"), num_envs=3000, profile="live", illegal_action="noop")
    champ = evaluate_policy(pack, calls_back, seed=0, env=env)
    angry = cand.segments.numpy() == cand.segment_names.index("angry")
    diff = float(np.mean(cand.returns.numpy()[angry] - champ.returns.numpy()[angry]))
    assert diff < -0.02


def test_the_derived_world_draws_the_stand_ins_segments_and_is_added_once(pack: Pack) -> None:
    name = pack.scenario.profile_with_population("calibrated", "live")
    assert pack.scenario.profile_with_population("calibrated", "live") == name
    assert pack.scenario.profile_with_population("live", "live") == "live"
    profile = pack.scenario.spec.profiles[name]
    assert [p.name for p in profile.population] == ["angry"]
    assert profile.error_rates == pack.scenario.spec.profiles["calibrated"].error_rates
    assert torch.equal(pack.scenario.profiles[name]["error_rate"], pack.scenario.profiles["calibrated"]["error_rate"])
