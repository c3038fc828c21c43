"""PPO arithmetic: GAE across terminations and truncations, the clipped losses, and the helpers
the training loop reports with."""

from __future__ import annotations

import math

import pytest
import torch

from rlops.model.ewc import smoothing_kl
from rlops.model.masked_distributions import masked_log_probs
from rlops.model.ppo import StagnationMonitor
from rlops.model.ppo_math import compute_gae, explained_variance, ppo_losses

# One env, 8 steps: episode A = steps 0-2 (terminates at 2), episode B = steps 3-5 (truncated at 5,
# final observation worth 6), episode C = steps 6-7 (still running; V(next obs) = 8).
REWARDS = [0.0, 0.0, 4.0, 0.0, 0.0, 2.0, 0.0, 1.0]
VALUES = [1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 4.0, 4.0]
TERMINATED = [False, False, True, False, False, False, False, False]
TRUNCATED = [False, False, False, False, False, True, False, False]
FINAL_VALUE_AT_TRUNCATION = 6.0
NEXT_VALUE = 8.0


def _gae(gamma: float, lam: float, garbage_final: float = 100.0) -> tuple[torch.Tensor, torch.Tensor]:
    col = lambda xs, dt=torch.float32: torch.tensor(xs, dtype=dt).unsqueeze(1)  # noqa: E731 - [T, 1]
    final = torch.full((8, 1), garbage_final)  # only read where truncated
    final[5, 0] = FINAL_VALUE_AT_TRUNCATION
    adv, ret = compute_gae(
        col(REWARDS),
        col(VALUES),
        torch.tensor([NEXT_VALUE]),
        col(TERMINATED, torch.bool),
        col(TRUNCATED, torch.bool),
        final,
        gamma,
        lam,
    )
    return adv.squeeze(1), ret.squeeze(1)


def test_gae_by_hand_with_termination_and_truncation() -> None:
    # gamma = lambda = 0.5 (gamma*lambda = 0.25). TD errors, worked out by hand:
    #   d7 = 1 + .5*8 - 4 = 1        (bootstrap from the obs after the rollout)
    #   d6 = 0 + .5*4 - 4 = -2
    #   d5 = 2 + .5*6 - 2 = 3        (truncated: bootstrap from V(final obs) = 6)
    #   d4 = 0 + .5*2 - 2 = -1,  d3 = -1
    #   d2 = 4 + 0 - 1 = 3           (terminated: no bootstrap)
    #   d1 = 0 + .5*1 - 1 = -0.5, d0 = -0.5
    # Advantages A_t = d_t + .25 * A_{t+1}, cut at every episode end:
    expected_adv = [-0.4375, 0.25, 3.0, -1.0625, -0.25, 3.0, -1.75, 1.0]
    adv, ret = _gae(0.5, 0.5)
    assert adv.tolist() == pytest.approx(expected_adv, abs=1e-6)
    assert ret.tolist() == pytest.approx([a + v for a, v in zip(expected_adv, VALUES)], abs=1e-6)


def test_gae_with_lambda_one_is_the_monte_carlo_return_per_episode() -> None:
    adv, ret = _gae(1.0, 1.0)
    # A: 0+0+4 from every step; B: 0+0+2 plus the truncation bootstrap 6; C: 0+1 plus V(next) = 8.
    assert ret.tolist() == pytest.approx([4, 4, 4, 8, 8, 8, 9, 9], abs=1e-6)


def test_gae_ignores_final_values_where_not_truncated() -> None:
    a1, _ = _gae(0.9, 0.95, garbage_final=100.0)
    a2, _ = _gae(0.9, 0.95, garbage_final=-7.0)
    assert torch.equal(a1, a2)


def test_gae_is_batched_per_env() -> None:
    T, N = 6, 5
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(T, N, generator=g), torch.randn(T, N, generator=g)
    term, trunc = torch.rand(T, N, generator=g) < 0.2, torch.rand(T, N, generator=g) < 0.1
    trunc &= ~term
    fv, nv = torch.randn(T, N, generator=g), torch.randn(N, generator=g)
    adv, _ = compute_gae(r, v, nv, term, trunc, fv, 0.99, 0.95)
    for n in range(N):
        a_n, _ = compute_gae(
            r[:, n : n + 1],
            v[:, n : n + 1],
            nv[n : n + 1],
            term[:, n : n + 1],
            trunc[:, n : n + 1],
            fv[:, n : n + 1],
            0.99,
            0.95,
        )
        assert torch.allclose(adv[:, n], a_n[:, 0])


