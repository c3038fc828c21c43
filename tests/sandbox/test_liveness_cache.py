"""The liveness verdict of a pack is rolled once per inputs, and remembered across processes (each
Airflow task is a process of its own): a pack that passed is not rolled again; one that failed is."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rlops.sandbox import pack as pack_module
from rlops.sandbox.errors import PackError
from rlops.sandbox.pack import load_pack

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLOPS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pack_module, "_LIVE_PACKS", {})
    return tmp_path / "cache" / "liveness"


def _count_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = pack_module.check_no_dead_ends

    def counted(pack: pack_module.Pack, *args: object, **kwargs: object) -> None:
        calls.append(pack.name)
        real(pack)

    monkeypatch.setattr(pack_module, "check_no_dead_ends", counted)
    return calls


def test_a_passed_verdict_is_kept_on_disk_for_the_next_process(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_checks(monkeypatch)
    load_pack(REPO / "scenarios" / "credit_approval")
    assert calls == ["credit_approval"] and len(list(cache.iterdir())) == 1
    monkeypatch.setattr(pack_module, "_LIVE_PACKS", {})  # a new process: only the disk remembers
    load_pack(REPO / "scenarios" / "credit_approval")
    assert calls == ["credit_approval"]
    # another calibration (another effective document) is rolled again
    load_pack(REPO / "scenarios" / "credit_approval", calibration={"fields": {"user_profile.age": {"dist": "normal",
                                                                   "mean": 60, "std": 5}}})  # fmt: skip
    assert calls == ["credit_approval", "credit_approval"] and len(list(cache.iterdir())) == 2


def test_the_verdict_follows_the_reward_source_and_the_sandbox_code(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_checks(monkeypatch)
    dst = tmp_path / "credit_approval"
    shutil.copytree(REPO / "scenarios" / "credit_approval", dst)
    load_pack(dst)
    reward = dst / "reward_v1.py"
    reward.write_text(reward.read_text() + "\n# edited\n")
    load_pack(dst)
    assert len(calls) == 2
    pack_module._sandbox_code_digest.cache_clear()
    monkeypatch.setattr(pack_module, "_sandbox_code_digest", lambda: "other sandbox code")
    monkeypatch.setattr(pack_module, "_LIVE_PACKS", {})
    load_pack(dst)
    assert len(calls) == 3


def test_a_pack_that_fails_the_check_leaves_no_verdict(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def dead_end(pack: pack_module.Pack, *args: object, **kwargs: object) -> None:
        raise PackError("scenario.yaml", None, "actions", "a dead end")

    monkeypatch.setattr(pack_module, "check_no_dead_ends", dead_end)
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(PackError, match="a dead end"):
            load_pack(REPO / "scenarios" / "credit_approval")
    assert not cache.exists() or not list(cache.iterdir())


def test_an_unwritable_cache_costs_only_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("RLOPS_CACHE_DIR", str(blocker))  # the folder cannot be made
    monkeypatch.setattr(pack_module, "_LIVE_PACKS", {})
    calls = _count_checks(monkeypatch)
    load_pack(REPO / "scenarios" / "credit_approval")
    assert calls == ["credit_approval"]


def test_a_second_process_finds_the_first_ones_verdict(tmp_path: Path) -> None:
    """Two interpreters, as two Airflow tasks: the second would fail if it rolled the episodes."""
    import os
    import subprocess
    import sys

    load = f"from rlops.sandbox.pack import load_pack; load_pack({str(REPO / 'scenarios' / 'credit_approval')!r})"
    refuse = (
        "import rlops.sandbox.pack as m\n"
        "def rolled(*a, **k):\n    raise SystemExit('rolled the episodes again')\n"
        f"m.check_no_dead_ends = rolled\n{load}\n"
    )
    env = {**os.environ, "RLOPS_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    for code in (load, refuse):
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr[-800:]
    # and without the first process's verdict the second one does roll them
    env["RLOPS_CACHE_DIR"] = str(tmp_path / "empty")
    out = subprocess.run([sys.executable, "-c", refuse], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "rolled the episodes again" in out.stderr
