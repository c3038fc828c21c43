"""Scenario expressions on torch tensors: the :class:`~rlops.sandbox.expr_runtime.ArrayOps` of the
sandbox's batched environments, whose state ``S[N, C]`` is a float32 tensor."""

from __future__ import annotations

from collections.abc import Callable

import torch

from rlops.sandbox.expr_runtime import Compiled, RandomSource, Value

Tensor = torch.Tensor


def _clip(x: Value, lo: Value, hi: Value) -> Tensor:
    """``clip`` with bounds that may be numbers or tensors, in any mix (``torch.clamp`` takes
    either two numbers or two tensors)."""
    ref = next((v for v in (x, lo, hi) if isinstance(v, Tensor)), None)

    def t(v: Value) -> Tensor:
        if isinstance(v, Tensor):
            return v
        return torch.tensor(
            float(v), dtype=torch.float32 if ref is None else ref.dtype, device=None if ref is None else ref.device
        )

    return torch.minimum(torch.maximum(t(x), t(lo)), t(hi))


_FUNCS: dict[str, Callable[..., Value]] = {
    "abs": lambda x: x.abs() if isinstance(x, Tensor) else abs(x),
    "exp": lambda x: torch.exp(torch.as_tensor(x)),
    "log": lambda x: torch.log(torch.as_tensor(x)),
    "sigmoid": lambda x: torch.sigmoid(torch.as_tensor(x)),
    "clip": _clip,
}


def standard_normal(u1: Tensor, u2: Tensor) -> Tensor:
    """Box–Muller on two uniforms in [0, 1); computed in float64 so that batched and one-row
    evaluation round to the same float32 value."""
    u1 = u1.double().clamp_min(1e-12)
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2.double())).float()


class TorchOps:
    """Array operations on torch tensors (any device)."""

    name = "torch"

    def where(self, cond: Value, a: Value, b: Value, S: Value) -> Value:
        ref = S[:, 0]
        return torch.where(
            torch.as_tensor(cond, device=S.device),
            torch.as_tensor(self.as_float(a), dtype=ref.dtype, device=S.device),
            torch.as_tensor(self.as_float(b), dtype=ref.dtype, device=S.device),
        )

    def minmax(self, name: str, args: list[Value]) -> Value:
        op = torch.minimum if name == "min" else torch.maximum
        out = args[0]
        for a in args[1:]:
            if isinstance(out, Tensor) or isinstance(a, Tensor):
                ref = out if isinstance(out, Tensor) else a
                out = op(
                    torch.as_tensor(out, dtype=ref.dtype, device=ref.device),
                    torch.as_tensor(a, dtype=ref.dtype, device=ref.device),
                )
            else:
                out = min(out, a) if name == "min" else max(out, a)
        return out

    def call(self, name: str, args: list[Value]) -> Value:
        return _FUNCS[name](*args)

    def as_float(self, v: Value) -> Value:
        return v.float() if isinstance(v, Tensor) and v.dtype == torch.bool else v

    def standard_normal(self, u1: Value, u2: Value) -> Value:
        return standard_normal(u1, u2)

    def evaluate(self, fn: Compiled, S: Value, rng: RandomSource | None, is_bool: bool) -> Value:
        out = fn(S, rng)
        if not isinstance(out, Tensor):
            out = torch.full((S.shape[0],), float(out), dtype=S.dtype, device=S.device)
        elif out.dim() == 0:
            # A call on constants (``exp(0)``, ``clip(5, 0, 3)``) is a 0-d tensor: one per row.
            out = out.to(S.device).expand(S.shape[0]).contiguous()
        return out.bool() if is_bool else out.to(S.dtype)


TORCH_OPS = TorchOps()

__all__ = ["TORCH_OPS", "Tensor", "TorchOps", "standard_normal"]
