"""The scenario expression language: every allowed construct gives the hand-computed value on a
tiny state tensor, every construct outside the whitelist is rejected with a readable message."""

from __future__ import annotations

import math

import pytest
import torch

from rlops.sandbox.errors import ExprError
from rlops.sandbox.expr import BOOL, NUM, ExprType, compile_expr

# A four-column state: a, b numbers; f a bool; e an enum with values x, y, z.
E = ExprType("enum", ("x", "y", "z"), "e")
E2 = ExprType("enum", ("x", "y", "z"), "other")
COLUMNS = {"a": (0, NUM), "b": (1, NUM), "f": (2, BOOL), "e": (3, E), "g.h": (4, NUM), "o": (5, E2)}
S = torch.tensor(
    [
        # a     b     f    e    g.h   o
        [1.0, 2.0, 1.0, 0.0, 10.0, 0.0],
        [3.0, -1.0, 0.0, 2.0, -4.0, 2.0],
        [0.5, 0.5, 1.0, 1.0, 0.0, 0.0],
    ]
)


def resolve(path: str):
    return COLUMNS.get(path)


def ev(src: str, **kw) -> list:
    out = compile_expr(src, resolve, **kw)(S)
    assert out.shape == (S.shape[0],), f"{src!r} gave shape {tuple(out.shape)}"
    return out.tolist()


def approx(values: list[float]) -> list:
    return [pytest.approx(v, rel=1e-6, abs=1e-6) for v in values]


# ---------------------------------------------------------------- allowed constructs
@pytest.mark.parametrize(
    "src, expected",
    [
        ("a < b", [True, False, False]),
        ("a <= 0.5", [False, False, True]),
        ("a > b", [False, True, False]),
        ("a >= 1", [True, True, False]),
        ("a == 3", [False, True, False]),
        ("a != 3", [True, False, True]),
        ("0 < a < 2", [True, False, True]),  # chained
        ("b < a <= 3 < g.h", [False, False, False]),
        ("-5 < g.h <= 0 < a", [False, True, True]),
        ("f and a > 0.7", [True, False, False]),
        ("f or a > 2", [True, True, True]),
        ("not f", [False, True, False]),
        ("not (f and b > 0)", [False, True, False]),
        ("f == true", [True, False, True]),
        ("f != True", [False, True, False]),
        ("true", [True, True, True]),
        ("false or f", [True, False, True]),
        ("e == 'x'", [True, False, False]),
        ("'z' == e", [False, True, False]),
        ("e != 'y'", [True, True, False]),
        ("e in ['x', 'z']", [True, True, False]),
        ("e not in ['x', 'z']", [False, False, True]),
        ("e in ('y',)", [False, False, True]),
        ("e == e", [True, True, True]),
    ],
)
def test_boolean_constructs(src: str, expected: list[bool]) -> None:
    ce = compile_expr(src, resolve)
    assert ce.type == BOOL
    assert ev(src) == expected


@pytest.mark.parametrize(
    "src, expected",
    [
        ("a + b", [3.0, 2.0, 1.0]),
        ("a - b", [-1.0, 4.0, 0.0]),
        ("a * b", [2.0, -3.0, 0.25]),
        ("a / b", [0.5, -3.0, 1.0]),
        ("g.h // 3", [3.0, -2.0, 0.0]),
        ("g.h % 3", [1.0, 2.0, 0.0]),
        ("a ** 2", [1.0, 9.0, 0.25]),
        ("-a", [-1.0, -3.0, -0.5]),
        ("+a", [1.0, 3.0, 0.5]),
        ("2 * (a + 1) - b / 2", [3.0, 8.5, 2.75]),
        ("f + f", [2.0, 0.0, 2.0]),  # bool counts as 0/1
        ("3 * (a > 0.7) + f", [4.0, 3.0, 1.0]),
        ("0.5 * (e == 'y')", [0.0, 0.0, 0.5]),
        ("min(a, b)", [1.0, -1.0, 0.5]),
        ("max(a, b, 0.75)", [2.0, 3.0, 0.75]),
        ("min(a, 1)", [1.0, 1.0, 0.5]),
        ("abs(b)", [2.0, 1.0, 0.5]),
        ("abs(-2)", [2.0, 2.0, 2.0]),
        ("clip(g.h, -1, 5)", [5.0, -1.0, 0.0]),
        ("exp(b)", [math.exp(2.0), math.exp(-1.0), math.exp(0.5)]),
        ("log(a)", [0.0, math.log(3.0), math.log(0.5)]),
        ("sigmoid(b)", [1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(1.0)), 1 / (1 + math.exp(-0.5))]),
        ("a if f else b", [1.0, -1.0, 0.5]),
        ("a if e == 'z' else 100", [100.0, 3.0, 100.0]),
        ("1 + 2 * 3", [7.0, 7.0, 7.0]),  # constant folding still broadcasts
        ("7", [7.0, 7.0, 7.0]),
    ],
)
def test_numeric_constructs(src: str, expected: list[float]) -> None:
    ce = compile_expr(src, resolve)
    assert ce.type == NUM
    assert ev(src) == approx(expected)


