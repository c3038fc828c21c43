"""Shared by the framework examples' tests: a registry whose champion was trained by the product's
training step on a tiny budget (once per session and pack), a storage root whose landing zone the
example agents trace into, capture of what they wrote, and the count of an example's adapter lines."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from rlops.common.config import REPO_ROOT

TINY = 16 * 8 * 2  # 16 envs x 8 steps x 2 iterations: a real training, in seconds
ADAPTER = re.compile(r"# --- rlops adapter begin\n(.*?)# --- rlops adapter end", re.S)


def adapter_lines(example: Path) -> int:
    """The lines the user writes to plug rlops in: non-blank, non-comment lines between the markers."""
    blocks = ADAPTER.findall(example.read_text())
    assert blocks, f"{example} has no '# --- rlops adapter begin/end' markers"
    return sum(1 for b in blocks for line in b.splitlines() if line.strip() and not line.strip().startswith("#"))


@dataclass(frozen=True)
class Registry:
    tracking_uri: str
    artifact_root: str
    champions: dict[str, str]


def _env(mp: pytest.MonkeyPatch, tracking: str, artifacts: str, storage: str) -> None:
    mp.setenv("MLFLOW_TRACKING_URI", tracking)
    mp.setenv("RLOPS_ARTIFACT_ROOT", artifacts)
    mp.setenv("RLOPS_STORAGE_ROOT", storage)
    mp.delenv("MLFLOW_REGISTRY_URI", raising=False)


@pytest.fixture(scope="session")
def registry(_mlflow_template_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """An MLflow registry where ``credit_approval`` and ``loan_desk`` each have a champion trained by
    ``train_policy`` (PPO, a tiny budget)."""
    import torch

    from rlops.common.policy_ref import policy_model_name
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.training.policy import train_policy
    from rlops.pipeline_steps.training.request import TrainRequest

    folder = tmp_path_factory.mktemp("integrations-mlflow")
    shutil.copyfile(_mlflow_template_db, folder / "mlflow.db")
    tracking, artifacts = f"sqlite:///{folder / 'mlflow.db'}", str(folder / "artifacts")
    champions = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        _env(mp, tracking, artifacts, f"file://{folder / 'storage'}")
        for scenario in ("credit_approval", "loan_desk"):
            overrides = {
                "local_dir": str(folder / "local"),
                "train": {"num_envs": 16, "eval_episodes": 32, "checkpoint_every": 1},
                "ppo": {"num_steps": 8, "device": "cpu", "learning_rate": 1e-3},
            }
            ctx = StepContext.create(scenario, "20260105T1000", overrides=overrides)
            version = str(train_policy(ctx, TrainRequest(timesteps=TINY)).model_version)
            ctx.tracker.set_alias(policy_model_name(scenario), "champion", version)
            champions[scenario] = version
    torch.set_num_threads(threads)
    return Registry(tracking, artifacts, champions)


def _landing(monkeypatch: pytest.MonkeyPatch, tracking: str, artifacts: str, tmp_path: Path) -> str:
    from rlops.pipeline_steps.infra.context import StepContext

    _env(monkeypatch, tracking, artifacts, f"file://{tmp_path / 'storage'}")
    landing = StepContext.create("credit_approval", "20260105T1000").traces.landing_uri
    assert landing.startswith("file://"), landing
    return landing[len("file://") :]


@pytest.fixture
def world(registry: Registry, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The trained registry and a fresh storage root for one test (``landing``: its landing zone)."""
    landing = _landing(monkeypatch, registry.tracking_uri, registry.artifact_root, tmp_path)
    return {"tracking_uri": registry.tracking_uri, "landing": landing}


@pytest.fixture
def bare_world(_mlflow_template_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """A registry where nothing was trained or promoted yet, and a fresh storage root."""
    shutil.copyfile(_mlflow_template_db, tmp_path / "mlflow.db")
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return {"tracking_uri": tracking, "landing": _landing(monkeypatch, tracking, str(tmp_path / "artifacts"), tmp_path)}


def landing_rows(landing: str) -> list[dict[str, Any]]:
    import json

    return [json.loads(line) for f in sorted(Path(landing).rglob("*.jsonl")) for line in f.read_text().splitlines()]


def assert_rule_engine_propensities(rows: list[dict[str, Any]], share: float = 0.05) -> None:
    """Rows the rule engine served carry its true propensity: it explores too, ``share`` of its
    decisions drawn uniformly over the legal actions, so ``(1 − share)·[its choice] + share / |legal|``."""
    import math

    for r in rows:
        legal = str(r["action_mask"]).count("1")
        expected = (0.0 if r["explored"] else 1.0 - share) + share / legal
        assert r["policy_version"] == "rules" and math.isclose(math.exp(r["logp"]), expected, rel_tol=1e-6), r


def capture(scenario: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``rlops capture``'s step over the interval the rows were written in; its counts."""
    from rlops.common.run_key import RunKey
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext

    stamps = [datetime.fromisoformat(r["ts"]) for r in rows]
    key = RunKey.covering(min(stamps), max(stamps))
    ctx = StepContext.create(scenario, str(key), overrides={"capture": {"track": False}})
    return capture_step(ctx, CaptureRequest(simulate=False)).as_dict()


def example(name: str) -> Path:
    return REPO_ROOT / "examples" / name


def load_example(path: Path) -> ModuleType:
    """An example file imported as a module (examples are scripts, not a package)."""
    name = f"example_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
