"""Distributions over the legal actions only: the mask applied to the logits, log-probabilities,
probabilities, entropy, greedy choice and sampling.

A masked action gets a large *finite* negative logit (:func:`mask_value`, never ``-inf``): it has
probability 0, log-probabilities stay finite, and a row with every action masked yields a uniform
distribution instead of NaN.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rlops.model.fast_ops import softmax_rows


def mask_value(dtype: torch.dtype) -> float:
    """The logit given to masked actions: very negative but finite, so no op produces NaN."""
    return torch.finfo(dtype).min / 2


def masked_logits(logits: Tensor, mask: Tensor) -> Tensor:
    return logits.masked_fill(~mask, mask_value(logits.dtype))


def masked_log_probs(logits: Tensor, mask: Tensor) -> Tensor:
    """Log-probabilities over legal actions; masked entries are very negative (finite)."""
    return softmax_rows(masked_logits(logits, mask), log=True)


EXP_FLOOR = -87.0
"""The lowest exponent :func:`probs_of` passes to ``exp``: ``exp(-87)`` ≈ 1.6e-38 is still a normal
float32; below it the result underflows to a denormal or to 0."""


def probs_of(logp: Tensor, mask: Tensor | None = None) -> Tensor:
    """``exp(logp)`` of masked log-probabilities, with the masked entries exactly 0 when ``mask``
    is given (without it they are ~1.6e-38: for callers that zero them anyway).

    A masked entry's log-probability is ~-1.7e38, and ATen's CPU ``exp`` takes a slow path for
    every input whose result underflows: a tensor with masked entries cost it 4–8 times as much
    as one without. So the exponent is floored at :data:`EXP_FLOOR` first; a legal action's
    probability is unchanged unless it is below 1.6e-38, where it reads as 1.6e-38."""
    p = logp.clamp_min(EXP_FLOOR).exp_()
    return p if mask is None else p.masked_fill_(~mask, 0.0)


def greedy_actions(logp: Tensor) -> Tensor:
    """The most likely action of each row of ``logp[N, A]`` (the first one on a tie).

    :func:`softmax_rows` hands back a transposed view, and ``argmax`` over a strided last
    dimension runs ~7 times slower than over a contiguous one: the copy costs less."""
    return logp.contiguous().argmax(dim=-1)


def masked_entropy(logp: Tensor, mask: Tensor, probs: Tensor | None = None) -> Tensor:
    """Entropy of the distribution restricted to legal actions (masked terms contribute 0);
    ``probs`` is :func:`probs_of` ``(logp)`` where the caller has it already."""
    p = probs_of(logp) if probs is None else probs
    return -torch.where(mask, p * logp, torch.zeros_like(logp)).sum(-1)


def gumbel_sample(logp: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Sample one action per row by the Gumbel-max trick (cheaper than ``multinomial``)."""
    u = torch.rand(logp.shape, generator=generator, device=logp.device, dtype=logp.dtype)
    g = -torch.log(-torch.log(u.clamp_(1e-20, 1.0 - 1e-7)))
    # g + logp in g's own (contiguous) memory: the same sums as logp + g, whose result would take
    # logp's transposed layout and make the argmax ~7 times slower (see greedy_actions).
    return g.add_(logp).argmax(dim=-1)


__all__ = [
    "EXP_FLOOR",
    "greedy_actions",
    "gumbel_sample",
    "mask_value",
    "masked_entropy",
    "masked_log_probs",
    "masked_logits",
    "probs_of",
]
