"""``rlops model evaluate --target``: any target estimated on a window of logged traffic, every
estimator with its interval as text and as ``--json``; exit 0 whatever the estimate shows (a
report, not a gate), exit 2 with one line naming the problem for a bad target."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.pipeline_steps.promotion.ope import ESTIMATORS
from tests.ope_target_kit import OPE, RUN_KEY, SCENARIO, logged_rows, logging_probabilities, write_table, write_window

KEYED = ["model", "evaluate", "--scenario", SCENARIO, "--run-key", RUN_KEY]


@pytest.fixture
def home(rlops_home: Path) -> Path:
    """A project home whose trace store holds the logged window, judged with the test's ``ope:``."""
    from rlops.pipeline_steps.infra.context import StepContext

    params = yaml.safe_load((rlops_home / "params.yaml").read_text())
    params["ope"] = {**(params.get("ope") or {}), **OPE}
    (rlops_home / "params.yaml").write_text(yaml.safe_dump(params))
    ctx = StepContext.create(SCENARIO, RUN_KEY)
    write_window(ctx.storage, ctx.uri, logged_rows())
    return rlops_home


def rlops(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    from rlops.cli import main

    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def test_uniform_prints_each_estimator_with_its_interval_and_json_carries_the_same(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, _ = rlops([*KEYED, "--target", "uniform"], capsys)
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0].startswith(f"{SCENARIO}: uniform (uniform over the legal actions) on 400 complete live episodes")
    rc, text, _ = rlops([*KEYED, "--target", "uniform", "--json"], capsys)
    doc: dict[str, Any] = json.loads(text)
    assert rc == 0 and set(doc["estimates"]) == set(ESTIMATORS)
    for name, e in doc["estimates"].items():
        row = next(ln for ln in lines if ln.split()[:1] == [name.upper()])
        assert row.split()[1] == f"{e['value']:.4g}" and f"[{e['low']:.4g}, {e['high']:.4g}]" in row
    for words in ("ESS ", "largest weight ", "top-10 weight share ", "unsupported share ", "logged value "):
        assert any(ln.strip().startswith(words) or words in ln for ln in lines), words
    assert f"logged value {doc['logged_return']:.4g}" in out
    assert doc["target"] == "uniform" and doc["episodes"] == 400 and doc["ess"] > 10


def test_a_file_of_the_logger_s_own_probabilities_reads_the_logged_return(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_table(logging_probabilities(logged_rows()), home / "logger.csv")
    rc, text, _ = rlops([*KEYED, "--target", str(path), "--json"], capsys)
    doc = json.loads(text)
    assert rc == 0 and doc["kind"] == "file"
    assert doc["estimates"]["dr"]["value"] == pytest.approx(doc["logged_return"], rel=1e-5)


def test_rules_work_with_no_champion(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = rlops([*KEYED, "--target", "rules"], capsys)
    assert rc == 0, err
    assert "the rule engine: its choice + 5% uniform exploration" in out.splitlines()[0]
    assert any(ln.split()[:1] == ["DR"] for ln in out.splitlines())


def _spoiled(home: Path, name: str, spoil: Any) -> str:
    return str(write_table(spoil(logging_probabilities(logged_rows())), home / name))


def _masked(table: Any) -> Any:
    """Half the mass of the first row with a masked action on that action."""
    masks = logged_rows()["action_mask"].astype(str)
    i = next(k for k, m in enumerate(masks) if "0" in m)
    mask = masks.iloc[i]
    halves = (mask.index("0"), mask.index("1"))
    table.loc[table.index[i], table.columns[1:]] = [0.5 if k in halves else 0.0 for k in range(len(mask))]
    return table


BAD = [
    ("unknown-version", lambda home: "42", "credit_approval-policy has no version 42"),
    ("alias-not-set", lambda home: "champion", "the alias champion is not set"),
    ("missing-rows", lambda home: _spoiled(home, "few.csv", lambda t: t.iloc[7:]), "no probabilities for 7 of the"),
    (
        "not-summing-to-1",
        lambda home: _spoiled(home, "sum.parquet", lambda t: t.assign(reject=t["reject"] + 0.5)),
        "the probabilities sum to",
    ),
    ("mass-on-a-masked-action", lambda home: _spoiled(home, "masked.parquet", _masked), "which is masked"),
    (
        "unknown-action-column",
        lambda home: _spoiled(home, "col.jsonl", lambda t: t.rename(columns={"approve": "aprove"})),
        "column 'aprove' is neither trace_id",
    ),
]


@pytest.mark.parametrize(("what", "target", "says"), BAD, ids=[b[0] for b in BAD])
def test_a_bad_target_exits_2_with_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], what: str, target: Any, says: str
) -> None:
    rc, out, err = rlops([*KEYED, "--target", target(home)], capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith("error: ")]
    assert rc == 2 and out == "" and len(lines) == 1 and says in lines[0], err
    assert "Traceback" not in err


def test_target_and_candidate_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = rlops([*KEYED, "--target", "uniform", "--candidate", "3"], capsys)
    assert rc == 2 and "not allowed with argument" in err
    rc, _, err = rlops(KEYED, capsys)
    assert rc == 2 and "one of the arguments --candidate --target is required" in err
    rc, _, err = rlops([*KEYED, "--target", "uniform", "--episodes", "50"], capsys)
    assert rc == 2 and "error: --episodes goes with --candidate, not with --target" in err
