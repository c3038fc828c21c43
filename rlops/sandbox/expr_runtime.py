"""The runtime side of scenario expressions (compiled by :mod:`rlops.sandbox.expr`): their types, the
compiled-expression record, the operator tables and the array operations a compiled closure calls.

A closure is built for one array library, named by its :class:`ArrayOps`: torch for the sandbox's
batched environments (:data:`rlops.sandbox.expr_torch.TORCH_OPS`), numpy for an agent deciding one
state at a time without torch (:data:`rlops.sandbox.expr_numpy.NUMPY_OPS`). The parsing, the
whitelist, the type checks and the enum codes are the same for both; only these operations differ.
This module imports neither library.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

#: A column, a row of results or a constant: a ``torch.Tensor`` or a ``numpy.ndarray`` (by the
#: expression's :class:`ArrayOps`), or a Python number folded at compile time.
Value = Any


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
    def uniform(self, draw_id: int) -> Value: ...


Compiled = Callable[[Value, "RandomSource | None"], Value]


class ArrayOps(Protocol):
    """The array operations a compiled expression needs beyond Python's operators."""

    name: str
    """``torch`` or ``numpy``."""

    def where(self, cond: Value, a: Value, b: Value, S: Value) -> Value:
        """``a`` where ``cond`` else ``b``, in the dtype of ``S``."""
        ...

    def minmax(self, name: str, args: list[Value]) -> Value:
        """``min`` or ``max`` of numbers and arrays, elementwise."""
        ...

    def call(self, name: str, args: list[Value]) -> Value:
        """One of :data:`NUM_FUNCS` (``abs``, ``exp``, ``log``, ``sigmoid``, ``clip``)."""
        ...

    def as_float(self, v: Value) -> Value:
        """A bool array as 0.0/1.0 floats; anything else as it is."""
        ...

    def standard_normal(self, u1: Value, u2: Value) -> Value:
        """Box–Muller on two uniforms in [0, 1)."""
        ...

    def evaluate(self, fn: Compiled, S: Value, rng: RandomSource | None, is_bool: bool) -> Value:
        """``fn(S, rng)`` as one value per row of ``S``: bool, or the dtype of ``S``."""
        ...


@dataclass(frozen=True)
class CompiledExpr:
    """A type-checked expression; ``fn(S, rng)`` evaluates it for every row of ``S``."""

    source: str
    type: ExprType
    fn: Compiled
    fields: frozenset[str]
    random_draws: int
    """How many random draw ids the expression uses, from the offset it was compiled with."""
    ops: ArrayOps
    """The array library the closure was built for."""

    def __call__(self, S: Value, rng: RandomSource | None = None) -> Value:
        return self.ops.evaluate(self.fn, S, rng, self.type.kind == "bool")


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
#: The numeric functions and their arity (their array implementations are in each ArrayOps).
NUM_FUNCS: dict[str, int] = {"abs": 1, "exp": 1, "log": 1, "sigmoid": 1, "clip": 3}
_RANDOM_FUNCS = {"uniform": 2, "normal": 2, "bernoulli": 1}
