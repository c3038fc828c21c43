"""Params values that would mean something else than they seem are refused where params are read:
a DuckDB memory limit that is no size (or too small to read a partition), a storage, tracking or
queue URI no command can use, a training budget no machine runs, a key given twice in one file.
Each refusal names the key (and the variable, for an environment override)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlops.common.config import load_params, resolve_params
from rlops.common.params_model import Params
from rlops.common.params_sources import ConfigError, ParamsError, validate_document
from rlops.common.params_training import MAX_TIMESTEPS


def _refused(doc: dict[str, Any], key: str) -> str:
    with pytest.raises(ParamsError) as exc:
        validate_document(doc, [])
    problems = [p for p in exc.value.problems if p.key == key]
    assert problems, [str(p) for p in exc.value.problems]
    return problems[0].message


# --------------------------------------------------------------------------- trace_store.memory_limit
@pytest.mark.parametrize("value", ["512MB", "2GB", "1GB", "50%", "100%", "1.5GB", "2GiB", "1 GB", "64mb", "1TB"])
def test_a_memory_limit_that_is_a_size_is_accepted(value: str) -> None:
    assert Params.model_validate({"trace_store": {"memory_limit": value}}).trace_store.memory_limit == value


@pytest.mark.parametrize("value", ["0GB", "0%", "lots", "", "1000", "-1GB", "200%", "10KB", "1MB", "0.5%", "nan GB"])
def test_a_memory_limit_that_is_no_usable_size_is_refused(value: str) -> None:
    message = _refused({"trace_store": {"memory_limit": value}}, "trace_store.memory_limit")
    assert "2GB" in message or "at least" in message or "100%" in message


def test_the_trace_store_refuses_the_same_sizes_when_built_directly() -> None:
    from rlops.trace_store.engine import QueryEngineConfig

    for bad in ("0GB", "lots"):
        with pytest.raises(ValueError, match="memory_limit"):
            QueryEngineConfig(memory_limit=bad)
    assert QueryEngineConfig(memory_limit="50%").memory_limit == "50%"


# --------------------------------------------------------------------------- URIs
@pytest.mark.parametrize("value", ["file://rlops-data", "rlops-data", "/var/rlops", "s3://bucket", "s3://bucket/p/q"])
def test_a_storage_root_rlops_can_use_is_accepted(value: str) -> None:
    assert Params.model_validate({"storage": {"root": value}}).storage.root == value


@pytest.mark.parametrize(
    ("value", "why"),
    [("ftp://host/x", "unsupported storage URI"), ("s3://", "no bucket"), ("s3:///key", "no bucket")],
)
def test_a_storage_root_rlops_cannot_use_is_refused(value: str, why: str) -> None:
    assert why in _refused({"storage": {"root": value}}, "storage.root")


@pytest.mark.parametrize(
    "value",
    [
        "sqlite:///rlops-data/mlflow.db",
        "http://mlflow:5000",
        "https://user:token@mlflow.example.com",
        "file:///srv/mlruns",
        "mlruns",
        "postgresql://rlops@db/mlflow",
        "postgresql+psycopg2://rlops@db/mlflow",
        "mysql+pymysql://u@h/db",
        "databricks",
    ],
)
def test_a_tracking_uri_mlflow_can_use_is_accepted(value: str) -> None:
    assert Params.model_validate({"tracking": {"uri": value}}).tracking.uri == value


@pytest.mark.parametrize("value", ["nonsense://x", "garbage://nowhere", "ftp://h/x", "http//missing-colon:5000"])
def test_a_tracking_uri_mlflow_cannot_use_is_refused(value: str) -> None:
    message = _refused({"tracking": {"uri": value}}, "tracking.uri")
    assert value.split("/")[0] in message and "http" in message


@pytest.mark.parametrize(
    "value", ["sqlite:///rlops-data/q.db", "sqlite://", "postgresql+psycopg2://user@host/db", "mysql://u:p@h/db"]
)
def test_a_queue_url_sqlalchemy_can_use_is_accepted(value: str) -> None:
    assert Params.model_validate({"label_queue": {"db_url": value}}).label_queue.db_url == value


@pytest.mark.parametrize("value", ["not a url", "nonsense", "nosuchdb://h/x", "://h/x", "sqlite:/q.db"])
def test_a_queue_url_sqlalchemy_cannot_use_is_refused(value: str) -> None:
    message = _refused({"label_queue": {"db_url": value}}, "label_queue.db_url")
    assert "label queue database URL" in message and repr(value) in message


def test_an_environment_override_is_named_by_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = tmp_path / "params.yaml"
    project.write_text("seed: 7\n")
    monkeypatch.setenv("RLOPS_STORAGE_ROOT", "ftp://host/x")
    monkeypatch.setenv("RLOPS_QUEUE_DB", "not a url")
    for read in (lambda: load_params(project), lambda: resolve_params("credit_approval", path=project)):
        with pytest.raises(ParamsError) as exc:
            read()
        where = {p.key: p.file for p in exc.value.problems}
        assert where == {
            "storage.root": "environment variable RLOPS_STORAGE_ROOT",
            "label_queue.db_url": "environment variable RLOPS_QUEUE_DB",
        }
    params = {"seed": 7, "storage": {"root": "ftp://host/x"}}  # a document given whole: its own values
    monkeypatch.delenv("RLOPS_STORAGE_ROOT")
    monkeypatch.delenv("RLOPS_QUEUE_DB")
    with pytest.raises(ParamsError) as exc:
        resolve_params("credit_approval", params=params, path=project)
    assert "environment variable" not in str(exc.value)


# --------------------------------------------------------------------------- budgets
@pytest.mark.parametrize("block", ["train", "ppo"])
def test_a_training_budget_past_ten_billion_steps_is_refused(block: str) -> None:
    assert Params.model_validate({block: {"total_timesteps": MAX_TIMESTEPS}})
    message = _refused({block: {"total_timesteps": 10**30}}, f"{block}.total_timesteps")
    assert "10000000000" in message


# --------------------------------------------------------------------------- duplicate keys
def test_a_key_given_twice_in_a_params_file_names_the_file_and_both_lines(tmp_path: Path) -> None:
    project = tmp_path / "params.yaml"
    project.write_text("seed: 1\ntrain:\n  total_timesteps: 10\nseed: 2\n")
    with pytest.raises(ConfigError, match=rf"{project}:4: key 'seed' is given twice \(first at line 1\)"):
        load_params(project)
    project.write_text("evaluate:\n  rollout_stages:\n    - {share: 0.1, share: 0.5}\n")
    with pytest.raises(ConfigError, match=rf"{project}:3: key 'share' is given twice"):
        load_params(project)


def test_a_key_that_overrides_a_yaml_merge_is_no_duplicate(tmp_path: Path) -> None:
    project = tmp_path / "params.yaml"
    project.write_text("train: &t\n  total_timesteps: 10\nppo:\n  <<: *t\n  total_timesteps: 20\n")
    assert load_params(project)["ppo"]["total_timesteps"] == 20
