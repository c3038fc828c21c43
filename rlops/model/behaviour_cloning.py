"""Behaviour cloning: a warm start for PPO from the captured steps the reward model rates highly.

The reward model scores every captured step (``rlops train relabel``); the steps of choice states
(two or more legal actions) whose score is in the top ``top_fraction`` are imitated with a masked
cross-entropy loss, so the policy starts from what worked in production instead of from uniform
noise, and PPO then improves on it in the sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from rlops.model.policy import PolicyNetwork


@dataclass(frozen=True)
class BCConfig:
    """Warm-start settings. ``top_fraction`` and ``epochs`` have no default here: they are the
    ``train.bc_top_fraction`` and ``train.bc_epochs`` params (:mod:`rlops.common.params_model`)."""

    top_fraction: float
    """Share of the scored choice steps (highest reward-model score first) that is imitated."""
    epochs: int
    """Passes over the imitated steps."""
    batch_size: int = 1024
    learning_rate: float = 3e-3
    min_steps: int = 64
    """Fewer selected steps than this: no warm start (too little to imitate)."""
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0.0 < self.top_fraction <= 1.0:
            raise ValueError(f"bc top_fraction {self.top_fraction}: expected a share in (0, 1]")


@dataclass(frozen=True)
class BCResult:
    steps_scored: int
    steps_imitated: int
    score_threshold: float
    accuracy: float
    loss: float


def select_high_reward(scores: Tensor, masks: Tensor, top_fraction: float) -> tuple[Tensor, float]:
    """Rows to imitate: choice states whose score is in the top ``top_fraction``; and the cut-off."""
    choice = masks.sum(dim=1) >= 2
    if not bool(choice.any()):
        return choice, float("nan")
    cut = float(torch.quantile(scores[choice].float(), 1.0 - top_fraction))
    return choice & (scores >= cut), cut


def behaviour_clone(
    policy: PolicyNetwork, obs: Tensor, masks: Tensor, actions: Tensor, scores: Tensor, cfg: BCConfig
) -> BCResult | None:
    """Fit ``policy`` (in place) to the high-score steps; None when too few steps qualify."""
    keep, cut = select_high_reward(scores, masks, cfg.top_fraction)
    legal = masks[torch.arange(masks.shape[0]), actions.clamp(0, masks.shape[1] - 1)] & (actions >= 0)
    keep = keep & legal
    n = int(keep.sum())
    if n < cfg.min_steps:
        return None
    device = next(policy.parameters()).device
    X, M, A = obs[keep].to(device), masks[keep].to(device), actions[keep].to(device)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)
    policy.train()
    for _ in range(cfg.epochs):
        for idx in torch.randperm(n, generator=gen).split(cfg.batch_size):
            logp, _ = policy(X[idx], M[idx])
            loss = -logp.gather(1, A[idx].unsqueeze(1)).mean()
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    policy.eval()
    with torch.no_grad():
        logp, _ = policy(X, M)
        acc = float((logp.argmax(dim=1) == A).float().mean())
        final = float(-logp.gather(1, A.unsqueeze(1)).mean())
    return BCResult(steps_scored=int(scores.shape[0]), steps_imitated=n, score_threshold=cut, accuracy=acc, loss=final)


__all__ = ["BCConfig", "BCResult", "select_high_reward", "behaviour_clone"]
