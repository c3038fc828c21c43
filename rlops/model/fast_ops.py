"""Cheaper equivalents of the torch ops a policy runs at every step, with the same numbers.

On CPU, ATen's kernels for a few of the small ops a policy network runs cost more than the matrix
products around them; these compute the same function (bit for bit, or within float32 rounding
where said) in a way that vectorises: the hidden activation :func:`fast_tanh` (:class:`Tanh`), the
row-wise :func:`softmax_rows` and the scatter-add :func:`sum_by_code` of the history attention.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn


class _TanhFromSigmoid(torch.autograd.Function):
    """``tanh(x) = 2·σ(2x) − 1`` forward, ``tanh``'s own backward ``g·(1 − y²)`` from the output."""

    generate_vmap_rule = True  # per-sample gradients (EWC's Fisher) vmap over it

    @staticmethod
    def forward(x: Tensor) -> Tensor:
        return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor], output: Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (y,) = ctx.saved_tensors
        grad_in: Tensor = torch.ops.aten.tanh_backward(grad, y)
        return grad_in


def fast_tanh(x: Tensor) -> Tensor:
    """``tanh`` as ``2·σ(2x) − 1``: the same function to within 2e-7 (absolute, float32), about five
    times cheaper on CPU, where ATen's ``tanh`` kernel costs more than the matrix product it follows
    and dominated the cost of training a small policy."""
    if torch.is_grad_enabled() and x.requires_grad:
        y: Tensor = _TanhFromSigmoid.apply(x)  # type: ignore[no-untyped-call]  # torch leaves Function.apply untyped
        return y
    return torch.sigmoid(x * 2.0).mul_(2.0).sub_(1.0)


class Tanh(nn.Module):
    """The hidden activation ``tanh`` computed by :func:`fast_tanh` (no parameters: a saved policy's
    weights load as they did with ``nn.Tanh``)."""

    def forward(self, x: Tensor) -> Tensor:
        return fast_tanh(x)


def softmax_rows(x: Tensor, log: bool = False) -> Tensor:
    """(Log-)softmax of each row of ``x[N, C]`` for a handful of columns ``C``.

    ATen's kernel over a short last dimension runs one row at a time; over dimension 0 of the
    transposed view it vectorises across the rows: the same values (log-softmax bit for bit), about
    seven times cheaper forward and four times backward for ``C`` ≈ 4–8 on CPU."""
    if x.dim() != 2:
        return torch.log_softmax(x, dim=-1) if log else torch.softmax(x, dim=-1)
    xt = x.t()
    return (torch.log_softmax(xt, dim=0) if log else torch.softmax(xt, dim=0)).t()


def sum_by_code(values: Tensor, codes: Tensor, n_codes: int) -> Tensor:
    """``out[i, c] = Σ_j values[i, j] · [codes[i, j] == c]``, ``[N, n_codes]``, for ``values`` and
    ``codes`` of shape ``[N, k]``. A scatter-add on CPU; on an accelerator, whose scatter-add adds
    atomically in no fixed order, a one-hot product, so a seeded run gives the same numbers."""
    if values.device.type == "cpu":
        return values.new_zeros(values.shape[0], n_codes).scatter_add_(1, codes, values)
    one_hot = codes.unsqueeze(-1) == torch.arange(n_codes, device=codes.device)
    return (values.unsqueeze(-1) * one_hot).sum(1)


__all__ = ["Tanh", "fast_tanh", "softmax_rows", "sum_by_code"]
