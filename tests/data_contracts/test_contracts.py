"""The trace and label contracts: GE suites, accepted/quarantined split, readable reasons."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import great_expectations as gx
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlops.data_contracts import (
    REASON_COLUMN,
    ColumnSpec,
    StateField,
    label_contract,
    parse_json_lines,
    quarantine_frame,
    trace_contract,
    validate_frame,
)
from rlops.data_contracts.records import QUARANTINE_SCHEMA

ACTIONS = ["screen", "fraud_check", "credit_report", "approve", "reject"]
FIELDS = [
    ("user_profile.credit_score", "int", 300, 850, None),
    ("user_profile.income", "float", 0, None, None),
    ("application.channel", "enum", None, None, ["web", "branch"]),
    {"name": "flags.vip", "kind": "bool"},
]


@pytest.fixture(scope="module")
def contract():
    return trace_contract("credit_approval", ACTIONS, FIELDS, reward_fn_versions=["v0", "v1"])


def good_row(i: int = 0) -> dict[str, Any]:
    return {
        "trace_id": f"req-{i // 3}",
        "episode_id": f"ep-{i // 3}",
        "step": i % 3,
        "ts": "2026-01-05T10:15:00.250000+00:00",
        "scenario": "credit_approval",
        "source": "live",
        "test_group": "A",
        "policy_version": "champion-7",
        "reward_fn_version": "v1",
        "state": {
            "user_profile": {"credit_score": 700, "income": 5200.5},
            "application": {"channel": "web"},
            "flags": {"vip": False},
        },
        "action": "approve",
        "action_mask": [True, True, True, True, False],
        "logp": -0.4,
        "entropy": 0.9,
        "value": 1.2,
        "reward_total": 0.8,
        "reward_breakdown": [{"component": "sla", "score": 0.8, "rule_ref": "SLA_v3.2_4.1"}],
        "done": False,
        "latency_ms": 35.5,
        "error": None,
    }


def frame(rows: list[dict[str, Any]], flatten: bool = True) -> pd.DataFrame:
    parsed, bad = parse_json_lines([json.dumps(r) for r in rows], flatten=flatten)
    assert bad.empty
    return parsed


def set_path(row: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    row = copy.deepcopy(row)
    node = row
    *parents, leaf = path.split(".")
    for p in parents:
        node = node[p]
    if value is _DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return row


_DELETE = object()

# (what is wrong, field path, bad value, expectation type, column)
BAD_ROWS = [
    ("wrong type", "step", "three", "expect_column_values_to_be_in_type_list", "step"),
    ("wrong type (bool)", "state.flags.vip", "yes", "expect_column_values_to_be_in_type_list", "state.flags.vip"),
    (
        "out of range",
        "state.user_profile.credit_score",
        950,
        "expect_column_values_to_be_between",
        "state.user_profile.credit_score",
    ),
    ("negative step", "step", -1, "expect_column_values_to_be_between", "step"),
    ("unknown action", "action", "launch_rocket", "expect_column_values_to_be_in_set", "action"),
    (
        "unknown enum value",
        "state.application.channel",
        "fax",
        "expect_column_values_to_be_in_set",
        "state.application.channel",
    ),
    ("bad source", "source", "prod", "expect_column_values_to_be_in_set", "source"),
    ("other scenario", "scenario", "claims", "expect_column_values_to_be_in_set", "scenario"),
    ("unknown reward fn", "reward_fn_version", "v9", "expect_column_values_to_be_in_set", "reward_fn_version"),
    ("missing action", "action", _DELETE, "expect_column_values_to_not_be_null", "action"),
    ("null required", "episode_id", None, "expect_column_values_to_not_be_null", "episode_id"),
    (
        "missing state field",
        "state.user_profile.credit_score",
        _DELETE,
        "expect_column_values_to_not_be_null",
        "state.user_profile.credit_score",
    ),
    ("empty id", "trace_id", "", "expect_column_value_lengths_to_be_between", "trace_id"),
    ("bad timestamp", "ts", "2026-13-45T99:00:00Z", "expect_column_values_to_not_be_null", "ts"),
    ("no legal action", "action_mask", "00000", "expect_column_values_to_match_regex", "action_mask"),
    ("mask length", "action_mask", "111", "expect_column_value_lengths_to_equal", "action_mask"),
    ("mask of odd items", "action_mask", ["x", "y"], "expect_column_values_to_be_in_type_list", "action_mask"),
    ("positive logp", "logp", 0.5, "expect_column_values_to_be_between", "logp"),
    ("negative latency", "latency_ms", -3.0, "expect_column_values_to_be_between", "latency_ms"),
    (
        "breakdown not JSON",
        "reward_breakdown",
        "{not json",
        "expect_column_values_to_be_json_parseable",
        "reward_breakdown",
    ),
    ("64-bit overflow", "step", 2**70, "expect_column_values_to_be_in_type_list", "step"),
]


def test_suites_are_real_gx_suites(contract):
    suites = contract.suites()
    assert all(isinstance(s, gx.ExpectationSuite) for s in suites)
    types = {e.expectation_type for s in suites for e in s.expectations}
    assert {
        "expect_column_to_exist",
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_in_type_list",
        "expect_column_values_to_be_between",
        "expect_column_values_to_be_in_set",
    } <= types
    assert len(suites) == 2  # types, then values (no JSON-schema stage for traces)


def test_valid_rows_pass_typed_in_contract_order(contract):
    result = validate_frame(frame([good_row(i) for i in range(9)]), contract)
    assert result.quarantined.empty, result.quarantined[REASON_COLUMN].tolist()
    acc = result.accepted
    assert len(acc) == 9
    assert list(acc.columns[: len(contract.columns)]) == contract.column_names
    assert acc["action_mask"].iloc[0] == "11110"  # list of bools → '0'/'1' string
    assert json.loads(acc["reward_breakdown"].iloc[0])["breakdown"][0]["rule_ref"] == "SLA_v3.2_4.1"  # normalised
    assert acc["ts"].dt.tz is not None and acc["step"].dtype == np.int64
    # The typed rows fit the stored schema exactly.
    table = pa.Table.from_pandas(acc[contract.column_names], schema=contract.arrow_schema(), preserve_index=False)
    assert table.num_rows == 9


@pytest.mark.parametrize("what,path,value,expectation,column", BAD_ROWS, ids=[b[0] for b in BAD_ROWS])
def test_each_bad_row_is_quarantined_with_a_readable_reason(contract, what, path, value, expectation, column):
    rows = [good_row(0), set_path(good_row(1), path, value), good_row(2)]
    result = validate_frame(frame(rows), contract)
    assert len(result.accepted) + len(result.quarantined) == 3
    assert len(result.accepted) == 2 and len(result.quarantined) == 1
    reason = result.quarantined[REASON_COLUMN].iloc[0]
    assert f"{expectation}[{column}]" in reason, reason
    assert result.quarantined["_line_no"].iloc[0] == 2  # the input row itself is kept


def test_infinity_is_refused_by_the_parser_and_by_the_contract(contract):
    # JSON has no Infinity/NaN: the line is quarantined before validation ...
    rows, bad = parse_json_lines([json.dumps(set_path(good_row(1), "value", float("inf")))])
    assert rows.empty and "Infinity is not a JSON value" in bad[REASON_COLUMN].iloc[0]
    # ... and rows built in memory (sandbox traces) meet the contract's finite check.
    df = frame([good_row(0), good_row(1)])
    df.loc[1, "value"] = float("inf")
    result = validate_frame(df, contract)
    assert len(result.accepted) == 1
    assert "expect_column_values_to_be_between[value]" in result.quarantined[REASON_COLUMN].iloc[0]


def test_reasons_show_the_offending_value(contract):
    rows = [set_path(good_row(), "state.user_profile.credit_score", 950), set_path(good_row(), "step", "three")]
    reasons = validate_frame(frame(rows), contract).quarantined[REASON_COLUMN].tolist()
    assert reasons[0].endswith("outside [300, 850] (got 950)")
    assert "(got str 'three')" in reasons[1]


def test_every_problem_of_a_stage_is_listed(contract):
    row = set_path(set_path(good_row(), "action", "launch"), "logp", 2.0)
    reason = validate_frame(frame([row]), contract).quarantined[REASON_COLUMN].iloc[0]
    assert "[action]" in reason and "[logp]" in reason and "; " in reason


def test_missing_required_column_quarantines_every_row(contract):
    rows = [set_path(good_row(i), "policy_version", _DELETE) for i in range(4)]
    result = validate_frame(frame(rows), contract)
    assert result.accepted.empty and len(result.quarantined) == 4
    assert all("expect_column_to_exist[policy_version]" in r for r in result.quarantined[REASON_COLUMN])


def test_absent_optional_columns_are_null(contract):
    row = good_row()
    for key in ("test_group", "logp", "entropy", "value", "reward_breakdown", "error"):
        row.pop(key, None)
    acc = validate_frame(frame([row]), contract).accepted
    assert len(acc) == 1 and acc["logp"].isna().all() and acc["test_group"].isna().all()


def test_unknown_keys_are_kept_in_extra(contract):
    row = {**good_row(), "crm_ticket": "T-9", "state": {**good_row()["state"], "new": 1}}
    acc = validate_frame(frame([row]), contract).accepted
    assert json.loads(acc["extra"].iloc[0]) == {"crm_ticket": "T-9", "state.new": 1}


def test_typed_frames_from_a_simulator_validate():
    """Rows as the sandbox builds them: numpy/nullable dtypes, a field hidden until it is
    fetched (null), a boolean error flag, scenario field objects as the field list."""
    fields = [
        SimpleNamespace(
            path="user_profile.credit_score",
            type="int",
            min=300,
            max=850,
            values=(),
            visible_when="system_status.credit_report_fetched",
        ),
        SimpleNamespace(path="user_profile.income", type="float", min=0, max=None, values=(), visible_when=None),
        SimpleNamespace(
            path="application.channel", type="enum", min=None, max=None, values=("web", "branch"), visible_when=None
        ),
        SimpleNamespace(
            path="hidden.default_u", type="float", min=0, max=1, values=(), visible_when=None, observed=False
        ),
    ]
    contract = trace_contract("credit_approval", ACTIONS, lambda: fields)
    assert "state.hidden.default_u" not in contract
    assert not contract["state.user_profile.credit_score"].required
    n = 50
    score = pd.array([None] * 10 + [640] * (n - 10), dtype="Int64")
    df = pd.DataFrame(
        {
            "trace_id": [f"t{i}" for i in range(n)],
            "episode_id": [f"e{i}" for i in range(n)],
            "step": np.arange(n),
            "ts": pd.Timestamp("2026-01-05T10:00Z"),
            "scenario": "credit_approval",
            "source": "sandbox",
            "policy_version": "7",
            "state.user_profile.credit_score": score,
            "state.user_profile.income": np.linspace(0, 1e4, n),
            "state.application.channel": "branch",
            "action": "screen",
            "action_mask": "10000",
            "logp": np.full(n, -0.1),
            "reward_breakdown": json.dumps({"total": 1, "breakdown": []}),
            "done": np.zeros(n, bool),
            "error": np.arange(n) % 7 == 0,
            "fallback": np.zeros(n, bool),
        },
        index=np.arange(100, 100 + n),
    )
    df.loc[df.index[30], "state.user_profile.credit_score"] = 10
    result = validate_frame(df, contract)
    assert len(result.accepted) == n - 1 and len(result.quarantined) == 1
    assert result.quarantined["step"].iloc[0] == 30
    acc = result.accepted
    assert acc["state.user_profile.credit_score"].isna().sum() == 10
    assert acc["error"].iloc[0] == "error" and acc["error"].iloc[1:7].isna().all()
    pa.Table.from_pandas(acc[contract.column_names], schema=contract.arrow_schema(), preserve_index=False)


def test_malformed_json_lines_are_kept_with_their_text():
    lines = [json.dumps(good_row()), '{"trace_id": "x", ', "[1, 2]", '"just a string"']
    rows, bad = parse_json_lines(lines, "file:///landing/a.jsonl")
    assert len(rows) == 1 and len(bad) == 3
    assert bad["raw"].tolist() == lines[1:]
    assert bad["_line_no"].tolist() == [2, 3, 4]
    assert "not valid JSON" in bad[REASON_COLUMN].iloc[0]
    assert "JSON list, expected an object" in bad[REASON_COLUMN].iloc[1]
    assert rows["state.user_profile.credit_score"].iloc[0] == 700  # nested state flattened


def test_quarantine_frame_has_the_stored_shape(contract):
    lines = [json.dumps(set_path(good_row(), "action", "nope")), "garbage"]
    rows, bad = parse_json_lines(lines, "file:///l.jsonl")
    q = pd.concat([validate_frame(rows, contract).quarantined, bad], ignore_index=True)
    out = quarantine_frame(q, "credit_approval")
    table = pa.Table.from_pandas(out, schema=QUARANTINE_SCHEMA, preserve_index=False)
    assert table.num_rows == 2
    assert out["raw"].tolist() == lines and out["line_no"].tolist() == [1, 2]
    assert out["ts"].notna().tolist() == [True, False]
    # Rows that never were text are kept as JSON.
    df_q = validate_frame(pd.DataFrame([{"trace_id": "t", "step": "x"}]), contract).quarantined
    assert json.loads(quarantine_frame(df_q, "s")["raw"].iloc[0]) == {"trace_id": "t", "step": "x"}


_MUTATIONS = [None] + [(b[1], b[2]) for b in BAD_ROWS]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.integers(0, len(_MUTATIONS) - 1), min_size=1, max_size=30))
def test_rows_in_equals_accepted_plus_quarantined(contract, picks):
    rows = [
        good_row(i) if _MUTATIONS[k] is None else set_path(good_row(i), *_MUTATIONS[k]) for i, k in enumerate(picks)
    ]
    result = validate_frame(frame(rows), contract)
    assert len(result.accepted) + len(result.quarantined) == len(rows)
    bad_lines = sorted(i + 1 for i, k in enumerate(picks) if _MUTATIONS[k] is not None)
    assert sorted(result.quarantined["_line_no"].tolist()) == bad_lines
    assert result.quarantined[REASON_COLUMN].str.len().gt(0).all()


def test_empty_input(contract):
    result = validate_frame(pd.DataFrame(), contract)
    assert result.accepted.empty and result.quarantined.empty
    assert list(result.accepted.columns[:3]) == ["trace_id", "episode_id", "step"]


# --------------------------------------------------------------------------- label items


def label_item(**over: Any) -> dict[str, Any]:
    item = {
        "item_id": "q-1",
        "scenario": "credit_approval",
        "state": {"state.user_profile.credit_score": 540},
        "candidate_actions": ["approve", "reject"],
        "label": "reject",
        "annotator": "risk-team/ana",
        "ts": "2026-01-05T11:00:00Z",
    }
    item.update(over)
    return item


@pytest.mark.parametrize(
    "over,expected",
    [
        ({}, None),
        ({"label": None, "annotator": None}, None),  # pending item
        ({"label": "teleport"}, "expect_column_values_to_be_in_set[label]"),
        (
            {"candidate_actions": ["approve", "teleport"]},
            "expect_column_values_to_match_json_schema[candidate_actions]",
        ),
        ({"candidate_actions": []}, "expect_column_values_to_match_json_schema[candidate_actions]"),
        ({"state": "not json"}, "expect_column_values_to_be_json_parseable[state]"),
        ({"state": [1, 2]}, "expect_column_values_to_match_json_schema[state]"),
        ({"item_id": None}, "expect_column_values_to_not_be_null[item_id]"),
    ],
)
def test_label_contract(over, expected):
    contract = label_contract("credit_approval", ACTIONS)
    items = [label_item(item_id=f"ok-{i}") for i in range(3)] + [label_item(**over)]
    result = validate_frame(frame(items, flatten=False), contract)
    assert len(result.accepted) + len(result.quarantined) == 4
    if expected is None:
        assert result.quarantined.empty
    else:
        assert len(result.quarantined) == 1
        assert expected in result.quarantined[REASON_COLUMN].iloc[0]


# --------------------------------------------------------------------------- schema errors


def test_state_field_descriptions():
    assert StateField.coerce(("a.b", "float")).column_spec().name == "state.a.b"
    assert StateField.coerce({"name": "state.c", "kind": "enum", "values": ["x"]}).column_spec().values == ("x",)
    assert StateField.coerce(("a", "int", 0, 9, None, True)).column_spec().required is False
    assert StateField.coerce({"name": "a", "kind": "bool", "visible_when": "x"}).nullable
    with pytest.raises(ValueError, match="unknown kind 'text'"):
        StateField.coerce(("a", "text")).column_spec()
    with pytest.raises(ValueError, match="needs enum_values"):
        StateField.coerce(("a", "enum")).column_spec()
    with pytest.raises(ValueError, match="expected \\(name, kind"):
        StateField.coerce("credit_score")


def test_contract_errors():
    with pytest.raises(ValueError, match="action list is empty"):
        trace_contract("s", [])
    with pytest.raises(ValueError, match="duplicate action"):
        trace_contract("s", ["a", "a"])
    with pytest.raises(ValueError, match="declared twice"):
        trace_contract("s", ["a"], [("step", "int")] * 0 + [("x", "int"), ("x", "int")])
    with pytest.raises(ValueError, match="must be required"):
        ColumnSpec("when", "timestamp", required=False)
    with pytest.raises(TypeError, match="expected a pandas DataFrame"):
        validate_frame([{"a": 1}], trace_contract("s", ["a"]))  # type: ignore[arg-type]


def test_batch_tailored_suites_split_rows_as_the_whole_suites_do(contract, monkeypatch):
    """The suites of a batch leave out the type checks of columns whose values are all of their
    kind (``typed_columns``): the split and the reasons are those of the suites that check every
    column's types, on a batch holding every kind of bad row."""
    import rlops.data_contracts.validation as validation
    from rlops.data_contracts.conversion import normalize

    rows = [good_row(i) for i in range(6)] + [set_path(good_row(10 + i), b[1], b[2]) for i, b in enumerate(BAD_ROWS)]
    df = frame(rows)
    raw = normalize(df.reset_index(drop=True), contract)
    typed = validation.typed_columns(raw, contract)
    assert "state.user_profile.income" in typed and "trace_id" in typed  # a float column, a text one
    assert "step" not in typed and "action_mask" not in typed  # "three" and 2**70; a list of odd items
    tailored = validate_frame(df, contract)
    monkeypatch.setattr(validation, "typed_columns", lambda raw, contract: [])
    whole = validate_frame(df, contract)
    pd.testing.assert_frame_equal(tailored.accepted, whole.accepted)
    pd.testing.assert_frame_equal(tailored.quarantined, whole.quarantined)
    assert len(whole.quarantined) == len(BAD_ROWS)
