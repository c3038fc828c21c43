"""The runtime side of scenario expressions (compiled by :mod:`rlops.sandbox.expr`): their types, the
compiled-expression record, the operator and function tables, and the tensor helpers the compiled
closures call while the environment steps."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

Tensor = torch.Tensor
Value = Tensor | float


@dataclass(frozen=True)
class ExprType:
    """``kind`` is ``num``, ``bool`` or ``enum``; an enum carries its value names."""

    kind: str
    values: tuple[str, ...] = ()
    name: str = ""

    def __str__(self) -> str:
        if self.kind == "enum":
            return f"enum {self.name}"
        return {"num": "number", "bool": "bool", "str": "string"}.get(self.kind, self.kind)


NUM = ExprType("num")
BOOL = ExprType("bool")


class RandomSource(Protocol):
    def uniform(self, draw_id: int) -> Tensor: ...


Compiled = Callable[[Tensor, "RandomSource | None"], Value]


@dataclass(frozen=True)
class CompiledExpr:
    """A type-checked expression; ``fn(S, rng)`` evaluates it for every row of ``S``."""

    source: str
    type: ExprType
    fn: Compiled
    fields: frozenset[str]
    random_draws: int
    """How many random draw ids the expression uses, from the offset it was compiled with."""

    def __call__(self, S: Tensor, rng: RandomSource | None = None) -> Tensor:
        out = self.fn(S, rng)
        if not isinstance(out, Tensor):
            out = torch.full((S.shape[0],), float(out), dtype=S.dtype, device=S.device)
        elif out.dim() == 0:
            # A call on constants (``exp(0)``, ``clip(5, 0, 3)``) is a 0-d tensor: one per row.
            out = out.to(S.device).expand(S.shape[0]).contiguous()
        return out.bool() if self.type.kind == "bool" else out.to(S.dtype)


_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b,
    ast.Pow: lambda a, b: a**b,
}
_CMPOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}
_NUM_FUNCS: dict[str, tuple[int, Callable[..., Any]]] = {
    "abs": (1, lambda x: x.abs() if isinstance(x, Tensor) else abs(x)),
    "exp": (1, lambda x: torch.exp(torch.as_tensor(x))),
    "log": (1, lambda x: torch.log(torch.as_tensor(x))),
    "sigmoid": (1, lambda x: torch.sigmoid(torch.as_tensor(x))),
    "clip": (3, lambda x, lo, hi: _clip(x, lo, hi)),
}
_RANDOM_FUNCS = {"uniform": 2, "normal": 2, "bernoulli": 1}


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


def _as_float(v: Value) -> Value:
    return v.float() if isinstance(v, Tensor) and v.dtype == torch.bool else v


def _minmax(op: Callable[[Tensor, Tensor], Tensor], args: list[Value]) -> Value:
    out = args[0]
    for a in args[1:]:
        if isinstance(out, Tensor) or isinstance(a, Tensor):
            ref = out if isinstance(out, Tensor) else a
            assert isinstance(ref, Tensor)
            out = op(
                torch.as_tensor(out, dtype=ref.dtype, device=ref.device),
                torch.as_tensor(a, dtype=ref.dtype, device=ref.device),
            )
        else:
            out = min(out, a) if op is torch.minimum else max(out, a)
    return out


def standard_normal(u1: Tensor, u2: Tensor) -> Tensor:
    """Box–Muller on two uniforms in [0, 1); computed in float64 so that batched and one-row
    evaluation round to the same float32 value."""
    u1 = u1.double().clamp_min(1e-12)
    return (torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * torch.pi * u2.double())).float()