def test_clipped_surrogate_stops_the_gradient_outside_the_clip_range() -> None:
    old = torch.zeros(4)
    new = torch.tensor([0.5, 0.5, -0.5, 0.05], requires_grad=True)  # ratios e^.5, e^.5, e^-.5, e^.05
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    vals = torch.zeros(4)
    pg, _, _, _, clipfrac = ppo_losses(new, old, adv, vals, vals, vals, 0.2, False, norm_adv=False)
    pg.backward()
    # Positive advantage with ratio above 1+eps and negative advantage with ratio below 1-eps are
    # clipped (no gradient); the other two keep theirs.
    assert new.grad[0] == 0 and new.grad[2] == 0
    assert new.grad[1] != 0 and new.grad[3] != 0
    assert clipfrac.item() == pytest.approx(0.75)


def test_value_clipping_takes_the_pessimistic_loss() -> None:
    old_v, ret = torch.tensor([0.0]), torch.tensor([1.0])
    new_v = torch.tensor([0.9])
    z = torch.zeros(1)
    _, v_unclipped, *_ = ppo_losses(z, z, z, new_v, old_v, ret, 0.2, False, False)
    _, v_clipped, *_ = ppo_losses(z, z, z, new_v, old_v, ret, 0.2, True, False)
    assert v_unclipped.item() == pytest.approx(0.5 * 0.1**2)
    assert v_clipped.item() == pytest.approx(0.5 * 0.8**2)  # clipped to 0.2: error 0.8


def test_approx_kl_is_zero_for_an_unchanged_policy() -> None:
    lp = torch.log(torch.tensor([0.2, 0.5, 0.3]))
    _, _, kl, old_kl, clipfrac = ppo_losses(
        lp, lp, torch.ones(3), torch.zeros(3), torch.zeros(3), torch.zeros(3), 0.2, False, False
    )
    assert kl.item() == 0 and old_kl.item() == 0 and clipfrac.item() == 0


def test_explained_variance() -> None:
    ret = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(ret, ret) == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), ret.mean().item()), ret) == pytest.approx(0.0)
    assert math.isnan(explained_variance(ret, torch.ones(4)))


def test_stagnation_flags_after_window_without_improvement() -> None:
    mon = StagnationMonitor(window=3, tol=0.01)
    flags = [mon.update(x) for x in [0.1, 0.5, 0.502, 0.505, 0.4, 0.9, 0.9, float("nan"), 0.9]]
    # 0.502 / 0.505 are within 1% of max(1, |best|) of 0.5: not movement.
    assert flags == [False, False, False, False, True, False, False, False, True]
    restored = StagnationMonitor(3, 0.01)
    restored.load_state_dict(mon.state_dict())
    assert restored.update(0.9) == mon.update(0.9)


def test_smoothing_kl_uses_the_common_legal_support() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, 5.0], [2.0, 1.0, 0.0, 5.0], [0.0, 0.0, 0.0, 0.0]])
    m_t = torch.tensor([[True, True, True, False], [True, True, False, False], [True, False, False, True]])
    m_n = torch.tensor([[True, True, True, True], [True, False, True, False], [True, False, False, True]])
    nxt = torch.tensor([[2.0, 1.0, 0.0, -3.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 3.0]])
    lp, lq = masked_log_probs(logits, m_t), masked_log_probs(nxt, m_n)
    valid = torch.ones(3, dtype=torch.bool)
    per_row = [
        smoothing_kl(lp[i : i + 1], m_t[i : i + 1], lq[i : i + 1], m_n[i : i + 1], valid[i : i + 1]) for i in range(3)
    ]
    # Row 0: same preferences over the common actions {0, 1, 2} once renormalised: KL 0.
    assert per_row[0].item() == pytest.approx(0.0, abs=1e-6)
    # Row 1: a single common action carries no preference.
    assert per_row[1].item() == 0.0
    # Row 2: uniform vs (0, 3) logits over {0, 3}.
    q = torch.softmax(torch.tensor([0.0, 3.0]), 0)
    expected = float((0.5 * (torch.log(torch.tensor(0.5)) - q.log())).sum())
    assert per_row[2].item() == pytest.approx(expected, rel=1e-5)
    assert not smoothing_kl(lp, m_t, lq, m_n, torch.zeros(3, dtype=torch.bool)).item()


