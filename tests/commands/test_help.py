"""The ``rlops`` grammar: every noun and verb prints its help and exits 0, the parser imports
nothing heavy, usage errors go to stderr with exit code 2, and the old flat names are gone."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlops.cli import build_parser, main
from rlops.common.config import REPO_ROOT

REPO = REPO_ROOT

GRAMMAR = {
    "env": ["validate", "describe", "rollout", "schema", "diff"],
    "capture": [],
    "import": [],
    "outcome": ["import", "capture", "schema"],
    "drift": ["detect", "check"],
    "calibrate": [],
    "labels": ["run", "export", "import"],
    "train": ["policy", "reward-model", "status", "relabel", "switch-reward", "tune"],
    "profile": [],
    "stress": [],
    "reward": ["whatif"],
    "signal": ["set", "show"],
    "model": ["evaluate", "promote", "rollback", "rollout", "webhook"],
    "replay": [],
    "audit": [],
    "simulate": [],
    "console": [],
    "demo": [],
    "run": [],
    "config": ["show", "validate", "schema"],
    "stack": ["up", "status", "down"],
    "init": [],
}


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(subs[0].choices) if subs else {}


def _commands() -> list[list[str]]:
    out: list[list[str]] = [[]]
    for name, p in _subparsers(build_parser()).items():
        out.append([name])
        out += [[name, verb] for verb in _subparsers(p)]
    return out


def test_grammar_is_nouns_then_verbs() -> None:
    nouns = _subparsers(build_parser())
    assert {n: sorted(_subparsers(p)) for n, p in nouns.items()} == {n: sorted(v) for n, v in GRAMMAR.items()}


@pytest.mark.parametrize("command", _commands(), ids=lambda c: " ".join(c) or "rlops")
def test_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rlops {' '.join(command)}".rstrip())


def _leaves() -> list[list[str]]:
    return [c for c in _commands() if c and not _subparsers(_parser_of(c))]


def _parser_of(command: list[str]) -> argparse.ArgumentParser:
    p = build_parser()
    for word in command:
        p = _subparsers(p)[word]
    return p


# demo and run (the whole loop), console, config, the webhook receiver, the stack, init (it writes a
# new pack) and the outcome schema are not steps: no run key, nothing to dry-run; a business signal
# belongs to the project, not to one pack.
@pytest.mark.parametrize(
    "command",
    [
        c
        for c in _leaves()
        if c
        not in (
            ["demo"],
            ["run"],
            ["console"],
            ["init"],
            ["model", "webhook", "serve"],
            ["model", "webhook", "register"],
            ["outcome", "schema"],
        )
        and c[0] not in ("config", "stack", "signal")
    ],
    ids=" ".join,
)
def test_every_command_takes_the_common_options(command: list[str]) -> None:
    options = {s for a in _parser_of(command)._actions for s in a.option_strings}
    assert {"--scenario", "--json", "--dry-run"} <= options, command
    assert "--reward-version" not in options


@pytest.mark.parametrize(
    "old",
    [
        "trace-capture",
        "drift-detect",
        "drift-check",
        "recalibrate",
        "label-queue",
        "train-reward-model",
        "train-status",
        "stress-test",
        "evaluate",
        "promote",
        "rollback",
    ],
)
def test_old_flat_names_are_gone(old: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([old, "--help"])
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and "invalid choice" in err


@pytest.mark.parametrize(
    "argv",
    [["env", "validate", "--no-such-flag"], ["model", "promote"], ["train"], ["drift", "detect", "--baseline", "x"]],
    ids=" ".join,
)
def test_usage_errors_go_to_stderr_with_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: rlops") and len(err.strip().splitlines()) == 1


def test_a_bad_input_error_goes_to_stderr_with_exit_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rlops.cli", "env", "validate", "--scenario", str(tmp_path / "nope")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


def test_building_the_parser_imports_nothing_heavy() -> None:
    script = textwrap.dedent("""
        import sys
        import rlops.cli
        rlops.cli.build_parser()
        print(",".join(m for m in ("torch", "pandas", "mlflow", "numpy", "sqlalchemy", "great_expectations")
                       if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_help_lists_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code in ("0 ", "1 ", "2 ", "3 "):
        assert f"\n  {code}" in out
