"""The pyfunc a training registers: pinned to this environment, saved without MLflow's scan of every
installed distribution (the pins are this environment's by construction)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlops.model.policy import PolicyConfig, PolicyNetwork
from rlops.model.policy_io import save_policy
from rlops.registry import pyfunc_policy


def test_saving_pins_this_environment_without_scanning_the_installed_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow.utils import environment, requirements_utils

    scans: list[str] = []  # (MLflow swallows what the check raises: count, do not raise)

    monkeypatch.setattr(requirements_utils, "_MODULES_TO_PACKAGES", None)
    monkeypatch.setattr(requirements_utils, "_init_modules_to_packages_map", lambda: scans.append("scan"))
    check = environment.warn_dependency_requirement_mismatches
    torch.manual_seed(0)
    policy = PolicyNetwork(PolicyConfig(n_features=3, n_actions=2, history_len=1))
    saved = save_policy(policy, tmp_path / "policy", metadata={"action_names": ["a", "b"],
                                                              "obs_columns": ["x", "y", "z"]})  # fmt: skip
    out = pyfunc_policy.save_pyfunc_policy(saved.directory, tmp_path / "model")
    pins = (out / "requirements.txt").read_text().split()
    assert {p.split("==")[0] for p in pins} >= {"mlflow", "torch", "numpy", "pandas"}
    assert scans == []
    assert environment.warn_dependency_requirement_mismatches is check  # put back after the save
