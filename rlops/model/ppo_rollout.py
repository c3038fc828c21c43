"""The first half of a PPO iteration: the rollout (``T`` steps of all ``N`` envs with the current
policy, into :class:`~rlops.model.rollout.RolloutBuffers`) and its advantages (GAE(λ), bootstrapped
from the critic where an episode was truncated). Both run under ``torch.no_grad()`` on the env's
device, with no host sync inside the step loop.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.profiler import record_function  # labelled regions for `rlops profile`; free without a profiler

from rlops.common.ppo_config import PPOConfig
from rlops.model.masked_distributions import gumbel_sample
from rlops.model.normalize import ReturnScaler
from rlops.model.policy import PolicyNetwork
from rlops.model.ppo_math import compute_gae
from rlops.model.rollout import RolloutBuffers


def collect_rollout(
    policy: PolicyNetwork,
    env: Any,
    gen: torch.Generator,
    scaler: ReturnScaler | None,
    bufs: RolloutBuffers,
    next_obs: Tensor,
    next_mask: Tensor,
    T: int,
    device: torch.device,
) -> tuple[Tensor, Tensor, tuple[Tensor, Tensor, Tensor, Tensor, Tensor]]:
    """T steps of all N envs into ``bufs``, no host sync; call under ``torch.no_grad()``. Returns the
    next observation and mask, and the summed ``(return, length, count, illegal actions, human
    takeovers)`` of the episodes that ended."""
    ep_ret = torch.zeros((), device=device)
    ep_len = torch.zeros((), device=device)
    ep_cnt = torch.zeros((), device=device)
    illegal = torch.zeros((), device=device)
    takeover = torch.zeros((), device=device)
    for t in range(T):
        bufs.obs[t], bufs.masks[t] = next_obs, next_mask
        with record_function("rlops/policy_forward"):
            logp_all, value = policy(next_obs, next_mask)
            action = gumbel_sample(logp_all, gen)
        bufs.actions[t], bufs.values[t] = action, value
        bufs.logp[t] = logp_all.gather(1, action.unsqueeze(1)).squeeze(1)
        next_obs, reward, terminated, truncated, info = env.step(action)
        next_mask = env.action_masks()
        bufs.rewards[t] = reward if scaler is None else scaler(reward, terminated | truncated)
        bufs.terminated[t], bufs.truncated[t] = terminated, truncated
        bufs.final_obs[t] = info.final_obs
        done = (terminated | truncated).float()
        ep_ret += (info.episode_return * done).sum()
        ep_len += (info.episode_length * done).sum()
        ep_cnt += done.sum()
        illegal += info.illegal.sum()
        takeover += (info.human_takeover & (terminated | truncated)).sum()
    return next_obs, next_mask, (ep_ret, ep_len, ep_cnt, illegal, takeover)


def bootstrap_gae(
    cfg: PPOConfig, policy: PolicyNetwork, bufs: RolloutBuffers, next_obs: Tensor
) -> tuple[Tensor, Tensor]:
    """Advantages and returns ``[T, N]`` of the rollout in ``bufs``; call under ``torch.no_grad()``."""
    T, N = bufs.rewards.shape
    final_values = torch.zeros((T, N), device=bufs.rewards.device)
    trunc_idx = bufs.truncated.nonzero(as_tuple=True)  # one sync per iteration
    if trunc_idx[0].numel():
        final_values[trunc_idx] = policy.get_value(bufs.final_obs[trunc_idx])
    next_value = policy.get_value(next_obs)
    with record_function("rlops/advantages"):
        return compute_gae(
            bufs.rewards,
            bufs.values,
            next_value,
            bufs.terminated,
            bufs.truncated,
            final_values,
            cfg.gamma,
            cfg.gae_lambda,
        )


__all__ = ["bootstrap_gae", "collect_rollout"]
