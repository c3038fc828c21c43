"""Scenario expressions on numpy arrays: the :class:`~rlops.sandbox.expr_runtime.ArrayOps` an agent
uses to evaluate a pack's preconditions and rules on its own state, without torch.

Float32 arithmetic with Python numbers as weak scalars (numpy ≥ 2) computes what torch computes on
the sandbox's float32 state, operation by operation; ``exp``, ``log`` and ``sigmoid`` may differ in
the last bit between the two libraries' kernels."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlops.sandbox.expr_runtime import Compiled, RandomSource, Value


def _as_array(x: Value) -> np.ndarray:
    # a Python number becomes float32, as torch.as_tensor makes it (its default dtype)
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.float32)


def _sigmoid(x: Value) -> Value:
    a = _as_array(x)
    return np.asarray(1.0, dtype=a.dtype) / (np.asarray(1.0, dtype=a.dtype) + np.exp(-a))


_FUNCS: dict[str, Callable[..., Value]] = {
    "abs": lambda x: np.abs(x) if isinstance(x, np.ndarray) else abs(x),
    "exp": lambda x: np.exp(_as_array(x)),
    "log": lambda x: np.log(_as_array(x)),
    "sigmoid": _sigmoid,
    "clip": lambda x, lo, hi: np.minimum(np.maximum(_as_array(x), lo), hi),
}


class NumpyOps:
    """Array operations on numpy arrays (one state, or a few, on the agent's CPU)."""

    name = "numpy"

    def where(self, cond: Value, a: Value, b: Value, S: Value) -> Value:
        dt = S.dtype
        a, b = np.asarray(self.as_float(a), dtype=dt), np.asarray(self.as_float(b), dtype=dt)
        return np.where(np.asarray(cond), a, b)

    def minmax(self, name: str, args: list[Value]) -> Value:
        out = args[0]
        for a in args[1:]:
            if isinstance(out, np.ndarray) or isinstance(a, np.ndarray):
                out = np.minimum(out, a) if name == "min" else np.maximum(out, a)
            else:
                out = min(out, a) if name == "min" else max(out, a)
        return out

    def call(self, name: str, args: list[Value]) -> Value:
        return _FUNCS[name](*args)

    def as_float(self, v: Value) -> Value:
        return v.astype(np.float32) if isinstance(v, np.ndarray) and v.dtype == np.bool_ else v

    def standard_normal(self, u1: Value, u2: Value) -> Value:
        u1 = np.maximum(np.asarray(u1, dtype=np.float64), 1e-12)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * np.asarray(u2, dtype=np.float64))
        return z.astype(np.float32)

    def evaluate(self, fn: Compiled, S: Value, rng: RandomSource | None, is_bool: bool) -> Value:
        # x / 0 is inf and 0 / 0 nan, as in torch: no warnings on the agent's log
        with np.errstate(all="ignore"):
            out = fn(S, rng)
        n = S.shape[0]
        if not isinstance(out, np.ndarray):
            out = np.full((n,), float(out), dtype=S.dtype)
        elif out.ndim == 0:
            out = np.full((n,), out, dtype=out.dtype)
        return out.astype(np.bool_) if is_bool else out.astype(S.dtype, copy=False)


NUMPY_OPS = NumpyOps()

__all__ = ["NUMPY_OPS", "NumpyOps"]
