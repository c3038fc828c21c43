"""An events file is data, not trusted code: a ``reward_fn`` event's ``module`` must be a relative
path to a ``.py`` file inside the pack folder. Anything else is refused with one line (exit 2)
before the pack is copied or anything imported — a probe module's marker file is never written."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from rlops.common.config import REPO_ROOT


@pytest.fixture
def packs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A scenarios folder holding a copy of credit_approval, a probe module outside it that writes
    a marker when imported, and a symlink inside the pack pointing at the probe."""
    root = tmp_path / "scenarios"
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", root / "credit_approval")
    probe = tmp_path / "outside" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(f"from pathlib import Path\nPath({str(tmp_path / 'marker')!r}).write_text('ran')\n")
    (root / "credit_approval" / "changes" / "leak.py").symlink_to(probe)
    (root / "credit_approval" / "changes" / "notes.txt").write_text("not a module\n")
    monkeypatch.setenv("RLOPS_SCENARIOS_DIR", str(root))
    monkeypatch.setenv("RLOPS_HOME", str(tmp_path))
    return root


CASES = [
    pytest.param("../outside/probe.py", "leaves the pack folder (..)", id="dotdot"),
    pytest.param("{tmp}/outside/probe.py", "an absolute path", id="absolute"),
    pytest.param("changes/leak.py", "a symlink leading out of the pack folder", id="symlink-out"),
    pytest.param("changes/missing_v2.py", "no such file in the pack folder", id="missing"),
    pytest.param("changes/notes.txt", "not a .py file", id="not-py"),
]


@pytest.mark.parametrize("dry_run", [True, False], ids=["dry-run", "real"])
@pytest.mark.parametrize(("module", "reason"), CASES)
def test_a_module_outside_the_pack_is_refused_before_anything_runs(
    packs: Path, tmp_path: Path, module: str, reason: str, dry_run: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.cli import main

    events = tmp_path / "events.yaml"
    doc = {"events": [{"at_hour": 1, "kind": "reward_fn", "version": "v2", "module": module.format(tmp=tmp_path)}]}
    events.write_text(yaml.safe_dump(doc))
    argv = ["simulate", "--scenario", "credit_approval", "--hours", "2", "--events", str(events)]
    argv += ["--workdir", str(tmp_path / "timeline")] + (["--dry-run"] if dry_run else [])
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and reason in err[0] and "module" in err[0], err
    assert not (tmp_path / "marker").exists(), "the probe module was imported"
    assert not (tmp_path / "timeline").exists(), "the timeline started before the refusal"


def test_a_module_inside_the_pack_is_accepted(packs: Path) -> None:
    from rlops.timeline.events import check_reward_modules, parse_events

    pack = packs / "credit_approval"
    events = parse_events([{"at_hour": 1, "kind": "reward_fn", "version": "v2", "module": "changes/reward_v2.py"}])
    check_reward_modules(events, pack)  # no error


def test_the_production_world_refuses_what_the_command_would(packs: Path, tmp_path: Path) -> None:
    """The copy into the production world checks again: a caller of the timeline that skipped the
    command's check still cannot copy a file from outside the pack."""
    from rlops.common.errors import UserError
    from rlops.timeline.events import Event
    from rlops.timeline.world import ProductionWorld

    world = ProductionWorld(packs / "credit_approval", tmp_path / "world")
    events = [Event(1.0, "reward_fn", {"version": "v2", "module": "changes/leak.py"})]
    with pytest.raises(UserError, match="a symlink leading out of the pack folder"):
        world.pack(events, events)
    assert not (tmp_path / "marker").exists()