# ---------------------------------------------------------------------------- normalisation and defaults
def test_running_mean_std_equals_the_statistics_of_all_rows_seen() -> None:
    from rlops.model.normalize import RunningMeanStd

    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(n, 3, generator=g) * torch.tensor([1.0, 5.0, 0.1]) + 2.0 for n in (7, 1, 30)]
    rms = RunningMeanStd(3, prior_count=0.0 + 1e-12)
    for b in batches:
        rms.update(b)
    every = torch.cat(batches)
    assert torch.allclose(rms.mean, every.mean(0), atol=1e-5)
    assert torch.allclose(rms.var, every.var(0, unbiased=False), rtol=1e-4)
    assert float(rms.count) == pytest.approx(38.0)
    z = rms.normalize(every, clip=100.0)
    assert torch.allclose(z.mean(0), torch.zeros(3), atol=1e-4)
    assert float(rms.normalize(torch.full((1, 3), 1e6), clip=5.0).max()) == 5.0


def test_return_scaler_divides_by_the_std_of_the_discounted_return_and_resets_on_done() -> None:
    from rlops.model.normalize import ReturnScaler

    sc = ReturnScaler(num_envs=2, gamma=0.5, device=torch.device("cpu"))
    r = torch.tensor([1.0, 2.0])
    out = sc(r, torch.tensor([False, True]))
    # After one step the running returns are [1, 2] (var 0.25 with a tiny prior), env 1's is reset.
    assert torch.allclose(sc.ret, torch.tensor([1.0, 0.0]))
    assert torch.allclose(out, r / torch.sqrt(sc.rms.var + 1e-8))
    sc(torch.tensor([1.0, 1.0]), torch.tensor([False, False]))
    assert torch.allclose(sc.ret, torch.tensor([1.5, 1.0]))  # 0.5 * 1 + 1 and 0.5 * 0 + 1
    sd = sc.state_dict()
    other = ReturnScaler(2, 0.5, torch.device("cpu"))
    other.load_state_dict(sd)
    assert torch.equal(other.ret, sc.ret) and torch.equal(other.rms.var, sc.rms.var)


def test_eval_plateau_stops_after_patience_and_keeps_the_best_weights() -> None:
    from rlops.model.early_stop import EvalPlateau

    net = torch.nn.Linear(2, 1)
    plateau = EvalPlateau.__new__(EvalPlateau)
    plateau.every, plateau.seed, plateau.patience, plateau.min_delta = 1, 0, 2, 0.01
    plateau.env, plateau.best, plateau.since = object(), -math.inf, 0
    plateau.best_iteration, plateau.best_state = 0, None
    returns = iter([1.0, 2.0, 2.005, 1.5])
    plateau.evaluate = lambda policy, reward_fn: next(returns)  # type: ignore[method-assign]
    seen = []
    for it in range(1, 5):
        with torch.no_grad():
            net.weight.fill_(float(it))
        seen.append(plateau.update(it, net, None))
    assert [stop for _, stop in seen] == [False, False, False, True]  # 2.005 is within min_delta of 2.0
    assert plateau.best == pytest.approx(2.005) and plateau.best_iteration == 3
    assert plateau.restore_best(net) and float(net.weight[0, 0].detach()) == 3.0


def test_defaults_are_derived_from_horizon_and_action_count() -> None:
    from types import SimpleNamespace

    from rlops.model.pack_defaults import derive_defaults

    short = SimpleNamespace(horizon=10, actions=[None] * 7)
    plan = derive_defaults(short)
    assert (plan.num_envs, plan.config.num_steps, plan.config.num_minibatches, plan.config.gamma) == (1024, 8, 4, 0.99)
    long = SimpleNamespace(horizon=40, actions=[None] * 12)
    plan = derive_defaults(long)
    # 32 steps (half of 40, next power of two); a batch of 12 × 1024 = 12,288 → 384 → 512 envs.
    assert (plan.num_envs, plan.config.num_steps, plan.config.num_minibatches) == (512, 32, 8)
    assert plan.config.gamma == pytest.approx(0.9975)
    assert set(plan.reasons) == {"num_steps", "num_envs", "num_minibatches", "gamma"}
    over = derive_defaults(long, num_envs=64, gamma=0.9, learning_rate=1e-3)
    assert (over.num_envs, over.config.gamma, over.config.learning_rate) == (64, 0.9, 1e-3)
    assert derive_defaults(short, device="cuda").num_envs == 1024 * 16