def test_if_else_keeps_bool_and_enum_types() -> None:
    assert compile_expr("f if a > 1 else not f", resolve).type == BOOL
    assert ev("f if a > 1 else not f") == [False, False, False]
    ce = compile_expr("e if f else e", resolve)
    assert ce.type == E
    assert ev("e if f else e") == [0.0, 2.0, 1.0]


def test_fields_used_are_recorded() -> None:
    ce = compile_expr("a + g.h > 0 and not f", resolve)
    assert ce.fields == frozenset({"a", "g.h", "f"})
    assert ce.random_draws == 0


def test_numbers_and_bools_are_accepted_as_sources() -> None:
    assert ev(True) == [True, True, True]  # type: ignore[arg-type]
    assert ev(2.5) == [2.5, 2.5, 2.5]  # type: ignore[arg-type]


def test_want_type_is_checked() -> None:
    with pytest.raises(ExprError, match="type mismatch: expected bool, got number"):
        compile_expr("a + 1", resolve, want=BOOL)
    compile_expr("a > 1", resolve, want=BOOL)


# Calls whose arguments are all constants still give one value per row: a precondition such as
# ``sigmoid(0) > 0.4`` must make a mask column, not a scalar.
@pytest.mark.parametrize(
    "src, expected",
    [
        ("exp(0)", [1.0, 1.0, 1.0]),
        ("sigmoid(0)", [0.5, 0.5, 0.5]),
        ("clip(5, 0, 3)", [3.0, 3.0, 3.0]),
        ("log(1)", [0.0, 0.0, 0.0]),
        ("1 if true else 2", [1.0, 1.0, 1.0]),
    ],
)
def test_constant_calls_broadcast_to_rows(src: str, expected: list[float]) -> None:
    assert ev(src) == approx(expected)


def test_constant_call_in_a_condition_gives_one_bool_per_row() -> None:
    assert ev("sigmoid(0) > 0.4") == [True, True, True]


def test_clip_with_field_bounds() -> None:
    # Bounds may be fields or constants, mixed.
    assert ev("clip(g.h, b, 3)") == approx([3.0, -1.0, 0.5])
    assert ev("clip(g.h, -1, a)") == approx([1.0, -1.0, 0.0])


# ---------------------------------------------------------------- random draws
class FixedRandom:
    """A random source whose draw ``k`` is ``values[k]`` for every row."""

    def __init__(self, *values: float):
        self.values = values
        self.asked: list[int] = []

    def uniform(self, draw_id: int) -> torch.Tensor:
        self.asked.append(draw_id)
        return torch.full((S.shape[0],), self.values[draw_id])


def test_random_draws_in_effects() -> None:
    ce = compile_expr("uniform(a, a + 10)", resolve, allow_random=True, draw_offset=0)
    assert ce.random_draws == 1
    assert ce(S, FixedRandom(0.25)).tolist() == approx([3.5, 5.5, 3.0])
    ce = compile_expr("bernoulli(0.3)", resolve, allow_random=True)
    assert ce.type == BOOL
    assert ce(S, FixedRandom(0.2)).tolist() == [True, True, True]
    assert ce(S, FixedRandom(0.4)).tolist() == [False, False, False]
    # normal(mean, std) uses two draws (Box-Muller): u1 = e^-0.5, u2 = 0 -> z = 1
    ce = compile_expr("normal(a, 2)", resolve, allow_random=True)
    assert ce.random_draws == 2
    assert ce(S, FixedRandom(math.exp(-0.5), 0.0)).tolist() == approx([3.0, 5.0, 2.5])


def test_draw_ids_start_at_the_offset_and_do_not_overlap() -> None:
    ce = compile_expr("uniform(0, 1) + normal(0, 1) + bernoulli(0.5)", resolve, allow_random=True, draw_offset=4)
    assert ce.random_draws == 4
    rng = FixedRandom(*([0.5] * 8))
    ce(S, rng)
    assert sorted(set(rng.asked)) == [4, 5, 6, 7]


