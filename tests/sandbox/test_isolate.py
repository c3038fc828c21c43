"""Validation in a child process (:mod:`rlops.sandbox.isolate`): the verdict of a valid pack, a pack
whose code loops stopped at the limit and named, broken packs answered without a child, and the
collector as the pack's code finds it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from rlops.common.config import REPO_ROOT
from rlops.sandbox.errors import PackError
from rlops.sandbox.isolate import validate_isolated

REPO = REPO_ROOT
CREDIT = REPO / "scenarios" / "credit_approval"


def copy_credit(tmp_path: Path) -> Path:
    dst = tmp_path / "credit"
    shutil.copytree(CREDIT, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


def test_valid_pack_summary() -> None:
    s = validate_isolated(CREDIT)
    assert s["pack"] == "credit_approval" and s["fields"] == 19 and s["actions"] == 7
    assert sorted(s["reward_functions"]) == ["v0", "v1"] and s["rules"] == 10


def test_a_loop_at_import_is_stopped_and_named(tmp_path: Path) -> None:
    pack = copy_credit(tmp_path)
    (pack / "reward_v1.py").write_text((pack / "reward_v1.py").read_text() + "\nwhile True:\n    pass\n")
    t0 = time.monotonic()
    with pytest.raises(PackError) as info:
        validate_isolated(pack, timeout_s=1.0)
    assert time.monotonic() - t0 < 30
    assert info.value.file == str(pack / "reward_v1.py")
    assert "importing the reward module" in info.value.message and "did not finish within 1 s" in info.value.message


def test_nan_reward_fails_validation_with_component_and_edge(tmp_path: Path) -> None:
    pack = copy_credit(tmp_path)
    src = (
        (pack / "reward_v1.py")
        .read_text()
        .replace(
            "share = t.ns.decision.approved_amount / t.s.application.loan_amount",
            "share = t.ns.decision.approved_amount / (t.s.application.loan_amount - 1000)",
        )
    )
    (pack / "reward_v1.py").write_text(src)
    with pytest.raises(PackError) as info:
        validate_isolated(pack)
    assert info.value.path == "loan_outcome" and "application.loan_amount = 1000" in info.value.message


def test_broken_yaml_needs_no_child(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pack = copy_credit(tmp_path)
    (pack / "scenario.yaml").write_text("horizon: [1\n")

    def no_child(*_a: object, **_k: object) -> None:
        raise AssertionError("a child process was started for a pack that fails before any code runs")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    with pytest.raises(PackError, match="invalid YAML"):
        validate_isolated(pack)


def test_pack_code_runs_with_the_collector_on_and_the_imports_frozen(tmp_path: Path) -> None:
    """The child skips collection while it imports torch (its start-up), not while the pack runs:
    cyclic garbage of a reward module is still collected under the memory limit."""
    pack = copy_credit(tmp_path)
    seen = tmp_path / "gc.json"
    (pack / "reward_v1.py").write_text(
        (pack / "reward_v1.py").read_text()
        + "\nimport gc as _gc\nimport json as _json\n\n"
        + f"with open({str(seen)!r}, 'w') as _fh:\n"
        + "    _json.dump({'enabled': _gc.isenabled(), 'frozen': _gc.get_freeze_count()}, _fh)\n"
    )
    assert validate_isolated(pack)["pack"] == "credit_approval"
    state = json.loads(seen.read_text())
    assert state["enabled"] is True
    assert state["frozen"] > 100_000  # torch's own objects, imported before the pack's code
