"""The outcome contract: records in = accepted + quarantined, each bad record with its reason, and the
JSON Schema agreeing with the checks on what a valid line is."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import jsonschema
import pytest

from rlops.data_contracts.outcomes import OutcomeRecord, check_records, outcome_json_schema

GOOD: dict[str, Any] = {"episode_id": "e1", "ts": "2026-04-05T10:00:00Z", "values": {"default": 1, "paid": 0.5}}


def check(*records: dict[str, Any]) -> Any:
    n = len(records)
    return check_records(list(records), "credit_approval", ["f.jsonl"] * n, list(range(1, n + 1)))


def test_a_record_becomes_one_row_per_value() -> None:
    got = check(GOOD, {"episode_id": "e2", "ts": 1767780000, "components": {"loss": -2}})
    assert (got.records, got.accepted, len(got.quarantined)) == (2, 2, 0)
    assert got.rows[["episode_id", "kind", "name", "value"]].values.tolist() == [
        ["e1", "values", "default", 1.0],
        ["e1", "values", "paid", 0.5],
        ["e2", "components", "loss", -2.0],
    ]
    assert got.rows["ts"].iloc[2] == datetime.fromtimestamp(1767780000, UTC)


def test_flat_columns_as_a_csv_row_has_them() -> None:
    row = {"episode_id": "e1", "ts": "2026-04-05", "values.default": True, "values.paid": float("nan")}
    got = check(row)
    assert got.rows[["name", "value"]].values.tolist() == [["default", 1.0]]  # an empty cell is no value


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        ({**GOOD, "episode_id": ""}, "episode_id"),
        ({**GOOD, "ts": "yesterday"}, "ts 'yesterday'"),
        ({**GOOD, "values": {"default": "yes"}}, "values.default 'yes': expected a finite number"),
        ({**GOOD, "values": {"default": float("inf")}}, "expected a finite number"),
        ({"episode_id": "e1", "ts": "2026-04-05T10:00:00Z"}, "no outcome"),
        ({**GOOD, "scenario": "loan_desk"}, "this capture is of 'credit_approval'"),
        ({**GOOD, "amount": 3}, "unknown key(s) ['amount']"),
    ],
)
def test_bad_records_are_quarantined_with_their_reason(record: dict[str, Any], reason: str) -> None:
    got = check(GOOD, record)
    assert (got.records, got.accepted, len(got.quarantined)) == (2, 1, 1)
    assert got.quarantined["reason"].iloc[0].startswith("contract: ") and reason in got.quarantined["reason"].iloc[0]
    assert got.quarantined["line_no"].iloc[0] == 2 and set(got.rows["episode_id"]) == {"e1"}


def test_the_json_schema_accepts_what_the_checks_accept() -> None:
    schema = outcome_json_schema()
    when = datetime(2026, 4, 5, tzinfo=UTC)
    line = OutcomeRecord("e1", when, {"default": 1.0}, {"loss": -2.0}, "credit_approval").as_line()
    jsonschema.validate(line, schema)
    assert check(line).accepted == 1
    for bad in ({"episode_id": "e1", "ts": "2026-04-05T00:00:00Z"}, {**line, "values": {"default": "yes"}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
        assert check(bad).accepted == 0
