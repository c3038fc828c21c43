"""Learning a policy from logged bandit feedback, on cases small enough to check by hand."""

from __future__ import annotations

import pytest
import torch

from rlops.model.offpolicy import LoggedDecisions, OffPolicyConfig, policy_value, train

# Two states (feature 0 / 1) × three actions; in state 1 action 0 is illegal. Rewards are known:
# state 0 pays (1.0, 0.2, 0.0), state 1 pays (-, 0.1, 0.6): the best legal actions are 0 and 2.
REWARD = torch.tensor([[1.0, 0.2, 0.0], [9.0, 0.1, 0.6]])  # 9.0: what an illegal action would pay
MASK = torch.tensor([[True, True, True], [False, True, True]])


def uniform_log(n: int, seed: int = 0) -> LoggedDecisions:
    """``n`` decisions of a uniform logging policy over the legal actions, no action history."""
    g = torch.Generator().manual_seed(seed)
    state = torch.randint(0, 2, (n,), generator=g)
    mask = MASK[state]
    action = torch.multinomial(mask.float(), 1, generator=g).squeeze(1)
    propensity = 1.0 / mask.sum(1).float()
    obs = torch.cat([state.float().unsqueeze(1), mask.float()], dim=1)
    return LoggedDecisions(obs, mask, action, propensity, REWARD[state, action], n_features=1)


def greedy_and_probs(result: object, data: LoggedDecisions) -> tuple[torch.Tensor, torch.Tensor]:
    obs = torch.tensor([[0.0, 1, 1, 1], [1.0, 0, 1, 1]])
    out = result.policy.act(obs, deterministic=True)  # type: ignore[attr-defined]
    return out.action, out.probs


@pytest.mark.parametrize("estimator", ["snips", "dr"])
def test_the_learnt_policy_picks_the_best_legal_action(estimator: str) -> None:
    torch.set_num_threads(1)
    data = uniform_log(600)
    cfg = OffPolicyConfig(estimator=estimator, epochs=60, batch_size=200, hidden_sizes=(16,), reward_model_epochs=60)
    result = train(cfg, data)
    action, probs = greedy_and_probs(result, data)
    assert action.tolist() == [0, 2]
    assert probs[0, 0] > 0.9 and probs[1, 2] > 0.9
    assert probs[1, 0] == 0.0  # illegal: exactly zero, never a small number
    # the estimate of a near-greedy best policy is near its true value (1.0 + 0.6) / 2
    assert result.estimate == pytest.approx(0.8, abs=0.08)
    assert result.logged_value == pytest.approx(float(data.reward.mean()))


def test_illegal_actions_get_no_probability_whatever_the_logged_rewards() -> None:
    data = uniform_log(300)
    result = train(OffPolicyConfig(estimator="snips", epochs=5, batch_size=100, hidden_sizes=(8,)), data)
    _, probs = greedy_and_probs(result, data)
    assert probs[1, 0].item() == 0.0
    assert probs.sum(1).tolist() == pytest.approx([1.0, 1.0])


def test_weights_are_clipped_as_configured() -> None:
    # π of the logged action 0.9, 0.5, 0.05 against μ 0.1, 0.5, 0.5
    pi = torch.tensor([[0.9, 0.1], [0.5, 0.5], [0.05, 0.95]])
    batch = LoggedDecisions(
        torch.zeros(3, 3),
        torch.ones(3, 2, dtype=torch.bool),
        torch.zeros(3, dtype=torch.long),
        torch.tensor([0.1, 0.5, 0.5]),
        torch.zeros(3),
        1,
    )
    _, w, ratio = policy_value(pi, batch, None, clip=3.0)
    assert ratio.tolist() == pytest.approx([9.0, 1.0, 0.1])
    assert w.tolist() == pytest.approx([3.0, 1.0, 0.1])


