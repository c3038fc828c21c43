"""``rlops … | head``: when the reader of stdout goes away the command stops quietly, as Unix tools
do — no "internal error: BrokenPipeError", no "Exception ignored" from the interpreter's last
flush — with exit code 141 (128 + SIGPIPE, what a shell reports for a tool the pipe ended)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rlops.cli import EXIT_STDOUT_CLOSED
from rlops.common.config import REPO_ROOT


def _with_stdout_closed(*argv: str) -> subprocess.CompletedProcess[str]:
    read, write = os.pipe()
    os.close(read)  # the reader left before the first line: every write meets a broken pipe
    try:
        return subprocess.run(
            [sys.executable, "-m", "rlops.cli", *argv],
            cwd=REPO_ROOT,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "argv",
    [
        ("config", "show", "--scenario", "credit_approval"),  # many lines: the pipe breaks mid-command
        ("config", "validate"),  # one short line: the pipe breaks at the last flush
    ],
)
def test_a_closed_stdout_ends_the_command_quietly(argv: tuple[str, ...]) -> None:
    done = _with_stdout_closed(*argv)
    assert done.stderr == ""
    assert done.returncode == EXIT_STDOUT_CLOSED == 141
