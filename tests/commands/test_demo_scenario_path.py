"""``rlops demo --scenario`` takes what every other command's ``--scenario`` takes: a pack name
under scenarios/ or a pack folder anywhere. The demo is stopped at its capture step: what is
checked is which pack it loaded and the context its steps run in."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.common.errors import UserError
from rlops.pipeline_steps.capture import step as capture_module
from rlops.pipeline_steps.infra.context import StepContext


class Stopped(Exception):
    """Raised in place of the capture step: the demo got that far."""


def pack_elsewhere(tmp_path: Path, name: str) -> Path:
    """The credit pack copied to a folder outside scenarios/ as the pack ``name``."""
    folder = tmp_path / "elsewhere" / name
    shutil.copytree(REPO_ROOT / "scenarios" / "credit_approval", folder)
    doc = yaml.safe_load((folder / "scenario.yaml").read_text())
    doc["name"] = name
    (folder / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return folder


@pytest.fixture()
def stop_at_capture(monkeypatch: pytest.MonkeyPatch) -> list[StepContext]:
    contexts: list[StepContext] = []

    def capture_step(ctx: StepContext, request: Any) -> Any:
        contexts.append(ctx)
        raise Stopped

    monkeypatch.setattr(capture_module, "capture_step", capture_step)
    return contexts


def test_the_demo_runs_the_pack_of_a_folder_path(
    rlops_home: Path, tmp_path: Path, stop_at_capture: list[StepContext], capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops import demo

    folder = pack_elsewhere(tmp_path, "my_credit")
    with pytest.raises(Stopped):
        demo.run(str(folder))
    out = capsys.readouterr().out
    assert "scenario my_credit," in out and "[1/8] pack my_credit:" in out, out
    (ctx,) = stop_at_capture
    assert ctx.scenario == "my_credit" and ctx.pack_dir == folder.resolve()
    # The demo's budgets are applied on top of the pack folder, not instead of it.
    assert ctx.config.capture.episodes == ctx.config.demo.capture_episodes


def test_the_demo_still_takes_a_pack_name(rlops_home: Path, stop_at_capture: list[StepContext]) -> None:
    from rlops import demo

    with pytest.raises(Stopped):
        demo.run("credit_approval")
    (ctx,) = stop_at_capture
    assert ctx.pack_dir == REPO_ROOT / "scenarios" / "credit_approval"


@pytest.mark.parametrize("given", ["", "/", "./no_such_pack", "elsewhere"])
def test_the_demo_refuses_what_is_no_pack(
    given: str, rlops_home: Path, tmp_path: Path, stop_at_capture: list[StepContext], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty text, a folder without scenario.yaml or a path to nothing is a usage error naming
    what was given, never the default pack."""
    from rlops import demo

    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="--scenario") as err:
        demo.run(given)
    assert "\n" not in str(err.value) and not stop_at_capture
