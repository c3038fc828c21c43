"""A pack that gains a field does not break the agents and the logs that predate it: a field with a
``default:`` fills a state or a row that lacks it — the encoder warns once and counts, capture
accepts and says how many rows took it — while a field without one still refuses them."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from rlops.agent_sdk.encoding import ObservationEncoder, StateError
from rlops.common.config import REPO_ROOT
from rlops.data_contracts.contracts import contract_for
from rlops.data_contracts.validation import validate_frame
from rlops.sandbox.pack import load_pack

NEW_FIELD = "    channel: {type: enum, values: [web, branch, phone], init: web%s}\n"


def _pack_with_new_field(tmp_path: Path, default: str | None) -> Path:
    pack = tmp_path / "credit_approval"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", pack)
    text = (pack / "scenario.yaml").read_text()
    field = NEW_FIELD % ("" if default is None else f", default: {default}")
    (pack / "scenario.yaml").write_text(text.replace("  user_profile:\n", "  user_profile:\n" + field, 1))
    return pack


def _old_rows(n: int = 30) -> pd.DataFrame:
    """Trace rows of the pack as it was: no user_profile.channel column."""
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    return rollout_traces(pack, rule_policy, 10, seed=0, profile="live", source="live").head(n)


def test_an_agent_older_than_the_field_is_served_with_its_default(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    encoder = ObservationEncoder.from_pack(_pack_with_new_field(tmp_path, "branch"))
    row = _old_rows(1).iloc[0]
    state = {k: row[k] for k in row.index if k.startswith("state.") and pd.notna(row[k])}
    with caplog.at_level(logging.WARNING, logger="rlops.agent_sdk.encoding"):
        S1, _, _ = encoder.encode(state)
        encoder.encode(state)
    assert encoder.defaulted == {"user_profile.channel": 2}
    assert [r.message for r in caplog.records].count(caplog.records[0].message) == 1  # warned once
    assert "user_profile.channel" in caplog.records[0].message
    given, _, _ = encoder.encode({**state, "state.user_profile.channel": "branch"})
    assert (given == S1).all()  # the default is what the field would have said


def test_without_a_default_the_state_is_refused(tmp_path: Path) -> None:
    encoder = ObservationEncoder.from_pack(_pack_with_new_field(tmp_path, None))
    row = _old_rows(1).iloc[0]
    state = {k: row[k] for k in row.index if k.startswith("state.") and pd.notna(row[k])}
    with pytest.raises(StateError, match="user_profile.channel"):
        encoder.encode(state)


@pytest.mark.parametrize("default", ["phone", None])
def test_capture_accepts_old_rows_with_the_default_and_counts_them(tmp_path: Path, default: str | None) -> None:
    contract = contract_for(load_pack(_pack_with_new_field(tmp_path, default), check_liveness=False))
    rows = _old_rows()
    result = validate_frame(rows, contract)
    if default is None:
        assert len(result.accepted) == 0 and len(result.quarantined) == len(rows)
        assert result.quarantined["quarantine_reason"].str.contains("user_profile.channel").all()
        return
    assert len(result.accepted) == len(rows) and result.defaulted == {"state.user_profile.channel": len(rows)}
    assert set(result.accepted["state.user_profile.channel"]) == {"phone"}


def test_a_default_outside_the_field_is_a_pack_error(tmp_path: Path) -> None:
    from rlops.common.errors import UserError

    with pytest.raises(
        UserError, match=r"scenario.yaml:16: unknown enum value 'fax'.* at user_profile\.channel\.default"
    ):
        load_pack(_pack_with_new_field(tmp_path, "fax"), check_liveness=False)
