"""``rlops init``: a pack inferred from the credit pack's live traces, the pack from nothing, and
bad input (one line, exit 2, nothing written).

Field match (against the credit pack's own declaration, for each field its traces carry): the same
type, and for numbers a range that lies at least 90% inside the declared one and spans at least a
tenth of it; for enums, values the declared field has.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from rlops.cli import main
from rlops.common.config import REPO_ROOT
from rlops.pack_init.generate import InitRequest, init_pack
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import evaluate_policy, rule_policy

CREDIT = REPO_ROOT / "scenarios" / "credit_approval"


def field_matches(inferred: dict[str, object], declared: object) -> bool:
    if inferred["type"] != declared.type:  # type: ignore[attr-defined]
        return False
    if declared.type == "enum":  # type: ignore[attr-defined]
        return set(inferred["values"] or ()) <= set(declared.values)  # type: ignore[attr-defined,arg-type]
    if declared.type == "bool":  # type: ignore[attr-defined]
        return True
    lo, hi = float(inferred["min"]), float(inferred["max"])  # type: ignore[arg-type]
    d_lo, d_hi = float(declared.min), float(declared.max)  # type: ignore[attr-defined]
    inside = max(0.0, min(hi, d_hi) - max(lo, d_lo))
    return inside >= 0.9 * (hi - lo) and (hi - lo) >= 0.1 * (d_hi - d_lo)


@pytest.fixture(scope="module")
def inferred(credit_live_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    scenarios = tmp_path_factory.mktemp("scenarios")
    result = init_pack(InitRequest("demo_pack", scenarios, str(credit_live_traces)))
    return scenarios / "demo_pack", result


def test_inferred_fields_match_the_credit_pack_on_at_least_90_percent(inferred: tuple[Path, object]) -> None:
    _, result = inferred
    credit = load_pack(CREDIT, check_liveness=False).scenario.spec
    ours = {f["path"]: f for f in result.fields}  # type: ignore[attr-defined]
    observed = [f for f in credit.fields if f.observed]
    matched = [f.path for f in observed if f.path in ours and field_matches(ours[f.path], f)]
    assert len(matched) >= 0.9 * len(observed), sorted({f.path for f in observed} - set(matched))
    # what a reader checks first: the score is revealed by the credit report, the term is uniform
    assert ours["user_profile.credit_score"]["visible_when"] == "system_status.credit_report_fetched"
    assert ours["application.term_months"]["init"] == {"dist": "uniform", "low": 6, "high": 36}
    assert ours["user_profile.age"]["min"] == 18 and ours["user_profile.age"]["unit"] == "years"


def test_the_inferred_pack_loads_and_its_rule_engine_reproduces_the_logged_one(inferred: tuple[Path, object]) -> None:
    folder, result = inferred
    assert result.rule_policy_accuracy >= 0.99  # type: ignore[attr-defined]
    actions = {a["name"]: a for a in result.actions}  # type: ignore[attr-defined]
    assert {"set": {"decision.approved_amount": "application.loan_amount"}} in actions["approve"]["effects"]
    assert actions["send_notification"]["terminal"] and actions["initiate_fraud_check"]["error_rate"] > 0
    assert "not system_status.fraud_check_done" in actions["initiate_fraud_check"]["precondition"]
    pack = load_pack(folder)
    ours = evaluate_policy(pack, rule_policy, episodes=300, seed=11, profile="sandbox").summary()
    assert ours["illegal_action_rate"] == 0.0 and ours["completion_rate"] == 1.0
    for name in ("scenario.yaml", "rules.yaml", "reward_v1.py", "params.yaml", "README.md"):
        assert (folder / name).is_file()
    assert "TODO(expert)" in (folder / "reward_v1.py").read_text()
    assert "## What must be checked" in (folder / "README.md").read_text()


def test_from_nothing_writes_the_smallest_pack_that_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(
        [
            "init",
            "tiny",
            "--dir",
            str(tmp_path),
            "--actions",
            "triage,answer,close",
            "--fields",
            "ticket.priority:int:1:3,ticket.channel:enum:web|phone,ticket.vip:bool",
        ]
    )
    assert rc == 0
    assert main(["env", "validate", "--scenario", str(tmp_path / "tiny")]) == 0
    assert "ok: tiny — 4 fields, 3 actions" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--from-traces", "{tmp}/missing.parquet"], "no such file or folder"),
        (["--from-traces", "{tmp}/no_actions.parquet"], "no action column"),
        (["--actions", "a,a"], "each action once"),
        (["--actions", "a", "--fields", "x.y:text"], "unknown type"),
        ([], "no actions"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    pd.DataFrame({"episode_id": ["e"] * 3, "step": [0, 1, 2], "state.a.b": [1, 2, 3]}).to_parquet(
        tmp_path / "no_actions.parquet"
    )
    scenarios = tmp_path / "scenarios"
    rc = main(["init", "p", "--dir", str(scenarios), *[a.format(tmp=tmp_path) for a in args]])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and says in err and len(err.splitlines()) == 1, err
    assert not scenarios.exists() or not any(scenarios.iterdir())


def test_an_existing_pack_is_kept_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "mine.txt").write_text("keep me")
    assert main(["init", "p", "--dir", str(tmp_path), "--actions", "a,b"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "p" / "mine.txt").read_text() == "keep me"
    assert main(["init", "p", "--dir", str(tmp_path), "--actions", "a,b", "--force"]) == 0
    assert not (tmp_path / "p" / "mine.txt").exists() and (tmp_path / "p" / "scenario.yaml").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["p"]  # no temporary folder left behind


def test_a_json_lines_file_by_uri_gives_the_same_fields(credit_live_traces: Path, tmp_path: Path) -> None:
    df = pd.read_parquet(credit_live_traces)
    df = df[df["episode_id"].isin(df["episode_id"].unique()[:300])]
    jsonl = tmp_path / "landing.jsonl"
    df.to_json(jsonl, orient="records", lines=True, double_precision=15)
    parquet = tmp_path / "same.parquet"
    df.to_parquet(parquet)
    from_jsonl = init_pack(InitRequest("a", tmp_path / "s", f"file://{jsonl}"))
    from_parquet = init_pack(InitRequest("b", tmp_path / "s", str(parquet)))
    assert [(f["path"], f["type"], f["min"], f["max"]) for f in from_jsonl.fields] == [
        (f["path"], f["type"], f["min"], f["max"]) for f in from_parquet.fields
    ]


def test_traces_without_a_reward_get_a_placeholder_reward_that_loads(credit_live_traces: Path, tmp_path: Path) -> None:
    df = pd.read_parquet(credit_live_traces).drop(columns=["reward_total", "reward_breakdown"])
    df = df[df["episode_id"].isin(df["episode_id"].unique()[:300])]
    df.to_parquet(tmp_path / "no_reward.parquet")
    result = init_pack(InitRequest("p", tmp_path / "s", str(tmp_path / "no_reward.parquet")))
    assert [c["name"] for c in result.reward_components] == ["step_cost", "case_closed"]
    assert all(c["r2"] is None for c in result.reward_components)
    assert "No reward was logged" in (tmp_path / "s" / "p" / "reward_v1.py").read_text()
    load_pack(tmp_path / "s" / "p")


def test_on_a_terminal_it_asks_for_the_actions_and_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = iter(["open, resolve", "ticket.priority:int:1:5"])
    monkeypatch.setattr("sys.stdin.isatty", lambda: True)
    monkeypatch.setattr("builtins.input", lambda prompt: next(answers))
    assert main(["init", "asked", "--dir", str(tmp_path)]) == 0
    pack = load_pack(tmp_path / "asked")
    assert list(pack.scenario.action_names) == ["open", "resolve"]
    assert pack.scenario.spec.fields[0].path == "ticket.priority"


def test_the_file_init_learned_from_imports_whole_into_its_pack(
    credit_live_traces: Path, tmp_path: Path, tmp_storage_root: str, tmp_tracking: str
) -> None:
    """Every row of the source passes the inferred contract (ranges are its extremes), and a
    column whose name is not a field path is renamed, with a mapping that imports it back."""
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.capture.history import import_log
    from rlops.pipeline_steps.capture.request import ImportRequest
    from rlops.pipeline_steps.infra.context import StepContext

    df = pd.read_parquet(credit_live_traces).rename(columns={"state.user_profile.age": "state.user_profile.age-years"})
    source = tmp_path / "desk.parquet"
    df.to_parquet(source)
    scenarios = tmp_path / "scenarios"
    result = init_pack(InitRequest("desk_pack", scenarios, str(source)))
    assert result.renamed_columns == {"state.user_profile.age-years": "user_profile.age_years"}
    mapping = scenarios / "desk_pack" / "import_mapping.yaml"
    ctx = StepContext.create("desk_pack", "20261130T0500", overrides={"scenarios_dir": str(scenarios)})
    # the credit pack has an action its rule engine never took: the log's masks have one position more
    assert "mask_actions" in mapping.read_text()
    with pytest.raises(UserError, match="action_mask has 7 positions, the pack desk_pack has 6 actions"):
        import_log(ctx, ImportRequest(str(source), mapping=str(mapping)))
    credit_order = list(load_pack(CREDIT, check_liveness=False).scenario.action_names)
    mapping.write_text(mapping.read_text() + f"mask_actions: {credit_order}\n")
    out = import_log(ctx, ImportRequest(str(source), mapping=str(mapping)))
    assert (out.rows_in, out.rows_accepted, out.rows_quarantined) == (len(df), len(df), 0)
