"""The decision map's component scores: rows shaped once by the console's reader give exactly what
reading each shaped breakdown again (``read_breakdown``) gives, bad rows included."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

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
    from rlops.pipeline_steps.audit.replay import component_frame

    df = pd.DataFrame({"reward_breakdown": RAW}, index=pd.RangeIndex(10, 10 + len(RAW)))
    reference = component_frame(df.assign(reward_breakdown=[{"breakdown": breakdown_items(r)} for r in RAW]))
    got = ProjectData.components(None, df)  # type: ignore[arg-type]  # reads nothing of the project
    pd.testing.assert_frame_equal(got[0], reference[0])
    assert got[1] == reference[1]
    assert got[0].loc[14:17].eq(0).all().all() and "c0" not in got[0].columns  # the rejected rows
