"""The written-out PPO gradient (rlops.model.ppo_grad) against autograd on the same loss."""

from __future__ import annotations

import pytest
import torch

from rlops.model.masked_distributions import masked_entropy
from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.ppo_grad import fixed_inputs, loss_and_grads, supports
from rlops.model.ppo_math import ppo_losses

F, A = 9, 5


def _batch(policy: PolicyNetwork, n: int, seed: int) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    k = policy.history_len
    mask = torch.rand(n, A, generator=gen) < 0.6
    mask[torch.arange(n), torch.randint(0, A, (n,), generator=gen)] = True  # at least one legal action
    codes = torch.randint(0, A + 1, (n, k), generator=gen).float()
    obs = torch.cat([3.0 * torch.randn(n, F, generator=gen) + 1.0, mask.float(), codes], dim=1)
    with torch.no_grad():
        logp, value = policy(obs, mask)
    actions = torch.multinomial(logp.exp(), 1, generator=gen).squeeze(1)
    old_logp = logp.gather(1, actions.unsqueeze(1)).squeeze(1) + 0.3 * torch.randn(n, generator=gen)
    advantages = torch.randn(n, generator=gen)
    old_values = value + 0.5 * torch.randn(n, generator=gen)
    returns = value + torch.randn(n, generator=gen)
    return obs, mask, actions, old_logp, advantages, old_values, returns


def _autograd(policy: PolicyNetwork, batch: tuple[torch.Tensor, ...], kw: dict) -> tuple[list, list]:
    obs, mask, actions, old_logp, adv, old_values, returns = batch
    policy.zero_grad(set_to_none=True)
    logp_all, values = policy(obs, mask)
    new_logp = logp_all.gather(1, actions.unsqueeze(1)).squeeze(1)
    entropy = masked_entropy(logp_all, mask).mean()
    pg, v, kl, okl, cf = ppo_losses(
        new_logp, old_logp, adv, values, old_values, returns, kw["clip_coef"], kw["clip_vloss"], kw["norm_adv"]
    )
    (pg - kw["ent_coef"] * entropy + kw["vf_coef"] * v).backward()
    stats = [pg.detach(), v.detach(), entropy.detach(), kl, okl, cf]
    return stats, [None if p.grad is None else p.grad.clone() for p in policy.parameters()]


CASES = {
    "default": ({"history_len": 4, "obs_norm": True}, {}),
    "no history": ({"history_len": 0, "obs_norm": True}, {}),
    "three hidden layers, no normalisation": ({"history_len": 3, "hidden_sizes": (16, 8, 12)}, {}),
    "unclipped value loss, raw advantages": ({"history_len": 2}, {"clip_vloss": False, "norm_adv": False}),
    "wide clip": ({"history_len": 4, "obs_norm": True}, {"clip_coef": 0.5, "ent_coef": 0.05}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_written_out_gradient_is_autograds(case: str) -> None:
    net_kw, loss_kw = CASES[case]
    torch.manual_seed(0)
    policy = PolicyNetwork(PolicyConfig(F, A, **{"hidden_sizes": (32, 32), "embed_dim": 8, **net_kw}))
    if policy.obs_rms is not None:
        policy.update_obs_stats(torch.randn(500, F + A + policy.history_len) * 3.0 + 1.0)
    # a few autograd steps first, so the output layers are not at their near-zero initialisation
    opt = torch.optim.Adam(policy.parameters(), lr=0.01)
    kw = {"ent_coef": 0.01, "vf_coef": 0.5, "clip_coef": 0.2, "clip_vloss": True, "norm_adv": True, **loss_kw}
    for s in range(3):
        _autograd(policy, _batch(policy, 256, 100 + s), kw)
        opt.step()
    batch = _batch(policy, 512, 7)
    want_stats, want_grads = _autograd(policy, batch, kw)
    assert supports(policy, with_penalty=False)
    policy.zero_grad(set_to_none=True)
    # as ppo_update does: the fixed inputs of the whole batch once, then a minibatch's rows of them
    whole = torch.cat([_batch(policy, 100, 8)[0], batch[0]])
    inputs = fixed_inputs(policy, whole).select(torch.arange(100, 100 + 512))
    got_stats = loss_and_grads(policy, inputs, *batch[1:], **kw)
    for got, want in zip(got_stats, want_stats, strict=True):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (got, want)
    for (name, p), want in zip(policy.named_parameters(), want_grads, strict=True):
        if want is None:
            assert p.grad is None, name
            continue
        scale = want.abs().max().clamp_min(1e-6)
        assert ((p.grad - want).abs().max() / scale) < 2e-4, (name, (p.grad - want).abs().max(), scale)


def test_other_networks_and_penalties_use_autograd() -> None:
    relu = PolicyNetwork(PolicyConfig(F, A, 2, activation="relu"))
    roles = PolicyNetwork(PolicyConfig(F, A, 2, action_roles=(0, 0, 1, 1, 1)))
    plain = PolicyNetwork(PolicyConfig(F, A, 2))
    assert not supports(relu, with_penalty=False)
    assert not supports(roles, with_penalty=False)
    assert not supports(plain, with_penalty=True)
    assert supports(plain, with_penalty=False)
