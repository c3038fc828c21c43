"""The trace contract's JSON Schema accepts what the contract accepts: a tracer's rows of every
built-in pack validate, and a row the contract quarantines (an unknown action, a mask of the wrong
length, a missing episode id) does not."""

from __future__ import annotations

import json

import jsonschema
import pytest

from rlops.common.config import REPO_ROOT
from rlops.data_contracts.contracts import contract_for
from rlops.data_contracts.json_schema import contract_json_schema


@pytest.mark.parametrize("scenario", ["credit_approval", "offer_selection"])
def test_a_tracers_rows_validate_and_broken_ones_do_not(scenario: str) -> None:
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / scenario, check_liveness=False)
    schema = contract_json_schema(contract_for(pack))
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    df = rollout_traces(pack, rule_policy, 20, seed=0, profile="live", source="live")
    rows = [json.loads(line) for line in df.to_json(orient="records", lines=True, date_format="iso").splitlines()]
    for row in rows:
        validator.validate(row)
    row = rows[0]
    for broken in (
        {**row, "action": "not_an_action"},
        {**row, "action_mask": row["action_mask"] + "1"},
        {k: v for k, v in row.items() if k != "episode_id"},
        {**row, "step": -1},
    ):
        assert not validator.is_valid(broken), broken
