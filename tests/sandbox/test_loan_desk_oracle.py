"""The loan desk's oracle: it only takes the acting role's legal actions (on the clean and the
live profile), it beats the rule engine and a random team on fixed seeds, and no single-step
deviation from it gains return (paired episodes)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import evaluate_policy, load_oracle, probe_oracle, random_policy, rule_policy

DESK = REPO_ROOT / "scenarios" / "loan_desk"
SEED = 4_000_000
EPISODES = 4000


@pytest.fixture(scope="module")
def pack() -> Any:
    return load_pack(DESK)


def _eval(pack: Any, act: Any, profile: str = "sandbox", episodes: int = EPISODES) -> Any:
    return evaluate_policy(pack, act, episodes=episodes, seed=SEED, reward_fn="v1", profile=profile)


@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_the_oracle_is_legal_and_beats_the_rules_and_a_random_team(pack: Any, profile: str) -> None:
    probe_oracle(pack)
    oracle = load_oracle(pack)
    assert oracle is not None
    o, r, x = _eval(pack, oracle, profile), _eval(pack, rule_policy, profile), _eval(pack, random_policy(0), profile)
    assert int(o.illegal_actions.sum()) == 0
    assert bool(o.completed.all()), "every application is closed before the horizon"
    assert o.mean_return > r.mean_return + 0.15 and r.mean_return > x.mean_return + 0.1
    # Paired episodes: the oracle does at least as well as the rules on most applications.
    assert float((o.returns >= r.returns - 1e-6).float().mean()) > 0.8


def test_no_single_step_deviation_from_the_oracle_gains(pack: Any) -> None:
    oracle = load_oracle(pack)
    assert oracle is not None
    base = _eval(pack, oracle, episodes=2000).mean_return
    c_step = pack.scenario.columns["episode.step"]
    for step in range(3):
        for a, name in enumerate(pack.scenario.action_names):

            def deviate(env: Any, step: int = step, a: int = a) -> torch.Tensor:
                choice = oracle(env)
                here = (env.S[:, c_step] == step) & env.action_masks()[:, a]
                return torch.where(here, torch.full_like(choice, a), choice)

            gained = _eval(pack, deviate, episodes=2000).mean_return - base
            assert gained <= 0.0, f"{name} at step {step} instead of the oracle's action gains {gained:.4f}"
