"""Regularisers for policy training: the EWC penalty (incremental retrains) and action smoothing.

*Elastic weight consolidation* keeps a warm-started policy close to its starting weights where
they matter for the decisions it already makes: the penalty is
``λ/2 · Σ_i F_i (θ_i − θ*_i)²`` with ``F`` the diagonal Fisher information of the policy's
log-likelihood on recent states, estimated from exact per-sample gradients (``torch.func``) with
actions drawn from the policy itself.

*Action smoothing* penalises the KL divergence between the action distributions of consecutive
steps of one episode. Consecutive states usually have different legal actions, so the KL is taken
over the actions legal in both, each distribution renormalised to that common support.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from rlops.model.masked_distributions import gumbel_sample, masked_log_probs
from rlops.model.policy import PolicyNetwork


@dataclass
class EWCPenalty:
    """Anchor weights ``θ*`` and their diagonal Fisher ``F`` (same keys as ``named_parameters``)."""

    anchor: dict[str, Tensor]
    fisher: dict[str, Tensor]
    lam: float

    def __call__(self, model: nn.Module) -> Tensor:
        total = torch.zeros((), device=next(model.parameters()).device)
        for name, p in model.named_parameters():
            f = self.fisher.get(name)
            if f is not None:
                total = total + (f * (p - self.anchor[name]).pow(2)).sum()
        return 0.5 * self.lam * total

    def state_dict(self) -> dict[str, dict[str, Tensor]]:
        return {"anchor": self.anchor, "fisher": self.fisher}

    @classmethod
    def from_state_dict(cls, sd: dict[str, dict[str, Tensor]], lam: float) -> EWCPenalty:
        return cls(dict(sd["anchor"]), dict(sd["fisher"]), lam)


def diagonal_fisher(
    policy: PolicyNetwork, obs: Tensor, masks: Tensor, generator: torch.Generator | None = None, chunk: int = 512
) -> dict[str, Tensor]:
    """Mean squared per-sample gradient of ``log π(a|s)``, ``a ~ π(·|s)``, over the rows of ``obs``."""
    from torch.func import functional_call, grad, vmap

    params = {k: v.detach() for k, v in policy.named_parameters()}
    with torch.no_grad():
        logp, _ = policy(obs, masks)
        actions = gumbel_sample(logp, generator)

    def logp_one(p: dict[str, Tensor], o: Tensor, m: Tensor, a: Tensor) -> Tensor:
        lp, _ = functional_call(policy, p, (o.unsqueeze(0), m.unsqueeze(0)))
        logp: Tensor = lp[0].gather(0, a.unsqueeze(0)).squeeze(0)
        return logp

    per_sample = vmap(grad(logp_one), in_dims=(None, 0, 0, 0))
    fisher = {k: torch.zeros_like(v) for k, v in params.items()}
    for start in range(0, obs.shape[0], chunk):
        g = per_sample(params, obs[start : start + chunk], masks[start : start + chunk], actions[start : start + chunk])
        for k in fisher:
            fisher[k] += g[k].pow(2).sum(0)
    n = max(obs.shape[0], 1)
    return {k: v / n for k, v in fisher.items()}


def make_ewc(
    policy: PolicyNetwork, obs: Tensor, masks: Tensor, lam: float, generator: torch.Generator | None = None
) -> EWCPenalty:
    """Anchor the current weights of ``policy`` with the Fisher on ``obs``."""
    anchor = {k: v.detach().clone() for k, v in policy.named_parameters()}
    return EWCPenalty(anchor, diagonal_fisher(policy, obs, masks, generator), lam)


def smoothing_kl(logp: Tensor, mask: Tensor, next_logp: Tensor, next_mask: Tensor, valid: Tensor) -> Tensor:
    """Mean KL(π_t ‖ π_{t+1}) over the actions legal at both steps, over rows where ``valid``.

    ``logp``/``next_logp`` are masked log-probabilities ``[B, A]``; rows whose common support has
    fewer than two actions carry no preference to smooth and count as 0.
    """
    common = mask & next_mask
    p = masked_log_probs(logp, common)
    q = masked_log_probs(next_logp, common)
    kl = torch.where(common, p.exp() * (p - q), torch.zeros_like(p)).sum(-1)
    use = valid & (common.sum(-1) >= 2)
    return (kl * use).sum() / use.sum().clamp_min(1)


__all__ = ["EWCPenalty", "diagonal_fisher", "make_ewc", "smoothing_kl"]
