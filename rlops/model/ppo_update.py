"""The second half of a PPO iteration: ``update_epochs`` passes of Adam over shuffled minibatches
of the flattened rollout, on the clipped surrogate, value and entropy losses
(:func:`~rlops.model.ppo_math.ppo_losses`) plus the optional EWC and action-smoothing penalties.

The default network's minibatch loss and gradient are written out (:mod:`rlops.model.ppo_grad`,
pinned against autograd); other networks and the penalties go through autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.profiler import record_function  # labelled regions for `rlops profile`; free without a profiler

from rlops.common.ppo_config import PPOConfig
from rlops.model import ppo_grad
from rlops.model.ewc import EWCPenalty
from rlops.model.masked_distributions import masked_entropy
from rlops.model.policy import PolicyNetwork
from rlops.model.ppo_math import clip_grad_norm, ppo_losses
from rlops.model.rollout import RolloutBatch
from rlops.model.training_hooks import smoothing_term


def make_optimizer(policy: PolicyNetwork, learning_rate: float) -> torch.optim.Adam:
    """Adam (ε = 1e-5, as CleanRL). The fused kernel updates every parameter in one pass instead of
    a dozen elementwise ops per tensor (a quarter of the step's cost on CPU); the update rule is the same."""
    device = next(policy.parameters()).device
    return torch.optim.Adam(policy.parameters(), lr=learning_rate, eps=1e-5, fused=device.type in ("cpu", "cuda"))


def ppo_update(
    cfg: PPOConfig,
    policy: PolicyNetwork,
    optimizer: torch.optim.Optimizer,
    gen: torch.Generator,
    ewc: EWCPenalty | None,
    ent_coef: float,
    N: int,
    minibatch_size: int,
    device: torch.device,
    batch: RolloutBatch,
) -> tuple[list[Tensor], int]:
    """``update_epochs`` passes over shuffled minibatches of the flattened ``batch``; returns the
    per-minibatch loss statistics and how many epochs ran (``target_kl`` may stop early)."""
    batch_size = batch.obs.shape[0]
    policy.train()
    # The default network's loss and gradient are written out (rlops.model.ppo_grad): the same
    # numbers as autograd, without recording and replaying a graph every minibatch.
    written_out = ppo_grad.supports(policy, ewc is not None or cfg.smoothing_coef > 0)
    fixed = ppo_grad.fixed_inputs(policy, batch.obs) if written_out else None
    params = list(policy.parameters())
    zero = torch.zeros((), device=device)
    stats: list[Tensor] = []
    epochs_run = 0
    for epoch in range(cfg.update_epochs):
        perm = torch.randperm(batch_size, generator=gen, device=device)
        for start in range(0, batch_size, minibatch_size):
            mb = perm[start : start + minibatch_size]
            with record_function("rlops/data_movement"):
                # index_select, not advanced indexing: the same rows, several times cheaper on CPU
                mb_masks, mb_actions, mb_old_logp, mb_advantages, mb_old_values, mb_returns = (
                    t.index_select(0, mb)
                    for t in (batch.masks, batch.actions, batch.logp, batch.advantages, batch.values, batch.returns)
                )
                mb_inputs = fixed.select(mb) if fixed is not None else batch.obs.index_select(0, mb)
            if isinstance(mb_inputs, ppo_grad.FixedInputs):  # labels its forward and backward itself
                pg_loss, v_loss, mb_entropy, approx_kl, old_approx_kl, clipfrac = ppo_grad.loss_and_grads(
                    policy,
                    mb_inputs,
                    mb_masks,
                    mb_actions,
                    mb_old_logp,
                    mb_advantages,
                    mb_old_values,
                    mb_returns,
                    ent_coef,
                    cfg.vf_coef,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.norm_adv,
                )
                ewc_term = smooth = zero
            else:
                with record_function("rlops/policy_forward"):
                    mb_logp_all, mb_values = policy(mb_inputs, mb_masks)
                mb_new_logp = mb_logp_all.gather(1, mb_actions.unsqueeze(1)).squeeze(1)
                mb_entropy = masked_entropy(mb_logp_all, mb_masks).mean()
                pg_loss, v_loss, approx_kl, old_approx_kl, clipfrac = ppo_losses(
                    mb_new_logp,
                    mb_old_logp,
                    mb_advantages,
                    mb_values,
                    mb_old_values,
                    mb_returns,
                    cfg.clip_coef,
                    cfg.clip_vloss,
                    cfg.norm_adv,
                )
                loss = pg_loss - ent_coef * mb_entropy + cfg.vf_coef * v_loss
                ewc_term = ewc(policy) if ewc is not None else zero
                smooth = smoothing_term(cfg, policy, mb, mb_logp_all, mb_masks, batch, N, device)
                loss = loss + ewc_term + cfg.smoothing_coef * smooth
                optimizer.zero_grad(set_to_none=True)
                with record_function("rlops/backward"):
                    loss.backward()
            with record_function("rlops/optimizer"):
                clip_grad_norm(params, cfg.max_grad_norm)
                optimizer.step()
            stats.append(
                torch.stack(
                    [
                        pg_loss.detach(),
                        v_loss.detach(),
                        mb_entropy.detach(),
                        approx_kl,
                        old_approx_kl,
                        clipfrac,
                        ewc_term.detach(),
                        smooth.detach(),
                    ]
                )
            )
        epochs_run = epoch + 1
        if cfg.target_kl is not None and float(approx_kl) > cfg.target_kl:
            break
    return stats, epochs_run


__all__ = ["make_optimizer", "ppo_update"]
