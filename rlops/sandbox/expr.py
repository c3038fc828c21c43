"""Scenario expressions: parsed with a whitelist, type-checked, compiled to batched tensor ops.

An expression such as ``not system_status.fraud_check_done and decision.approval_result == 'pending'``
is parsed with :mod:`ast` (never evaluated), every node is checked against a whitelist, enum
literals are resolved to their integer codes at compile time, and the result is a closure that
maps the state tensor ``S[N, F]`` to a tensor ``[N]`` — one array op per node, for all episodes.

Allowed: numbers, ``true/false``, string literals (only as enum values), field access by dotted
path, ``+ - * / // % **``, unary ``-``/``not``, comparisons (chained too), ``and``/``or``,
``x in ['a', 'b']`` for enums, ``a if cond else b``, and the functions below. The random draws
``uniform``, ``normal`` and ``bernoulli`` are allowed in effects only.

The types and the compiled record are in :mod:`rlops.sandbox.expr_runtime` (importable from here
too); this module is the checker and compiler. It builds closures over torch tensors by default
(:mod:`rlops.sandbox.expr_torch`, imported only then) or over numpy arrays (``ops=NUMPY_OPS`` from
:mod:`rlops.sandbox.expr_numpy`): the same checks and codes, so an agent without torch evaluates a
pack's preconditions as the sandbox does.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Sequence
from typing import Any

from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr_runtime import (
    _BINOPS,
    _CMPOPS,
    _RANDOM_FUNCS,
    BOOL,
    NUM,
    NUM_FUNCS,
    ArrayOps,
    Compiled,
    CompiledExpr,
    ExprType,
    RandomSource,
    Value,
)

__all__ = [
    "BOOL",
    "NUM",
    "ArrayOps",
    "Compiled",
    "CompiledExpr",
    "ExprType",
    "RandomSource",
    "Resolver",
    "compile_expr",
]

Resolver = Callable[[str], "tuple[int, ExprType] | None"]

_CONSTS = {"true": True, "false": False, "True": True, "False": False}

# Bounds on one expression. The compiler and the compiled closures recurse once per AST level, so
# 3,000 nested ``not`` would exhaust the interpreter's stack; no hand-written rule comes close.
MAX_EXPR_CHARS = 4000
MAX_EXPR_DEPTH = 60
#: The largest magnitude of a constant: the state is float32, and torch refuses to combine a
#: float32 tensor with a Python number it cannot represent.
MAX_MAGNITUDE = 1e30


class _Compiler:
    def __init__(self, source: str, resolve: Resolver, allow_random: bool, ops: ArrayOps, draw_offset: int = 0):
        self.source = source
        self.ops = ops
        self.resolve = resolve
        self.allow_random = allow_random
        self.fields: set[str] = set()
        self.draw_offset = draw_offset
        self.draws = draw_offset

    def fail(self, node: ast.AST, msg: str) -> ExprError:
        return ExprError(f"{msg} in expression {_show(self.source)}")

    # Each visit returns (closure, type, constant-or-None). Constants are folded so that
    # literals cost nothing per step.
    def visit(self, node: ast.AST) -> tuple[Compiled, ExprType, Any]:
        method = getattr(self, "v_" + type(node).__name__, None)
        if method is None:
            raise self.fail(
                node,
                f"'{type(node).__name__}' is not allowed (allowed: comparisons, "
                "and/or/not, arithmetic, field access, enum literals, "
                "min/max/abs/clip, a if c else b)",
            )
        compiled: tuple[Compiled, ExprType, Any] = method(node)
        return compiled

    def v_Expression(self, node: ast.Expression) -> tuple[Compiled, ExprType, Any]:
        return self.visit(node.body)

    def v_Constant(self, node: ast.Constant) -> tuple[Compiled, ExprType, Any]:
        v = node.value
        if isinstance(v, bool):
            return (lambda S, R: v), BOOL, v
        if isinstance(v, (int, float)):
            try:
                f = float(v)
            except OverflowError:
                f = math.inf
            if not math.isfinite(f) or abs(f) > MAX_MAGNITUDE:
                raise self.fail(node, f"number literal is too large (at most {MAX_MAGNITUDE:g} in size)")
            return (lambda S, R: f), NUM, f
        if isinstance(v, str):
            # a string literal is compared by its enum code at compile time, never evaluated as a value
            return (lambda S, R: v), ExprType("str"), v  # a string literal is an enum value, compared by its code
        raise self.fail(node, f"literal {v!r} is not allowed")

    def _dotted(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            base = self._dotted(node.value)
            return None if base is None else f"{base}.{node.attr}"
        return None

    def v_Name(self, node: ast.Name) -> tuple[Compiled, ExprType, Any]:
        if node.id in _CONSTS:
            v = _CONSTS[node.id]
            return (lambda S, R: v), BOOL, v
        return self._field(node, node.id)

    def v_Attribute(self, node: ast.Attribute) -> tuple[Compiled, ExprType, Any]:
        path = self._dotted(node)
        if path is None:
            raise self.fail(node, "only dotted field paths may be accessed")
        return self._field(node, path)

    def _field(self, node: ast.AST, path: str) -> tuple[Compiled, ExprType, Any]:
        found = self.resolve(path)
        if found is None:
            raise self.fail(node, f"unknown field '{path}'")
        col, typ = found
        self.fields.add(path)
        if typ.kind == "bool":
            return (lambda S, R: S[:, col] > 0.5), typ, None
        return (lambda S, R: S[:, col]), typ, None

    def _enum_code(self, node: ast.AST, typ: ExprType, literal: str) -> float:
        if literal not in typ.values:
            raise self.fail(node, f"unknown enum value '{literal}' for {typ.name} (expected one of {list(typ.values)})")
        return float(typ.values.index(literal))

    def v_UnaryOp(self, node: ast.UnaryOp) -> tuple[Compiled, ExprType, Any]:
        f, t, c = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            self._expect(node, t, BOOL)
            if c is not None:
                return (lambda S, R: not c), BOOL, (not c)
            return (lambda S, R: ~f(S, R)), BOOL, None
        if isinstance(node.op, ast.USub):
            self._expect(node, t, NUM)
            if c is not None:
                return (lambda S, R: -c), NUM, -c
            return (lambda S, R: -f(S, R)), NUM, None
        if isinstance(node.op, ast.UAdd):
            self._expect(node, t, NUM)
            return f, t, c
        raise self.fail(node, "operator not allowed")

    def _expect(self, node: ast.AST, got: ExprType, want: ExprType) -> None:
        if got.kind != want.kind:
            raise self.fail(node, f"type mismatch: expected {want}, got {got}")

    def v_BinOp(self, node: ast.BinOp) -> tuple[Compiled, ExprType, Any]:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.fail(node, f"operator '{type(node.op).__name__}' is not allowed")
        fa, ta, ca = self._numeric(node.left)
        fb, tb, cb = self._numeric(node.right)
        if ca is not None and cb is not None:
            v = self._fold(node, op, ca, cb)
            return (lambda S, R: v), NUM, v
        return (lambda S, R: op(fa(S, R), fb(S, R))), NUM, None

    def _fold(self, node: ast.BinOp, op: Callable[[Any, Any], Any], a: float, b: float) -> float:
        """Constant arithmetic is done once, here: ``1/0`` or ``10**10**10`` are authoring
        mistakes to report, not values to carry into every step."""
        text = ast.unparse(node)
        try:
            v = op(a, b)
        except ZeroDivisionError:
            raise self.fail(node, f"division by zero in '{text}'") from None
        except (OverflowError, ValueError) as exc:
            raise self.fail(node, f"'{text}' cannot be computed ({exc})") from None
        if not isinstance(v, float) or not math.isfinite(v):
            raise self.fail(node, f"'{text}' is not a finite real number")
        if abs(v) > MAX_MAGNITUDE:
            raise self.fail(node, f"'{text}' is too large (at most {MAX_MAGNITUDE:g} in size)")
        return v

    def _numeric(self, node: ast.AST) -> tuple[Compiled, ExprType, Any]:
        """A number operand; a bool counts as 0/1 so that scoring formulas can add conditions."""
        f, t, c = self.visit(node)
        if t.kind == "bool":
            if c is not None:
                return (lambda S, R: float(c)), NUM, float(c)
            ops = self.ops
            return (lambda S, R: ops.as_float(f(S, R))), NUM, None
        self._expect(node, t, NUM)
        return f, t, c

    def v_BoolOp(self, node: ast.BoolOp) -> tuple[Compiled, ExprType, Any]:
        parts = [self.visit(v) for v in node.values]
        for v, (_, t, _) in zip(node.values, parts):
            self._expect(v, t, BOOL)
        fns = [p[0] for p in parts]
        is_and = isinstance(node.op, ast.And)

        def run(S: Value, R: RandomSource | None) -> Value:
            out = fns[0](S, R)
            for fn in fns[1:]:
                out = (out & fn(S, R)) if is_and else (out | fn(S, R))
            return out

        return run, BOOL, None

    def v_Compare(self, node: ast.Compare) -> tuple[Compiled, ExprType, Any]:
        left = self.visit(node.left)
        steps: list[Compiled] = []
        for op, comp in zip(node.ops, node.comparators):
            right_node = comp
            if isinstance(op, (ast.In, ast.NotIn)):
                steps.append(self._membership(node, left, op, right_node))
                left = self.visit(right_node) if not isinstance(right_node, (ast.List, ast.Tuple)) else left
                continue
            fn_op = _CMPOPS.get(type(op))
            if fn_op is None:
                raise self.fail(node, f"comparison '{type(op).__name__}' is not allowed")
            right = self.visit(right_node)
            steps.append(self._compare(node, left, fn_op, right, op))
            left = right
        if len(steps) == 1:
            return steps[0], BOOL, None

        def chained(S: Value, R: RandomSource | None) -> Value:
            out = steps[0](S, R)
            for s in steps[1:]:
                out = out & s(S, R)
            return out

        return chained, BOOL, None

    def _compare(
        self, node: ast.AST, left: tuple[Any, ...], fn_op: Callable[..., Any], right: tuple[Any, ...], op: ast.cmpop
    ) -> Compiled:
        (fa, ta, ca), (fb, tb, cb) = left, right
        if ta.kind == "enum" or tb.kind == "enum":
            if not isinstance(op, (ast.Eq, ast.NotEq)):
                raise self.fail(node, "enum values can only be compared with == or !=")
            if ta.kind == "enum" and tb.kind == "str":
                code = self._enum_code(node, ta, cb)
                return lambda S, R: fn_op(fa(S, R), code)
            if tb.kind == "enum" and ta.kind == "str":
                code = self._enum_code(node, tb, ca)
                return lambda S, R: fn_op(fb(S, R), code)
            if ta == tb:
                return lambda S, R: fn_op(fa(S, R), fb(S, R))
            raise self.fail(node, f"type mismatch: cannot compare {ta} with {tb}")
        if ta.kind == "str" or tb.kind == "str":
            raise self.fail(node, "a string literal can only be compared with an enum field")
        if ta.kind != tb.kind:
            raise self.fail(node, f"type mismatch: cannot compare {ta} with {tb}")
        if ta.kind == "bool" and not isinstance(op, (ast.Eq, ast.NotEq)):
            raise self.fail(node, "bools can only be compared with == or !=")
        as_float = self.ops.as_float
        return lambda S, R: fn_op(as_float(fa(S, R)), as_float(fb(S, R)))

    def _membership(self, node: ast.AST, left: tuple[Any, ...], op: ast.cmpop, right: ast.AST) -> Compiled:
        fa, ta, _ = left
        if ta.kind != "enum":
            raise self.fail(node, f"'in' needs an enum field on the left, got {ta}")
        if not isinstance(right, (ast.List, ast.Tuple)) or not right.elts:
            raise self.fail(node, "'in' needs a non-empty list of enum values on the right")
        codes = []
        for elt in right.elts:
            if not (isinstance(elt, ast.Constant) and isinstance(elt.value, str)):
                raise self.fail(node, "'in' lists may hold only enum value strings")
            codes.append(self._enum_code(node, ta, elt.value))
        negate = isinstance(op, ast.NotIn)

        def member(S: Value, R: RandomSource | None) -> Value:
            x = fa(S, R)
            out = x == codes[0]  # an enum field's codes: an array
            for c in codes[1:]:
                out = out | (x == c)
            return ~out if negate else out

        return member

    def v_IfExp(self, node: ast.IfExp) -> tuple[Compiled, ExprType, Any]:
        fc, tc, _ = self.visit(node.test)
        self._expect(node.test, tc, BOOL)
        fa, ta, _ = self.visit(node.body)
        fb, tb, _ = self.visit(node.orelse)
        if ta.kind != tb.kind or ta.kind == "str":
            raise self.fail(node, f"type mismatch: both branches must have one type, got {ta} and {tb}")

        where = self.ops.where

        def pick(S: Value, R: RandomSource | None) -> Value:
            return where(fc(S, R), fa(S, R), fb(S, R), S)

        out_t = ta
        if ta.kind == "bool":
            return (lambda S, R: pick(S, R) > 0.5), BOOL, None
        return pick, out_t, None

    def v_Call(self, node: ast.Call) -> tuple[Compiled, ExprType, Any]:
        if not isinstance(node.func, ast.Name) or node.keywords:
            raise self.fail(node, "only plain calls of min/max/abs/clip/exp/log/sigmoid are allowed")
        name = node.func.id
        if node.func.id in _RANDOM_FUNCS or node.func.id in NUM_FUNCS or node.func.id in ("min", "max"):
            args = [self._numeric(a) for a in node.args]
        else:
            raise self.fail(node, f"function '{node.func.id}' is not allowed")
        fns = [a[0] for a in args]
        if name in ("min", "max"):
            if len(fns) < 2:
                raise self.fail(node, f"{name}() needs at least 2 arguments")
            minmax = self.ops.minmax
            return (lambda S, R: minmax(name, [f(S, R) for f in fns])), NUM, None
        if name in NUM_FUNCS:
            arity, call = NUM_FUNCS[name], self.ops.call
            if len(fns) != arity:
                raise self.fail(node, f"{name}() takes {arity} argument(s), got {len(fns)}")
            return (lambda S, R: call(name, [f(S, R) for f in fns])), NUM, None
        if name in _RANDOM_FUNCS:
            return self._random(node, name, fns)
        raise self.fail(node, f"function '{name}' is not allowed")

    def _random(self, node: ast.Call, name: str, fns: list[Compiled]) -> tuple[Compiled, ExprType, Any]:
        if not self.allow_random:
            raise self.fail(node, f"random draw {name}() is only allowed in effects")
        if len(fns) != _RANDOM_FUNCS[name]:
            raise self.fail(node, f"{name}() takes {_RANDOM_FUNCS[name]} argument(s)")
        d0 = self.draws
        self.draws += 2 if name == "normal" else 1
        standard_normal = self.ops.standard_normal

        def draw(S: Value, R: RandomSource | None) -> Value:
            assert R is not None, "random expression evaluated without a random source"
            a = [f(S, R) for f in fns]
            if name == "uniform":
                return a[0] + (a[1] - a[0]) * R.uniform(d0)
            if name == "bernoulli":
                return R.uniform(d0) < a[0]
            return a[0] + a[1] * standard_normal(R.uniform(d0), R.uniform(d0 + 1))

        return draw, (BOOL if name == "bernoulli" else NUM), None


def _show(source: Any) -> str:
    """The expression as messages quote it: in full unless it is very long."""
    text = repr(source)
    return text if len(text) <= 200 else text[:160] + f"... ({len(text)} characters)"


def _depth(tree: ast.AST) -> int:
    """Nesting depth of ``tree``, measured without recursion."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, d = stack.pop()
        deepest = max(deepest, d)
        stack.extend((child, d + 1) for child in ast.iter_child_nodes(node))
    return deepest


