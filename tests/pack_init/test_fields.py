"""Field inference on hand-checkable columns: types, ranges, units, initial distributions, visibility."""

from __future__ import annotations

import numpy as np
import pandas as pd

from rlops.pack_init.fields import fit_init, guess_unit, infer_fields, value_range


def test_a_clipped_bound_is_kept_and_every_value_of_the_source_is_in_range() -> None:
    x = np.concatenate([np.full(30, 18.0), np.linspace(19, 70, 970)])  # 3% piled up on 18: a clipped bound
    assert value_range(x, integer=True) == (18.0, 70.0)
    y = np.concatenate([np.linspace(0.617, 1233.9, 100_000), [1234.5]])  # one value far in the tail
    lo, hi = value_range(y, integer=False)
    assert lo == 0.61 and hi == 1300.0  # the extremes (0.617, 1234.5), two significant digits outwards
    assert lo <= y.min() and y.max() <= hi


def test_a_column_stored_as_floats_stays_float_and_integers_widened_by_nulls_stay_int() -> None:
    df = pd.DataFrame(
        {
            "episode_id": ["a", "b", "c", "d"],
            "step": [0, 0, 0, 0],
            "state.s.rate": [0.0, 1.0, 2.0, 1.0],  # whole values, written as floats
            "state.s.count": [3, None, 5, 4],  # integers; a missing value made the column float64
        }
    )
    fields, _ = infer_fields(df, ("s.rate", "s.count"))
    assert {f.path: f.type for f in fields} == {"s.rate": "float", "s.count": "int"}


def test_units_are_guessed_from_the_name_only_where_it_says() -> None:
    assert guess_unit("user.age") == "years" and guess_unit("app.term_months") == "months"
    assert guess_unit("call.latency_ms") == "ms" and guess_unit("loan.amount") == "currency"
    assert guess_unit("user.debt_ratio") == "fraction" and guess_unit("user.colour") is None


def test_the_initial_distribution_is_the_likeliest_family() -> None:
    rng = np.random.default_rng(0)
    term = rng.integers(6, 37, 5000).astype(float)
    assert fit_init("a.term", "int", term, (), 6, 36)[0] == {"dist": "uniform", "low": 6, "high": 36}
    income = rng.lognormal(9.0, 0.5, 5000)
    init, _ = fit_init("a.income", "float", income, (), None, None)
    assert init["dist"] == "lognormal" and abs(init["mean"] - 9.0) < 0.05 and abs(init["sigma"] - 0.5) < 0.05
    assert fit_init("a.flag", "bool", np.zeros(10), (), None, None)[0] is False
    cat = fit_init("a.kind", "enum", np.array([0, 0, 0, 1.0]), ("x", "y"), None, None)[0]
    assert cat == {"dist": "categorical", "probs": {"x": 0.75, "y": 0.25}}


def test_types_values_and_visibility_from_columns() -> None:
    df = pd.DataFrame(
        {
            "episode_id": ["a", "a", "b", "b"],
            "step": [0, 1, 0, 1],
            "state.s.checked": [False, True, False, True],
            "state.s.score": [None, 610, None, 480],  # hidden until checked
            "state.s.stage": ["new", "open", "new", "open"],
            "state.s.amount": [1.5, 1.5, 2.25, 2.25],
        }
    )
    fields, skipped = infer_fields(df, ("s.checked", "s.score", "s.stage", "s.amount"))
    by = {f.path: f for f in fields}
    assert [by[p].type for p in ("s.checked", "s.score", "s.stage", "s.amount")] == ["bool", "int", "enum", "float"]
    assert by["s.stage"].values == ("new", "open") and by["s.stage"].init == "new"
    assert by["s.score"].visible_when == "s.checked" and by["s.score"].init["dist"] in (
        "normal",
        "uniform",
        "lognormal",
    )
    assert skipped == []


def test_a_column_name_outside_the_grammar_becomes_a_field_path_and_says_where_it_came_from() -> None:
    df = pd.DataFrame(
        {
            "episode_id": ["a", "b", "c", "d"],
            "step": [0, 0, 0, 0],
            "state.item-17": [1.5, 2.5, 3.5, 2.0],
            "state.user.7day-visits": [1, 2, 3, 4],
            "state.item_17": [0, 1, 0, 1],  # the name the first would take: that one is left out
        }
    )
    fields, skipped = infer_fields(df, ("item-17", "user.7day-visits", "item_17"))
    by = {f.path: f.source_column for f in fields}
    assert by == {"item_17": None, "user.f7day_visits": "state.user.7day-visits"}
    assert [(s.column, s.reason) for s in skipped] == [("state.item-17", "its field name item_17 is another column's")]
