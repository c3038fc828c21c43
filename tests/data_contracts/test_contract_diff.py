"""``rlops env diff NEW --scenario OLD``: what a pack change does to agents that send the old shape and to the rows
already stored. A new field with a default is filled in; a new required field without one, a narrower
range or a dropped value refuses data of the old shape, and the stored rows are counted under the new
contract by the same validation capture runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from rlops.cli import main
from rlops.common.config import REPO_ROOT
from rlops.data_contracts.contract_diff import contract_changes, stored_rows_under
from rlops.data_contracts.schema import ColumnSpec, Contract

RUN_KEY = "20261201T0500"
AGE = "    age: {type: int, min: 18, max: 90, unit: years, init: {dist: normal, mean: 40, std: 11}}\n"


def _contract(*columns: ColumnSpec) -> Contract:
    return Contract("t", (ColumnSpec("episode_id", "str"), *columns))


def test_each_kind_of_change_says_whether_it_refuses_the_old_shape() -> None:
    old = _contract(
        ColumnSpec("state.age", "int", min=18, max=90),
        ColumnSpec("state.region", "str", values=("north", "south", "east")),
        ColumnSpec("state.gone", "float", required=False),
    )
    new = _contract(
        ColumnSpec("state.age", "int", min=21, max=99),
        ColumnSpec("state.region", "str", values=("north", "south")),
        ColumnSpec("state.channel", "str", values=("web", "branch"), default="web"),
        ColumnSpec("state.segment", "str", values=("a", "b")),
    )
    got = {(c.column, c.change): c for c in contract_changes(old, new)}
    assert set(got) == {
        ("state.age", "range"),
        ("state.region", "values"),
        ("state.channel", "added"),
        ("state.segment", "added"),
        ("state.gone", "removed"),
    }
    assert got["state.age", "range"].breaks and "[18, 90] but outside [21, 99]" in got["state.age", "range"].effect
    assert got["state.region", "values"].breaks and "'east'" in got["state.region", "values"].effect
    assert not got["state.channel", "added"].breaks and "'web'" in got["state.channel", "added"].effect
    assert got["state.segment", "added"].breaks and not got["state.gone", "removed"].breaks
    assert contract_changes(old, old) == []
    wider = _contract(
        ColumnSpec("state.age", "int", min=0, max=120),
        ColumnSpec("state.region", "str", values=("north", "south", "east", "west")),
        ColumnSpec("state.gone", "float", required=False),
    )
    assert not any(c.breaks for c in contract_changes(old, wider))


def test_stored_rows_are_counted_under_the_new_contract() -> None:
    new = _contract(ColumnSpec("state.age", "int", min=21, max=99), ColumnSpec("state.channel", "str", default="web"))
    rows = pd.DataFrame({"episode_id": ["a", "b", "c"], "state.age": [19, 30, 40]})
    impact = stored_rows_under(rows, new)
    assert (impact.rows, impact.accepted, impact.quarantined) == (3, 2, 1)
    assert sum(impact.reasons.values()) == 1 and "state.age" in next(iter(impact.reasons))
    assert impact.defaulted == {"state.channel": 3}


def _changed_pack(tmp_path: Path, replacement: str) -> Path:
    folder = tmp_path / "new" / "credit_approval"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", folder)
    doc = folder / "scenario.yaml"
    doc.write_text(doc.read_text().replace(AGE, replacement))
    return folder


def test_the_command_reports_a_pack_change_on_the_stored_rows(
    tmp_path: Path, tmp_storage_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["capture", "--scenario", "credit_approval", "--simulate", "--run-key", RUN_KEY]) == 0
    capsys.readouterr()
    channel = (
        "    channel: {type: enum, values: [web, branch], default: web, init: {dist: categorical, probs: {web: 1}}}\n"
    )
    compatible = _changed_pack(tmp_path / "a", AGE + channel)
    assert main(["env", "diff", str(compatible), "--scenario", "credit_approval", "--run-key", RUN_KEY, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    stored = report["stored"]
    assert not report["breaking"] and stored["rows"] > 0 and stored["quarantined"] == 0
    assert stored["defaulted"] == {"state.user_profile.channel": stored["rows"]}

    narrower = _changed_pack(tmp_path / "b", AGE.replace("min: 18", "min: 21"))
    assert main(["env", "diff", str(narrower), "--scenario", "credit_approval", "--run-key", RUN_KEY]) == 1
    out = capsys.readouterr().out
    assert "BREAKS state.user_profile.age: range [18, 90] -> [21, 90]" in out
    young = int(out.split(" would be accepted, ")[1].split(" refused")[0])
    assert young > 0  # the stored applicants aged 18 to 20


def test_two_different_packs_are_refused_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "diff", "loan_desk", "--scenario", "credit_approval"]) == 2
    err = capsys.readouterr().err
    assert "expected two versions of one pack" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--hours", "0"], "--hours 0: expected a whole number of hours from 1"),
        (["--hours", "3", "--run-key", RUN_KEY], "give --hours or --run-key, not both"),
        (["--run-key", "yesterday"], "run key"),
    ],
)
def test_a_bad_window_is_one_line_and_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["env", "diff", "credit_approval", "--scenario", "credit_approval", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
