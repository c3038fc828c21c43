"""Credit for sparse outcomes: an episode-level outcome (a satisfaction flag at the end, a
complaint a week later) spread over the episode's steps by the reward model's per-step scores.

A negative outcome is blamed on the steps the reward model rates lowest, a positive one credited
to those it rates highest: the step weights are ``softmax(sign(outcome) · score / temperature)``
within each episode and a step's credit is ``outcome · weight``, so the credits of an episode
always sum to its outcome (nothing is created or lost).
"""

from __future__ import annotations

import torch
from torch import Tensor


def distribute_outcome(scores: Tensor, episode: Tensor, outcome: Tensor, temperature: float = 1.0) -> Tensor:
    """Per-step credit ``[N]`` of the episode outcomes ``outcome[E]``; ``episode[N]`` in ``0..E-1``."""
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    episode = episode.long()
    sign = torch.sign(outcome.float())[episode]
    logits = sign * scores.float() / temperature
    top = torch.full((outcome.shape[0],), -float("inf")).scatter_reduce(0, episode, logits, "amax")
    w = torch.exp(logits - top[episode])
    total = torch.zeros(outcome.shape[0]).index_add_(0, episode, w)
    return outcome.float()[episode] * w / total[episode]


__all__ = ["distribute_outcome"]
