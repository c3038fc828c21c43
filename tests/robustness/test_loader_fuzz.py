"""Generated bad input for the pack loader, in process (fast enough for many examples): any
value in a numeric slot, any expression built from risky pieces, any bytes as a file. The
loader either returns a pack whose states are finite numbers or raises :class:`PackError` —
never another exception, never a hang."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack

from .packs import SCENARIO, write_pack

SETTINGS = settings(
    max_examples=40, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

#: Numeric slots of the tiny scenario, as (text in SCENARIO, template with {v}).
SLOTS = [
    ("mean: 0, std: 1", "mean: {v}, std: 1"),
    ("mean: 0, std: 1", "mean: 0, std: {v}"),
    ("min: 0, max: 100", "min: 0, max: {v}"),
    ("min: 0, max: 100", "min: {v}, max: 100"),
    ("low: 1, high: 100", "low: {v}, high: 100"),
    ("horizon: 5", "horizon: {v}"),
    ("latency_ms: {mean: 10, std: 1}", "latency_ms: {{mean: {v}, std: 1}}"),
    ("init: {dist: normal, mean: 0, std: 1}", "init: {v}"),
]

YAML_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(
        lambda f: ".nan" if math.isnan(f) else (".inf" if f == math.inf else ("-.inf" if f == -math.inf else repr(f)))
    ),
    st.integers(min_value=-(10**40), max_value=10**40).map(str),
    st.sampled_from(
        ["~", "[]", "{}", "true", "'x'", "1e400", "-0.0", "0x10", "1_000", "2026-01-01", "!!binary aGk=", "&a 1", "*a"]
    ),
)


def load(tmp: str, **files: Any) -> Any:
    try:
        return load_pack(write_pack(Path(tmp), **files))
    except PackError as exc:
        assert "\n" not in str(exc)
        return exc


@SETTINGS
@given(slot=st.sampled_from(SLOTS), value=YAML_VALUES)
def test_any_value_in_a_numeric_slot(slot: tuple[str, str], value: str) -> None:
    old, template = slot
    with tempfile.TemporaryDirectory() as tmp:
        result = load(tmp, scenario=SCENARIO.replace(old, template.format(v=value), 1))
        if not isinstance(result, PackError):
            env = result.make_env(64)
            assert bool(torch.isfinite(env.S).all()), f"{value!r} in {template!r} gave non-finite states"


PIECES = [
    "case.amount",
    "case.score",
    "1",
    "0",
    "10",
    "1e30",
    "1e38",
    "(",
    ")",
    "**",
    "*",
    "/",
    "//",
    "%",
    "+",
    "-",
    "not",
    "and",
    "or",
    "<",
    "==",
    "case.done",
    "min(",
    "max(",
    "exp(",
    "log(",
    ",",
    "true",
    "9" * 50,
]


@SETTINGS
@given(parts=st.lists(st.sampled_from(PIECES), min_size=1, max_size=40))
def test_any_expression_in_an_effect(parts: list[str]) -> None:
    expr = " ".join(parts).replace('"', "")
    with tempfile.TemporaryDirectory() as tmp:
        result = load(tmp, scenario=SCENARIO.replace('"case.amount * 0.5"', f'"{expr}"', 1))
        if not isinstance(result, PackError):
            env = result.make_env(16)
            env.step(env.action_masks().float().argmax(dim=1))
            assert bool(torch.isfinite(env.S).all())


@SETTINGS
@given(data=st.binary(max_size=400), name=st.sampled_from(["scenario.yaml", "rules.yaml", "reward_v1.py"]))
def test_any_bytes_as_a_pack_file(data: bytes, name: str) -> None:
    key = {"scenario.yaml": "scenario", "rules.yaml": "rules", "reward_v1.py": "reward"}[name]
    with tempfile.TemporaryDirectory() as tmp:
        assert isinstance(load(tmp, **{key: data}), PackError)


@given(depth=st.sampled_from([300, 900, 3000]))
@settings(max_examples=3, deadline=None, database=None)
def test_state_nested_deeper_than_the_stack(depth: int) -> None:
    # Groups of groups in flow style: a few bytes per level, deep enough to exhaust recursion.
    deep = "".join(f"{{g{i}: " for i in range(depth)) + "{type: int, init: 0}" + "}" * depth
    with tempfile.TemporaryDirectory() as tmp:
        result = load(tmp, scenario=SCENARIO.replace("state:\n", f"state:\n  deep: {deep}\n", 1))
        # A few hundred levels load (a legal, if odd, pack); past the stack it is one clear error.
        assert isinstance(result, PackError) or depth < 1000, result
