"""The equations of PPO, as tensor functions: GAE(λ) advantages and returns (:func:`compute_gae`),
the clipped surrogate and value losses with their diagnostics (:func:`ppo_losses`), the global
gradient-norm clip (:func:`clip_grad_norm`) and the critic's explained variance
(:func:`explained_variance`). :mod:`rlops.model.ppo` runs them in its loop.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def compute_gae(
    rewards: Tensor,
    values: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    truncated: Tensor,
    final_values: Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[Tensor, Tensor]:
    """GAE(λ) advantages and returns for a rollout of ``T`` steps × ``N`` envs (same-step autoreset).

    ``values[t]`` is V(obs_t); ``next_value`` is V of the observation after the last step. When
    step ``t`` ends an episode, obs_{t+1} already belongs to the next episode, so the bootstrap
    value is 0 if it *terminated* and ``final_values[t]`` = V(final obs) if it was *truncated*;
    either way the advantage does not flow back across the boundary.
    """
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(next_value)
    for t in reversed(range(T)):
        nxt = next_value if t == T - 1 else values[t + 1]
        nxt = torch.where(truncated[t], final_values[t], nxt)
        delta = rewards[t] + gamma * nxt * (~terminated[t]).to(rewards.dtype) - values[t]
        last = delta + gamma * gae_lambda * (~(terminated[t] | truncated[t])).to(rewards.dtype) * last
        advantages[t] = last
    return advantages, advantages + values


def ppo_losses(
    new_logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    new_values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    clip_coef: float,
    clip_vloss: bool,
    norm_adv: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Clipped surrogate and value losses for one minibatch →
    ``pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac``."""
    logratio = new_logp - old_logp
    ratio = logratio.exp()
    with torch.no_grad():
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
    if norm_adv:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    pg_loss = torch.max(-advantages * ratio, -advantages * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if clip_vloss:
        v_clipped = old_values + (new_values - old_values).clamp(-clip_coef, clip_coef)
        v_loss = 0.5 * torch.max((new_values - returns) ** 2, (v_clipped - returns) ** 2).mean()
    else:
        v_loss = 0.5 * ((new_values - returns) ** 2).mean()
    return pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac


def clip_grad_norm(params: Sequence[Tensor], max_norm: float) -> Tensor:
    """Scale the gradients so that their global L2 norm is at most ``max_norm``; returns the norm
    before scaling. ``torch.nn.utils.clip_grad_norm_`` computes the same, but on CPU one tensor at a
    time (its fused path is for accelerators): here one norm kernel and one multiply over all of them."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    total: Tensor = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    torch._foreach_mul_(grads, (max_norm / (total + 1e-6)).clamp_(max=1.0))
    return total


def explained_variance(values: Tensor, returns: Tensor) -> float:
    var = returns.var()
    return float("nan") if float(var) == 0 else float(1 - (returns - values).var() / var)


__all__ = ["clip_grad_norm", "compute_gae", "explained_variance", "ppo_losses"]
