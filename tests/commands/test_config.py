"""``rlops config show | validate | schema`` and the committed JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlops.cli import main
from rlops.commands.config import SCHEMA_FILE, schema_text
from rlops.common.config import REPO_ROOT

PROJECT = (REPO_ROOT / "params.yaml").read_text()


def test_validate_passes_on_the_project_and_every_pack(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--params", str(REPO_ROOT / "params.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("params valid: project params") and "pack credit_approval" in out


def test_validate_names_file_line_and_suggestion_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "params.yaml"
    f.write_text(PROJECT.replace("evaluate:\n  episodes:", "evalute:\n  episodes:", 1))
    line = next(i for i, s in enumerate(f.read_text().splitlines(), 1) if s.startswith("evalute:"))
    assert main(["config", "validate", "--params", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:{line}: evalute: unknown key; did you mean 'evaluate'?" in err
    assert err.startswith("error: invalid params (1 problem)")


def test_validate_names_a_pack_folder_that_can_get_no_dags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    root = tmp_path / "scenarios"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / "credit approval")
    monkeypatch.setenv("RLOPS_SCENARIOS_DIR", str(root))
    assert main(["config", "validate", "--params", str(REPO_ROOT / "params.yaml")]) == 2
    err = capsys.readouterr().err
    assert "pack folder name 'credit approval' cannot name a pack" in err and len(err.splitlines()) == 1


def test_validate_a_pack_typo_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pack = tmp_path / "mine"
    pack.mkdir()
    (pack / "scenario.yaml").write_text("name: mine\n")
    (pack / "params.yaml").write_text("capture:\n  sample_rate: 0.5\n  episods: 10\n")
    code = main(["config", "validate", "--scenario", str(pack), "--params", str(REPO_ROOT / "params.yaml"), "--json"])
    assert code == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is False and doc["checked"] == ["project params", "pack mine"]
    assert doc["problems"] == [
        {
            "key": "capture.episods",
            "message": "unknown key",
            "file": str(pack / "params.yaml"),
            "line": 3,
            "suggestion": "episodes",
        }
    ]


def test_show_prints_each_value_with_its_origin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert (
        main(
            ["config", "show", "--scenario", "complaint_handling", "--params", str(REPO_ROOT / "params.yaml"), "--json"]
        )
        == 0
    )
    rows = {r["key"]: r for r in json.loads(capsys.readouterr().out)["values"]}
    assert rows["tracking.uri"] == {
        "key": "tracking.uri",
        "value": "http://127.0.0.1:5999",
        "origin": "env MLFLOW_TRACKING_URI",
    }
    assert rows["evaluate.completion_min"]["value"] == 0.7
    assert rows["evaluate.completion_min"]["origin"].endswith("scenarios/complaint_handling/params.yaml:8")
    assert rows["evaluate.confidence"]["origin"].split(":")[0].endswith("params.yaml")
    assert rows["ppo.obs_clip"] == {"key": "ppo.obs_clip", "value": 5.0, "origin": "default"}
    assert main(["config", "show", "--params", str(REPO_ROOT / "params.yaml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("ppo.obs_clip") and line.endswith("default") for line in lines)


def test_the_committed_schema_is_the_generated_one() -> None:
    assert (REPO_ROOT / SCHEMA_FILE).read_text() == schema_text(), (
        "params.schema.json is stale: regenerate it with `rlops config schema` (or `make params-schema`)"
    )
    assert PROJECT.splitlines()[0] == f"# yaml-language-server: $schema={SCHEMA_FILE}"


def test_the_schema_rejects_unknown_keys_and_documents_every_field() -> None:
    schema = json.loads(schema_text())
    assert schema["additionalProperties"] is False
    capture = schema["$defs"]["CaptureParams"]
    assert capture["additionalProperties"] is False
    assert all(field.get("description") for field in capture["properties"].values())


def test_schema_check_says_when_the_file_is_stale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "schema.json"
    assert main(["config", "schema", "--out", str(out)]) == 0
    assert main(["config", "schema", "--out", str(out), "--check"]) == 0
    out.write_text("{}\n")
    assert main(["config", "schema", "--out", str(out), "--check"]) == 1
    assert "stale" in capsys.readouterr().out


def test_an_unknown_pack_is_a_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "--scenario", "no_such_pack", "--params", str(REPO_ROOT / "params.yaml")]) == 2
    err = capsys.readouterr().err
    assert "--scenario no_such_pack: no pack folder" in err and "credit_approval" in err
