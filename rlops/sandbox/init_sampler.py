"""Initial-state sampling of a compiled scenario.

Fields whose initial distribution has constant parameters (the common case) are sampled together:
one block of uniforms, one Box–Muller transform and a handful of ops for all of them, whatever
their number. Fields whose parameters are expressions over earlier fields (``bernoulli`` with an
expression ``p``, ``expr`` inits) are then evaluated one by one in declaration order.
Every field drawn at random (in the base state or in any population shift) owns a draw slot
``k`` — random draw ids ``2k`` and ``2k + 1`` — so constant fields cost no hashing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from rlops.sandbox.errors import ExprError, PackError
from rlops.sandbox.expr import BOOL, NUM, CompiledExpr, ExprType
from rlops.sandbox.expr_torch import standard_normal
from rlops.sandbox.rng import StepRandom
from rlops.sandbox.spec import FieldSpec, InitSpec

if TYPE_CHECKING:
    from rlops.sandbox.compile import CompiledScenario

Tensor = torch.Tensor
Sampler = Callable[[Tensor, StepRandom], Tensor]

_CONST, _NORMAL, _LOGNORMAL, _UNIFORM = 0, 1, 2, 3


@dataclass
class _VectorPart:
    cols: Tensor  # state columns
    draws: Tensor  # the field's draw slot k (draw ids 2k, 2k+1)
    kind: Tensor
    p1: Tensor
    p2: Tensor
    int_uniform: Tensor


class InitSampler:
    """Samples ``fields`` (with ``overrides`` of their init specs) into a state tensor."""

    def __init__(self, scn: CompiledScenario, overrides: dict[str, InitSpec], only: set[str] | None = None):
        self.scn = scn
        vec: list[tuple[int, int, int, float, float, bool]] = []
        self.sequential: dict[int, Sampler] = {}
        declared: set[str] = set()

        def resolve_earlier(path: str) -> tuple[int, ExprType] | None:
            if path in scn.columns and (path in declared or path.startswith("episode.")):
                return scn.columns[path], scn.types[path]
            if path in scn.columns:
                raise ExprError(f"field '{path}' is used before it is initialised (declare it earlier)")
            return None

        for f in scn.spec.fields:
            init = overrides.get(f.path, f.init)
            if only is None or f.path in only:
                col = scn.columns[f.path]
                k = scn.draw_slots.get(f.path, 0)  # fields drawn at random own slot k: ids 2k, 2k+1
                v = self._vector_form(f, init)
                if v is not None:
                    vec.append((col, k, *v))
                else:
                    self.sequential[col] = self._sampler(f, init, resolve_earlier, k)
            declared.add(f.path)
        cols, ks, kinds, p1, p2, iu = zip(*vec) if vec else ((),) * 6
        self.vector = _VectorPart(
            torch.tensor(cols, dtype=torch.long),
            torch.tensor(ks, dtype=torch.long),
            torch.tensor(kinds),
            torch.tensor(p1, dtype=torch.float64),
            torch.tensor(p2, dtype=torch.float64),
            torch.tensor(iu, dtype=torch.bool),
        )

    # ---- compile --------------------------------------------------------------------------------
    @staticmethod
    def is_random(init: InitSpec) -> bool:
        return init.dist is not None

    @staticmethod
    def _vector_form(f: FieldSpec, init: InitSpec) -> tuple[int, float, float, bool] | None:
        if init.expr is not None:
            return None
        if init.dist is None:
            code = float(f.values.index(init.value)) if f.type == "enum" else float(init.value)
            return (_CONST, code, 0.0, False)
        params = list(init.params.values())
        if init.dist not in ("normal", "lognormal", "uniform") or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in params
        ):
            return None
        kind = {"normal": _NORMAL, "lognormal": _LOGNORMAL, "uniform": _UNIFORM}[init.dist]
        return (kind, float(params[0]), float(params[1]), init.dist == "uniform" and f.type == "int")

    def _param(self, v: Any, f: FieldSpec, init: InitSpec, resolve: Callable[..., Any], name: str) -> Any:
        if isinstance(v, (list, dict)):
            return v
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise PackError(
                self.scn.file,
                init.line,
                f"{f.path}.init.{name}",
                f"type mismatch: expected a number or an expression, got {v!r}",
            )
        if isinstance(v, str):
            return self.scn._expr(v, NUM, init.line, f"{f.path}.init.{name}", resolve)
        return float(v)

    def _sampler(self, f: FieldSpec, init: InitSpec, resolve: Callable[..., Any], k: int) -> Sampler:
        where = f"{f.path}.init"
        if init.expr is not None:
            e = self.scn._expr(init.expr, BOOL if f.type == "bool" else NUM, init.line, where, resolve)
            return lambda S, R: e(S, R).float()
        p = {name: self._param(v, f, init, resolve, name) for name, v in init.params.items()}

        def val(x: Any, S: Tensor) -> Tensor:
            return (
                x(S).double()
                if isinstance(x, CompiledExpr)
                else torch.full((S.shape[0],), x, dtype=torch.float64, device=S.device)
            )

        d = 2 * k
        if init.dist in ("normal", "lognormal"):
            scale = "std" if init.dist == "normal" else "sigma"

            def gaussian(S: Tensor, R: StepRandom) -> Tensor:
                x = val(p["mean"], S) + val(p[scale], S) * standard_normal(R.uniform(d), R.uniform(d + 1)).double()
                return (x if init.dist == "normal" else torch.exp(x)).float()

            return gaussian
        if init.dist == "uniform":
            extra = 1.0 if f.type == "int" else 0.0

            def uniform(S: Tensor, R: StepRandom) -> Tensor:
                lo, hi = val(p["low"], S), val(p["high"], S)
                x = lo + (hi - lo + extra) * R.uniform(d).double()
                return (torch.floor(x) if extra else x).float()

            return uniform
        if init.dist == "bernoulli":
            return lambda S, R: (R.uniform(d).double() < val(p["p"], S)).float()
        probs = p["probs"]
        weights = [float(probs.get(v, 0.0)) for v in f.values] if isinstance(probs, dict) else [float(x) for x in probs]
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise PackError(self.scn.file, init.line, where, "probs must be non-negative and not all zero")
        cum = torch.tensor(weights, dtype=torch.float64).cumsum(0)
        cum = (cum / cum[-1]).float()
        cum[-1] = 2.0  # u < 1 always lands in the last bucket at worst
        return lambda S, R: (R.uniform(d).unsqueeze(1) >= cum.to(S.device)).sum(dim=1).float()

    # ---- sample ---------------------------------------------------------------------------------
    def write_vector(self, S: Tensor, U: Tensor, Z: Tensor, rows: Tensor | None = None) -> None:
        v = self.vector
        if not v.cols.numel():
            return
        dev = S.device
        ks, kind = v.draws.to(dev), v.kind.to(dev)
        p1, p2 = v.p1.to(dev), v.p2.to(dev)
        z = Z.index_select(1, ks)
        u = U.index_select(1, 2 * ks).double()
        gauss = p1 + p2 * z
        value = torch.where(kind == _CONST, p1, gauss)
        value = torch.where(kind == _LOGNORMAL, torch.exp(gauss), value)
        uni = p1 + (p2 - p1 + v.int_uniform.to(dev).double()) * u
        value = torch.where(kind == _UNIFORM, torch.where(v.int_uniform.to(dev), torch.floor(uni), uni), value)
        cols = v.cols.to(dev)
        value = value.float()
        if rows is not None:
            value = torch.where(rows.unsqueeze(1), value, S.index_select(1, cols))
        S.index_copy_(1, cols, value)
