"""The offer-selection pack, the click-scale end of the built-in packs: one decision among 80 offers
per visit, a rare click as the reward. It loads and compiles, the rule engine clicks about 0.5% of
the time and the oracle about twice as often, a seed replays the same visits and clicks, its YAML
aliases are independent copies, and the reward model's preference pairs take the oracle's exact
values (a few simulated replicas of a visit never see a click)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.model.pack_defaults import derive_defaults
from rlops.model.policy import as_act_fn
from rlops.model.ppo import train
from rlops.model.reward_pairs import build_preference_pairs, exact_action_values
from rlops.pipeline_steps.stress.perturbation import STRESS_PROFILE, perturbed_pack
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import evaluate_policy, load_oracle, probe_oracle, random_policy, rule_policy
from rlops.sandbox.yaml_lines import load_yaml

PACK = REPO_ROOT / "scenarios" / "offer_selection"
SEED = 1_000_000
EPISODES = 20_000
RESTRICTED = {"offer_grocery_9", "offer_grocery_10", "offer_travel_10"}


@pytest.fixture(scope="module")
def pack() -> Any:
    return load_pack(PACK)


def _reward_module() -> Any:
    spec = importlib.util.spec_from_file_location("offer_selection_reward_v1", PACK / "reward_v1.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _eval(pack: Any, act: Any, profile: str = "sandbox", seed: int = SEED) -> Any:
    return evaluate_policy(pack, act, episodes=EPISODES, seed=seed, reward_fn="v1", profile=profile)


def test_it_loads_as_a_one_step_choice_among_80_named_offers(pack: Any) -> None:
    spec = pack.scenario.spec
    assert pack.name == "offer_selection" and spec.horizon == 1
    rw = _reward_module()
    names = [f"offer_{c}_{k}" for c in rw.CATEGORIES for k in range(1, 11)]
    assert list(pack.scenario.action_names) == names and pack.scenario.n_actions == 80
    # Every offer of the reward's tiers is an action, each in one tier.
    tiers = [n for offers in rw.OFFERS_BY_TIER.values() for n in offers]
    assert sorted(tiers) == sorted(names)
    assert all(a.terminal is True for a in spec.actions), "showing an offer ends the visit"
    assert {a.name for a in spec.actions if a.precondition not in (True, "true")} == RESTRICTED
    assert set(pack.reward_fns) == {"v1"} and set(pack.scenario.profiles) >= {"sandbox", "live"}
    env = pack.make_env(4096, profile="live", seed=0)
    masks = env.action_masks()
    always = [i for i, n in enumerate(names) if n not in RESTRICTED]
    assert bool(masks[:, always].all()), "every unrestricted offer is always legal"
    assert 0 < float(masks[:, names.index("offer_travel_10")].float().mean()) < 0.5


@pytest.mark.parametrize("profile", ["sandbox", "live"])
def test_clicks_are_rare_under_the_rules_and_the_oracle_doubles_them(pack: Any, profile: str) -> None:
    probe_oracle(pack)
    oracle = load_oracle(pack)
    assert oracle is not None
    rules, best = _eval(pack, rule_policy, profile), _eval(pack, oracle, profile)
    rand = _eval(pack, random_policy(0), profile)
    assert 0.002 <= rules.mean_return <= 0.01
    assert int(best.illegal_actions.sum()) == 0
    assert best.mean_return >= 1.5 * rules.mean_return, (best.mean_return, rules.mean_return)
    assert rules.mean_return > rand.mean_return
    # Rewards are clicks less a small cost per offer shown: never above one click, never far below 0.
    assert float(rules.returns.max()) <= 1.0 and float(best.returns.min()) >= -0.001


def test_the_oracles_values_are_what_the_world_pays(pack: Any) -> None:
    oracle = load_oracle(pack)
    assert oracle is not None
    env = pack.make_env(EPISODES, profile="live", seed=SEED)
    q = oracle.action_values(env)  # type: ignore[attr-defined]
    assert q.shape == (EPISODES, 80) and bool(torch.isinf(q[~env.action_masks()]).all())
    chosen = oracle(env)
    assert torch.equal(chosen, q.argmax(dim=1))
    expected = q.gather(1, chosen.unsqueeze(1)).squeeze(1)
    _, reward, _, _, _ = env.step(chosen)
    # The realised clicks of the oracle's offers match its expected values (within 4 standard errors).
    se = float(reward.std()) / EPISODES**0.5
    assert abs(float(reward.mean()) - float(expected.mean())) < 4 * se
    # And so for a fixed offer, shown to everyone.
    env = pack.make_env(EPISODES, profile="live", seed=SEED)
    a = pack.scenario.action_names.index("offer_books_9")
    expected = oracle.action_values(env)[:, a]  # type: ignore[attr-defined]
    _, reward, _, _, _ = env.step(torch.full((EPISODES,), a))
    assert abs(float(reward.mean()) - float(expected.mean())) < 4 * float(reward.std()) / EPISODES**0.5


def test_the_same_seed_replays_the_same_visits_and_clicks(pack: Any) -> None:
    a = _eval(pack, rule_policy, seed=77)
    b = _eval(pack, rule_policy, seed=77)
    c = _eval(pack, rule_policy, seed=78)
    assert torch.equal(a.returns, b.returns) and not torch.equal(a.returns, c.returns)
    e1, e2 = pack.make_env(512, seed=3), pack.make_env(512, seed=3)
    assert torch.equal(e1.S, e2.S)
    actions = random_policy(0)(e1)
    _, r1, t1, _, _ = e1.step(actions)
    _, r2, t2, _, _ = e2.step(actions)
    assert torch.equal(r1, r2) and bool(t1.all()) and torch.equal(t1, t2)


def test_a_calibrated_click_factor_moves_the_oracle_with_the_world(pack: Any) -> None:
    factor = {"outcomes": {"hidden.click_prob": [{"factor": 3.0, "when": "user.segment == 'senior'"}]}}
    calibrated = load_pack(PACK, calibration=factor, check_liveness=False)
    oracle = load_oracle(pack)  # built from the pack's own files
    assert oracle is not None
    base = pack.make_env(4096, seed=9)
    shifted = calibrated.make_env(4096, seed=9)
    senior = base.S[:, pack.scenario.columns["user.segment"]] == 3
    q0, q1 = oracle.action_values(base), oracle.action_values(shifted)  # type: ignore[attr-defined]
    legal = base.action_masks()
    p0, p1 = q0[legal & senior.unsqueeze(1)], q1[legal & senior.unsqueeze(1)]
    assert bool((p1 > 2.5 * p0.clamp(min=0) - 1e-3).all()), "seniors' offers are worth three times as much"
    assert torch.allclose(q0[~senior], q1[~senior])


def test_each_alias_of_the_pack_is_its_own_copy(pack: Any, tmp_path: Path) -> None:
    doc = load_yaml(PACK / "scenario.yaml")
    latencies = [a["latency_ms"] for a in doc["actions"]]
    assert len({id(x) for x in latencies}) == 80 and all(x == {"mean": 40, "std": 10} for x in latencies)
    # Editing one action's copy edits no other: the stress perturbation scales each latency once.
    stressed = perturbed_pack(pack, latency=3.0)
    means = {a.latency_mean_ms for a in stressed.scenario.spec.actions}
    assert means == {120.0}, means
    assert STRESS_PROFILE in stressed.scenario.profiles
    # The lines of an aliased value are those of the alias's anchor, in every copy.
    f = tmp_path / "a.yaml"
    f.write_text("base: &b {x: 1}\none: *b\ntwo: {<<: *b, y: 2}\n")
    d = load_yaml(f)
    assert d["one"] == {"x": 1} and d["two"] == {"x": 1, "y": 2}
    assert d["one"] is not d["base"] and d["one"].line_of("x") == 1
    d["one"]["x"] = 5
    assert d["base"]["x"] == 1


def test_preference_pairs_take_the_oracles_exact_values(pack: Any) -> None:
    oracle = load_oracle(pack)
    assert oracle is not None and exact_action_values(oracle) is not None
    pairs = build_preference_pairs(pack, 2000, seed=0, reward_fn="v1", profile="sandbox")
    assert len(pairs) == 2000
    assert pairs.chosen_value is not None and pairs.rejected_value is not None
    assert bool((pairs.chosen_value > pairs.rejected_value).all())
    # Exact click probabilities, not replicas' counts of clicks: values are small and mostly distinct.
    assert float(pairs.chosen_value.max()) < 0.1 and pairs.chosen_value.unique().numel() > 1000


@pytest.mark.slow
def test_ppo_with_the_packs_settings_beats_the_rule_engine(pack: Any) -> None:
    # The pack's params.yaml budget and early-stopping settings (about a minute on one CPU thread).
    torch.set_num_threads(1)
    plan = derive_defaults(pack, device="cpu", total_timesteps=1_500_000, seed=1, **pack.params["ppo"])
    result = train(plan.config, pack.make_env(plan.num_envs, reward_fn="v1", seed=0))
    learnt = _eval(pack, as_act_fn(result.policy)).mean_return
    rules = _eval(pack, rule_policy).mean_return
    assert learnt >= 1.2 * rules, (learnt, rules)
