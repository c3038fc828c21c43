"""The PPO minibatch loss and its gradient written out, for the default actor-critic.

On a CPU core the update of a small policy is bounded by bookkeeping, not by arithmetic: autograd
records ~120 nodes a minibatch and replays them, and each ATen call costs a few microseconds
whatever its size. This module computes the same loss and the same gradients as autograd over
:class:`~rlops.model.policy.PolicyNetwork` and :func:`~rlops.model.ppo_math.ppo_losses`, by the chain
rule written down once: a forward pass without graph recording that keeps what the backward
needs, then the backward as ~60 plain tensor ops (matrix products, no autograd engine).
``tests/model/test_ppo_grad.py`` pins it against autograd on every supported configuration.

It covers the network every pack trains by default (one actor head, ``tanh`` hidden layers of any
depth, with or without the action-history attention and feature standardisation);
:func:`supports` says when it applies, and :func:`rlops.model.ppo_update.ppo_update` falls back to
autograd otherwise (multi-role heads, ``relu``, an EWC or smoothing penalty).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor
from torch.profiler import record_function  # labelled regions for `rlops profile`

from rlops.model.fast_ops import softmax_rows, sum_by_code
from rlops.model.masked_distributions import masked_log_probs, probs_of
from rlops.model.policy import PolicyNetwork


def supports(policy: PolicyNetwork, with_penalty: bool) -> bool:
    """Whether :func:`loss_and_grads` computes this policy's update (else use autograd)."""
    return not with_penalty and not policy.config.action_roles and policy.config.activation == "tanh"


class FixedInputs(NamedTuple):
    """What of each row's input an update does not change: the state as the network sees it
    (normalised features and the action mask; the feature statistics move between iterations
    only) and the history's action codes. Computed once per batch, not once per minibatch."""

    state: Tensor
    """``[N, F + A]``"""
    codes: Tensor | None
    """``[N, k]`` long (:meth:`PolicyNetwork.history_codes`), or None without the history attention"""

    def select(self, rows: Tensor) -> FixedInputs:
        """The inputs of ``rows`` (a minibatch)."""
        codes = None if self.codes is None else self.codes.index_select(0, rows)
        return FixedInputs(self.state.index_select(0, rows), codes)


@torch.no_grad()
def fixed_inputs(policy: PolicyNetwork, obs: Tensor) -> FixedInputs:
    """The :class:`FixedInputs` of observations ``obs[N, D]``."""
    return FixedInputs(policy.state_inputs(obs), policy.history_codes(obs) if policy.use_history else None)


def _mlp_forward(layers: list[torch.nn.Linear], x: Tensor) -> tuple[Tensor, list[Tensor]]:
    """Hidden activations (``tanh``) of each layer and the last layer's output."""
    acts = [x]
    for lin in layers[:-1]:
        # tanh(u) = 2σ(2u) − 1, the same function as fast_ops.fast_tanh
        h = torch.addmm(lin.bias, acts[-1], lin.weight.t(), beta=2.0, alpha=2.0).sigmoid_().mul_(2.0).sub_(1.0)
        acts.append(h)
    out = torch.addmm(layers[-1].bias, acts[-1], layers[-1].weight.t())
    return out, acts


def _mlp_backward(
    layers: list[torch.nn.Linear], acts: list[Tensor], d_out: Tensor, grads: dict[Tensor, Tensor]
) -> Tensor:
    """Weight and bias gradients of every layer into ``grads``; returns the pre-activation gradient
    of the first layer (its input gradient is ``that @ W1``)."""
    d = d_out
    for i in range(len(layers) - 1, -1, -1):
        lin = layers[i]
        grads[lin.weight] = d.t() @ acts[i]
        grads[lin.bias] = d.sum(0)
        if i == 0:
            return d
        d = torch.ops.aten.tanh_backward(d @ lin.weight, acts[i])  # · (1 − tanh²), one kernel
    return d


