"""The two records PPO's loop passes around: the storage one rollout fills and the flattened batch
the update reads (as Stable-Baselines3's ``RolloutBuffer`` and ``RolloutBufferSamples``).

Both are ``NamedTuple`` s of tensors: reading a field is an attribute lookup, nothing is copied.
``T`` is the rollout length (steps per env), ``N`` the number of envs, ``D`` the observation width,
``A`` the number of actions; a batch row ``t * N + n`` is step ``t`` of env ``n``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor


class RolloutBuffers(NamedTuple):
    """One rollout's storage (``T`` steps × ``N`` envs, on the env's device), reused every iteration."""

    obs: Tensor
    """``[T, N, D]`` float: the observation the action was chosen on."""
    final_obs: Tensor
    """``[T, N, D]`` float: the last observation of an episode the step ended (the env resets in that step)."""
    masks: Tensor
    """``[T, N, A]`` bool: the actions that were legal on ``obs``."""
    actions: Tensor
    """``[T, N]`` long: the action taken."""
    logp: Tensor
    """``[T, N]`` float: its log-probability under the rollout's policy."""
    rewards: Tensor
    """``[T, N]`` float: the reward of the step (scaled when ``reward_scale`` is on)."""
    values: Tensor
    """``[T, N]`` float: V(obs) under the rollout's policy."""
    terminated: Tensor
    """``[T, N]`` bool: the step ended the episode in a terminal state (bootstrap value 0)."""
    truncated: Tensor
    """``[T, N]`` bool: the step cut the episode off at the horizon (bootstrap from V(final_obs))."""

    @classmethod
    def zeros(cls, T: int, N: int, D: int, A: int, device: torch.device) -> RolloutBuffers:
        """Zeroed storage for ``T`` steps of ``N`` envs with observations of ``D`` features and ``A`` actions."""
        return cls(
            obs=torch.zeros((T, N, D), device=device),
            final_obs=torch.zeros((T, N, D), device=device),
            masks=torch.zeros((T, N, A), dtype=torch.bool, device=device),
            actions=torch.zeros((T, N), dtype=torch.long, device=device),
            logp=torch.zeros((T, N), device=device),
            rewards=torch.zeros((T, N), device=device),
            values=torch.zeros((T, N), device=device),
            terminated=torch.zeros((T, N), dtype=torch.bool, device=device),
            truncated=torch.zeros((T, N), dtype=torch.bool, device=device),
        )

    def flatten(self, advantages: Tensor, returns: Tensor) -> RolloutBatch:
        """The rollout as ``T * N`` rows (views of the storage, row ``t * N + n``), with the
        ``[T, N]`` ``advantages`` and ``returns`` GAE computed from it."""
        T, N, D = self.obs.shape
        batch_size = T * N
        return RolloutBatch(
            obs=self.obs.reshape(batch_size, D),
            masks=self.masks.reshape(batch_size, self.masks.shape[-1]),
            actions=self.actions.reshape(-1),
            logp=self.logp.reshape(-1),
            advantages=advantages.reshape(-1),
            returns=returns.reshape(-1),
            values=self.values.reshape(-1),
            done=(self.terminated | self.truncated).reshape(-1),
        )


class RolloutBatch(NamedTuple):
    """The flattened samples of one rollout that the PPO update reads (``B = T * N`` rows, row ``t * N + n``)."""

    obs: Tensor
    """``[B, D]`` float: the observation the action was chosen on."""
    masks: Tensor
    """``[B, A]`` bool: the actions that were legal on it."""
    actions: Tensor
    """``[B]`` long: the action taken."""
    logp: Tensor
    """``[B]`` float: its log-probability under the rollout's (old) policy."""
    advantages: Tensor
    """``[B]`` float: the GAE(λ) advantage of the action."""
    returns: Tensor
    """``[B]`` float: the value target, ``advantages + values``."""
    values: Tensor
    """``[B]`` float: V(obs) under the rollout's (old) policy, the centre of the value clipping."""
    done: Tensor
    """``[B]`` bool: the step ended its episode (terminated or truncated): row ``+ N`` is another episode."""


__all__ = ["RolloutBatch", "RolloutBuffers"]
