"""The decision map's component scores: rows shaped once by the console's reader give exactly what
reading each shaped breakdown again (``read_breakdown``) gives, bad rows included."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import pytest

ITEM = {"component": "loan_outcome", "score": 1.5, "rule_ref": "rules.yaml#L3", "reason": "repaid"}
RAW: list[Any] = [
    json.dumps({"total": 1.0, "breakdown": [ITEM, {"component": "cost", "score": -0.5}]}),
    {"total": 2.0, "breakdown": [ITEM]},
    [ITEM, {"component": 7, "score": "0.25"}],  # an SDK list; a numeric name, a numeric text score
    {"speed": 0.2, "accuracy": 0.9, "total": 1.1},  # {component: score}
    json.dumps({"breakdown": [{"component": "  ", "score": 1.0}]}),  # a blank name: no components
    json.dumps({"breakdown": [{**ITEM, "reason": "x" * 501}]}),  # over MAX_TEXT
    json.dumps({"breakdown": [{**ITEM, "rule_ref": "r" * 501}]}),
    json.dumps({"breakdown": [{"component": f"c{i}", "score": 1.0} for i in range(257)]}),  # too many
    json.dumps({"breakdown": [{"component": "a", "score": math.inf}, {"component": "b", "score": 2}]}),
    json.dumps({"breakdown": [{"component": "a", "score": 1}, {"component": "a", "score": 3}]}),  # repeated
    "not json",
    None,
    float("nan"),
    json.dumps([1, "two"]),
]


def test_components_equal_reading_each_shaped_breakdown(tmp_path: Any) -> None:
    from rlops.console.aggregates import breakdown_items
    from rlops.console.data import ProjectData
    from rlops.pipeline_steps.audit.rows import component_frame

    df = pd.DataFrame({"reward_breakdown": RAW}, index=pd.RangeIndex(10, 10 + len(RAW)))
    reference = component_frame(df.assign(reward_breakdown=[{"breakdown": breakdown_items(r)} for r in RAW]))
    got = ProjectData.components(None, df)  # type: ignore[arg-type]  # reads nothing of the project
    pd.testing.assert_frame_equal(got[0], reference[0])
    assert got[1] == reference[1]
    assert got[0].loc[14:17].eq(0).all().all() and "c0" not in got[0].columns  # the rejected rows


def _one_by_one(raw: list[Any], index: pd.Index) -> tuple[pd.DataFrame, dict[str, str | None]]:
    from rlops.console.aggregates import breakdown_items
    from rlops.data_contracts.shapes import displayable_items
    from rlops.pipeline_steps.audit.rows import component_records

    return component_records(index, [displayable_items(breakdown_items(r)) for r in raw])


def _store_text(rng: Any, n: int) -> list[str]:
    """Breakdowns as the trace store writes them: a few components a row, scores of every size."""
    names = ["due_diligence", "handling_time", "notified", "loan_outcome", "ünïcode ✓"]
    out = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        items = [
            {
                "component": names[int(rng.integers(len(names)))],
                "score": float(rng.standard_normal() * 10.0 ** int(rng.integers(-6, 6))),
                "reason": "why" * int(rng.integers(0, 3)),
                "rule_ref": None if rng.random() < 0.3 else f"RULE_{int(rng.integers(9))}",
            }
            for _ in range(k)
        ]
        out.append(json.dumps({"total": 0.0, "breakdown": items}, separators=(",", ":")))
    return out


BAD_LINES: list[Any] = [
    json.dumps({"breakdown": [{"component": 7, "score": 1.0}]}),  # a number where a name is text
    json.dumps({"breakdown": [{"component": "a", "score": "0.5"}]}),  # text where a score is a number
    json.dumps({"breakdown": [{"component": "a", "score": True}]}),
    json.dumps({"breakdown": [{"component": "a", "score": 1, "rule_ref": 5}]}),
    json.dumps({"breakdown": [{"component": "a", "score": 1, "reason": ["x"]}]}),
    json.dumps({"breakdown": {"a": 1.0}}),  # not a list
    json.dumps({"breakdown": [1, 2]}),
    '{"breakdown":[{"component":"a","score":1}],"breakdown":[{"component":"b","score":2}]}',  # repeated key
    '{"breakdown":[{"component":"a","score":1}]}{"breakdown":[]}',  # two objects on a line
    '{"breakdown":[{"component":"a","score":NaN}]}',
    '{"breakdown":[{"component":"a","score":1e400}]}',
    '{\n"breakdown":[{"component":"a","score":1}]}',  # a line break
    '{"breakdown":[{"component":"\\ud800","score":1}]}',  # a lone surrogate
    '{"breakdown": [{"component": "a", "score": 12345678901234567890}]}',
]


@pytest.mark.parametrize("bad", [None, *BAD_LINES])
def test_store_rows_parsed_together_equal_each_row_read_alone(bad: Any) -> None:
    """The store's own rows go through Arrow's reader together; mixed with every other shape
    (RAW) and with one row Arrow would read otherwise than ``json`` (each of BAD_LINES: then every
    row is read one by one), the scores and rule refs are those of reading each row alone."""
    import numpy as np

    from rlops.console.breakdowns import component_scores

    rng = np.random.default_rng(3)
    raw = _store_text(rng, 400) + RAW + _store_text(rng, 100) + ([] if bad is None else [bad])
    rng.shuffle(raw)
    index = pd.RangeIndex(5, 5 + len(raw))
    got, refs = component_scores(index, raw)
    want, want_refs = _one_by_one(raw, index)
    pd.testing.assert_frame_equal(got, want)
    assert refs == want_refs and list(refs) == list(want_refs)


@pytest.mark.parametrize(
    "raw",
    [
        [],
        [None, "not json"],
        [json.dumps({"breakdown": []})] * 3,
        [json.dumps({"breakdown": [{"component": "a", "score": 1}]})],
        [json.dumps({"breakdown": [{"component": "a"}, {"score": 1}, {"component": None, "score": None}]})],
        [json.dumps({"total": 1.0, "speed": 0.5}), json.dumps({"breakdown": None})],
    ],
)
def test_edge_batches_equal_each_row_read_alone(raw: list[Any]) -> None:
    from rlops.console.breakdowns import component_scores

    index = pd.RangeIndex(len(raw))
    got, refs = component_scores(index, raw)
    want, want_refs = _one_by_one(raw, index)
    pd.testing.assert_frame_equal(got, want)
    assert refs == want_refs