def loss_and_grads(
    policy: PolicyNetwork,
    inputs: FixedInputs,
    mask: Tensor,
    actions: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    old_values: Tensor,
    returns: Tensor,
    ent_coef: float,
    vf_coef: float,
    clip_coef: float,
    clip_vloss: bool,
    norm_adv: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Set ``p.grad`` of every parameter to the gradient of the PPO loss on one minibatch, whose
    observations are given as their :func:`fixed_inputs`.

    Returns ``pg_loss, v_loss, entropy, approx_kl, old_approx_kl, clipfrac`` as
    :func:`rlops.model.ppo_math.ppo_losses` (and the entropy mean) would.
    """
    state, codes = inputs
    n = state.shape[0]
    A, E = policy.n_actions, policy.embed_dim
    actor = [m for m in policy.actor.modules() if isinstance(m, torch.nn.Linear)]
    critic = [m for m in policy.critic.modules() if isinstance(m, torch.nn.Linear)]
    grads: dict[Tensor, Tensor] = {}
    with torch.no_grad(), record_function("rlops/policy_forward"):
        # ---- forward, keeping what the backward needs
        S = state.shape[1]
        if codes is not None:  # [n, k]
            C = A + 1
            table_k, table_v = policy.history_tables()  # [C + k, E] each
            scale = 1.0 / math.sqrt(E)
            q = torch.addmm(policy.query.bias, state, policy.query.weight.t(), beta=scale, alpha=scale)
            q_table = q @ table_k.t()  # [n, C + k]
            scores = q_table[:, :C].gather(1, codes).add_(q_table[:, C:])
            w = softmax_rows(scores)  # [n, k]
            mass = torch.cat([sum_by_code(w, codes, C), w], dim=-1)  # [n, C + k]
            x = torch.cat([state, mass @ table_v], dim=-1)
        else:
            x = state
        logits, a_acts = _mlp_forward(actor, x)
        value, c_acts = _mlp_forward(critic, x)
        value = value.squeeze(-1)
        logp = masked_log_probs(logits, mask)  # [n, A]
        p = probs_of(logp)  # masked entries ~1.6e-38, not 0: every use below zeroes them by the mask
        new_logp = logp.gather(1, actions.unsqueeze(1)).squeeze(1)

        # ---- the loss (as ppo_losses)
        logratio = new_logp - old_logp
        ratio = logratio.exp()
        old_approx_kl = (-logratio).mean()
        approx_kl = ((ratio - 1) - logratio).mean()
        clipfrac = ((ratio - 1.0).abs() > clip_coef).float().mean()
        adv = (advantages - advantages.mean()) / (advantages.std() + 1e-8) if norm_adv else advantages
        unclipped = -adv * ratio
        clipped = -adv * ratio.clamp(1 - clip_coef, 1 + clip_coef)
        pg_loss = torch.max(unclipped, clipped).mean()
        plogp = torch.where(mask, p * logp, torch.zeros_like(logp))
        entropy = -plogp.sum(-1).mean()
        diff = value - returns
        if clip_vloss:
            delta = value - old_values
            in_range = delta.abs() <= clip_coef
            diff_clipped = old_values + delta.clamp(-clip_coef, clip_coef) - returns
            sq, sq_clipped = diff * diff, diff_clipped * diff_clipped
            v_loss = 0.5 * torch.max(sq, sq_clipped).mean()
        else:
            v_loss = 0.5 * (diff * diff).mean()

    with torch.no_grad(), record_function("rlops/backward"):
        # ---- backward: the policy head. torch.max passes the gradient to the larger side, half to
        # each on a tie; there the clipped side is the unclipped one (ratio inside the range).
        d_ratio = torch.where(unclipped >= clipped, -adv / n, torch.zeros_like(adv))
        d_logp = torch.where(mask, p * (logp + 1.0), torch.zeros_like(logp)).mul_(ent_coef / n)
        d_logp.scatter_add_(1, actions.unsqueeze(1), (d_ratio * ratio).unsqueeze(1))
        d_logits = (d_logp - p * d_logp.sum(-1, keepdim=True)).masked_fill_(~mask, 0.0)
        # ---- the value head
        if clip_vloss:
            d_value = torch.where(
                sq > sq_clipped,
                diff,
                torch.where(sq < sq_clipped, diff_clipped * in_range, 0.5 * (diff + diff_clipped * in_range)),
            )
        else:
            d_value = diff
        d_value = d_value.mul_(vf_coef / n).unsqueeze(1)

        d_a = _mlp_backward(actor, a_acts, d_logits, grads)
        d_c = _mlp_backward(critic, c_acts, d_value, grads)
        if codes is not None:
            # ---- the history attention (see PolicyNetwork._inputs)
            d_ctx = d_a @ actor[0].weight[:, S:] + d_c @ critic[0].weight[:, S:]  # [n, E]
            d_table_v = mass.t() @ d_ctx  # [C + k, E]
            d_mass = d_ctx @ table_v.t()  # [n, C + k]
            d_w = d_mass[:, :C].gather(1, codes).add_(d_mass[:, C:])
            d_scores = w * (d_w - (w * d_w).sum(-1, keepdim=True))
            d_q_table = torch.cat([sum_by_code(d_scores, codes, C), d_scores], dim=-1)
            d_table_k = d_q_table.t() @ q
            d_q = (d_q_table @ table_k).mul_(scale)
            grads[policy.query.weight] = d_q.t() @ state
            grads[policy.query.bias] = d_q.sum(0)
            d_code_kv = torch.cat([d_table_k[:C], d_table_v[:C]], dim=1)  # [C, 2E]
            d_pos_kv = torch.cat([d_table_k[C:], d_table_v[C:]], dim=1)  # [k, 2E]
            kv = policy.key_value
            grads[kv.weight] = d_code_kv.t() @ policy.action_embed.weight + d_pos_kv.t() @ policy.pos_embed
            grads[kv.bias] = d_code_kv.sum(0)
            grads[policy.action_embed.weight] = d_code_kv @ kv.weight
            grads[policy.pos_embed] = d_pos_kv @ kv.weight
        for prm in policy.parameters():
            prm.grad = grads.get(prm)  # None for a parameter the loss does not use, as autograd leaves it
    return pg_loss, v_loss, entropy, approx_kl, old_approx_kl, clipfrac


__all__ = ["FixedInputs", "fixed_inputs", "loss_and_grads", "supports"]