# ---------------------------------------------------------------- rejected constructs
@pytest.mark.parametrize(
    "src, message",
    [
        ("__import__('os')", "function '__import__' is not allowed"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("eval('1')", "function 'eval' is not allowed"),
        ("round(a)", "function 'round' is not allowed"),
        ("len(e)", "function 'len' is not allowed"),
        ("a.real", "unknown field 'a.real'"),
        ("(a + b).real", "only dotted field paths may be accessed"),
        ("min(a, b).imag", "only dotted field paths may be accessed"),
        ("__import__('os').system('true')", "only plain calls"),
        ("a.__class__", "unknown field 'a.__class__'"),
        ("lambda: 1", "'Lambda' is not allowed"),
        ("a[0]", "'Subscript' is not allowed"),
        ("[x for x in a]", "'ListComp' is not allowed"),
        ("{x for x in a}", "'SetComp' is not allowed"),
        ("(x for x in a)", "'GeneratorExp' is not allowed"),
        ("{'k': 1}", "'Dict' is not allowed"),
        ("(y := 1)", "'NamedExpr' is not allowed"),
        ("f'{a}'", "'JoinedStr' is not allowed"),
        ("a @ b", "operator 'MatMult' is not allowed"),
        ("a << 1", "operator 'LShift' is not allowed"),
        ("a is b", "comparison 'Is' is not allowed"),
        ("None", "literal None is not allowed"),
        ("abs(x=1)", "only plain calls"),
        ("missing.field > 1", "unknown field 'missing.field'"),
        ("e == 'w'", "unknown enum value 'w' for e (expected one of ['x', 'y', 'z'])"),
        ("e in ['x', 'w']", "unknown enum value 'w'"),
        ("e in []", "non-empty list of enum values"),
        ("e in [1]", "only enum value strings"),
        ("a in ['x']", "'in' needs an enum field on the left"),
        ("e < 'y'", "enum values can only be compared with == or !="),
        ("e == 1", "type mismatch: cannot compare enum e with number"),
        ("e == o", "type mismatch: cannot compare enum e with enum other"),
        ("a > f", "type mismatch: cannot compare number with bool"),
        ("f < true", "bools can only be compared with == or !="),
        ("not a", "type mismatch: expected bool, got number"),
        ("-f", "type mismatch: expected number, got bool"),
        ("a and f", "type mismatch: expected bool, got number"),
        ("e + 1", "type mismatch: expected number, got enum e"),
        ("1 if a else 2", "type mismatch: expected bool, got number"),
        ("a if f else f", "both branches must have one type"),
        ("a == 'x'", "a string literal can only be compared with an enum field"),
        ("'x'", "a bare string is not a value"),
        ("min(a)", "min() needs at least 2 arguments"),
        ("exp(a, b)", "exp() takes 1 argument(s), got 2"),
        ("clip(a, 1)", "clip() takes 3 argument(s), got 2"),
        ("a +", "syntax error"),
        ("import os", "syntax error"),
        ("a = 1", "syntax error"),
        ("", "expected an expression string"),
        ("uniform(0, 1) > 0.5", "random draw uniform() is only allowed in effects"),
        ("bernoulli(0.5)", "random draw bernoulli() is only allowed in effects"),
        ("normal(0, 1)", "random draw normal() is only allowed in effects"),
    ],
)
def test_rejected(src: str, message: str) -> None:
    with pytest.raises(ExprError) as info:
        compile_expr(src, resolve)
    text = str(info.value)
    assert message in text
    if src:
        assert repr(src) in text or src in text, "the message quotes the expression"


def test_type_mismatch_with_a_string_names_the_string() -> None:
    # A string literal used as a number must be called a string in the message, not a bool.
    with pytest.raises(ExprError) as info:
        compile_expr("a + 'x'", resolve)
    assert "type mismatch" in str(info.value)
    assert "got bool" not in str(info.value)


def test_random_draw_arity_is_checked() -> None:
    with pytest.raises(ExprError, match=r"uniform\(\) takes 2 argument"):
        compile_expr("uniform(1)", resolve, allow_random=True)


def test_expressions_are_never_evaluated_as_python() -> None:
    # A field named like a builtin is a field; builtins are not reachable by name.
    with pytest.raises(ExprError, match="unknown field 'print'"):
        compile_expr("print", resolve)
    with pytest.raises(ExprError, match="unknown field '__builtins__'"):
        compile_expr("__builtins__", resolve)