def test_the_self_normalised_estimate_by_hand() -> None:
    # Three decisions, two actions: π = (0.8, 0.2) everywhere; logged actions 0, 1, 0 at μ = 0.5
    # with rewards 1, 0, 0: ratios 1.6, 0.4, 1.6 (clip 1.5 → 1.5, 0.4, 1.5), so SNIPS is
    # (1.5·1) / (1.5 + 0.4 + 1.5) = 0.441…; DR with q̂ = 0.5 everywhere: 0.5 + mean((w/w̄)(r − 0.5)).
    mask = torch.ones(3, 2, dtype=torch.bool)
    batch = LoggedDecisions(
        torch.zeros(3, 2 + 1), mask, torch.tensor([0, 1, 0]), torch.full((3,), 0.5), torch.tensor([1.0, 0, 0]), 1
    )
    pi = torch.tensor([[0.8, 0.2]] * 3)
    snips, w, _ = policy_value(pi, batch, None, clip=1.5)
    assert w.tolist() == pytest.approx([1.5, 0.4, 1.5])
    assert snips.item() == pytest.approx(1.5 / 3.4)
    dr, _, _ = policy_value(pi, batch, torch.full((3, 2), 0.5), clip=1.5)
    w_sn = [x / (3.4 / 3) for x in (1.5, 0.4, 1.5)]
    assert dr.item() == pytest.approx(0.5 + (w_sn[0] * 0.5 - w_sn[1] * 0.5 - w_sn[2] * 0.5) / 3)


def test_a_seed_gives_the_same_policy() -> None:
    data = uniform_log(400)
    cfg = OffPolicyConfig(epochs=3, batch_size=128, hidden_sizes=(8,), reward_model_epochs=3, seed=5)
    a, b = train(cfg, data), train(cfg, data)
    for (k, x), (_, y) in zip(a.policy.state_dict().items(), b.policy.state_dict().items(), strict=True):
        assert torch.equal(x, y), k
    other = train(OffPolicyConfig(epochs=3, batch_size=128, hidden_sizes=(8,), reward_model_epochs=3, seed=6), data)
    mine, theirs = a.policy.state_dict(), other.policy.state_dict()
    assert not all(torch.equal(mine[k], theirs[k]) for k in mine)  # another seed, another policy


def test_logged_decisions_refuse_what_cannot_be_weighted() -> None:
    ok = uniform_log(10)
    with pytest.raises(ValueError, match="propensity"):
        LoggedDecisions(ok.obs, ok.mask, ok.action, torch.zeros(10), ok.reward, 1)
    illegal = torch.cat([ok.obs[:, :1], torch.tensor([[0.0, 1, 1]] * 10)], dim=1)
    with pytest.raises(ValueError, match="illegal"):
        LoggedDecisions(illegal, illegal[:, 1:] > 0.5, torch.zeros(10, dtype=torch.long), ok.propensity, ok.reward, 1)


def test_a_validation_share_keeps_the_epoch_its_greedy_policy_values_most() -> None:
    data = uniform_log(600)
    cfg = OffPolicyConfig(epochs=6, batch_size=100, hidden_sizes=(8,), validation_share=0.25)
    result = train(cfg, data)
    scores = [row["validation_greedy"] for row in result.history]
    assert len(scores) == 6 and result.validation_estimate == max(scores)
    assert result.best_epoch == max(i + 1 for i, v in enumerate(scores) if v == max(scores))  # ties: the later
    assert "validation_greedy" not in train(OffPolicyConfig(epochs=2, hidden_sizes=(8,)), data).history[0]


def test_the_pulls_weigh_the_same_whatever_the_reward_unit() -> None:
    # the value term is in units of the logged rewards' spread: clicks worth 1 or 1,000 learn alike
    data = uniform_log(400)
    scaled = LoggedDecisions(data.obs, data.mask, data.action, data.propensity, data.reward * 1000.0, 1)
    cfg = OffPolicyConfig(epochs=3, batch_size=128, hidden_sizes=(8,), behaviour_coef=0.5, entropy_coef=0.1)
    a, b = train(cfg, data), train(cfg, scaled)
    for (k, x), (_, y) in zip(a.policy.state_dict().items(), b.policy.state_dict().items(), strict=True):
        assert torch.allclose(x, y, atol=1e-5), k
    assert b.estimate == pytest.approx(1000.0 * a.estimate, rel=1e-4)