def compile_expr(
    source: Any,
    resolve: Resolver,
    *,
    want: ExprType | None = None,
    allow_random: bool = False,
    draw_offset: int = 0,
    ops: ArrayOps | None = None,
) -> CompiledExpr:
    """Parse, check and compile ``source``. Raises :class:`ExprError` with a readable message.
    ``ops``: the array library of the closure (default: torch)."""
    if isinstance(source, bool):
        source = "true" if source else "false"
    if isinstance(source, (int, float)):
        source = repr(source)
    if not isinstance(source, str) or not source.strip():
        raise ExprError(f"expected an expression string, got {_show(source)}")
    if len(source) > MAX_EXPR_CHARS:
        raise ExprError(f"expression of {len(source)} characters, over the limit of {MAX_EXPR_CHARS}")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"syntax error in expression {_show(source)}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        # CPython's parser gives up on deep nesting with one of these instead of a SyntaxError.
        raise ExprError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels") from None
    if _depth(tree) > MAX_EXPR_DEPTH:
        raise ExprError(f"expression nested deeper than {MAX_EXPR_DEPTH} levels")
    if ops is None:
        from rlops.sandbox.expr_torch import TORCH_OPS  # torch only for those who evaluate on tensors

        ops = TORCH_OPS
    comp = _Compiler(source, resolve, allow_random, ops, draw_offset)
    fn, typ, _ = comp.visit(tree)
    if typ.kind == "str":
        raise ExprError(f"a bare string is not a value in expression {_show(source)}")
    if want is not None and want.kind != typ.kind:
        raise ExprError(f"type mismatch: expected {want}, got {typ} in expression {_show(source)}")
    return CompiledExpr(source, typ, fn, frozenset(comp.fields), comp.draws - draw_offset, ops)


def legal_columns(
    preconditions: Sequence[CompiledExpr], required: Sequence[Sequence[CompiledExpr]], S: Any
) -> list[Any]:
    """One boolean column per action over the state batch ``S`` (of the array library the expressions
    were compiled for): its precondition holds and every field it requires is present. Actions often
    share a precondition ("still pending") and required fields: each distinct expression is
    evaluated once per call."""
    memo: dict[str, Any] = {}

    def ev(e: CompiledExpr) -> Any:
        if e.source not in memo:
            memo[e.source] = e(S)
        return memo[e.source]

    cols = []
    for pre, req in zip(preconditions, required):
        m = ev(pre)
        for r in req:
            m = m & ev(r)
        cols.append(m)
    return cols
