"""Every command of the ``rlops`` CLI prints its help and exits 0."""

from __future__ import annotations

import argparse

import pytest

from rlops.cli import build_parser, main


def _commands() -> list[list[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        nested = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
        out += [[name, child] for child in nested[0].choices] if nested else [[name]]
    return out


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c))
def test_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    assert "usage: rlops" in capsys.readouterr().out


def test_every_documented_command_exists() -> None:
    names = {" ".join(c) for c in _commands()}
    for expected in ("env validate", "env describe", "env rollout", "trace-capture", "drift-detect", "drift-check",
                     "recalibrate", "label-queue run", "label-queue export", "label-queue import",
                     "train-reward-model", "train", "train-status", "stress-test", "evaluate", "promote",
                     "rollback", "replay", "audit"):
        assert expected in names
