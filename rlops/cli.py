"""The ``rlops`` command line. Each command group registers itself from ``rlops.commands``;
heavy libraries are imported inside the command that needs them, so ``rlops --help`` is instant.

Exit codes: 0 success, 1 a check failed (stress test, gate), 2 bad input (pack, config,
arguments), 3 drift found with ``--fail-on-drift``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Callable, Sequence

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_DRIFT = 0, 1, 2, 3


class UserError(Exception):
    """Bad input from the user: printed as one paragraph, exit code 2, no traceback."""


def _registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    from rlops.commands import env, pipeline
    return [env.register, pipeline.register]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlops", description="Train, test and promote agent decision "
                                     "policies with reinforcement learning.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Progress bars of artifact downloads drown the step summaries on a terminal.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from sandbox.errors import PackError
    from rlops.config import ConfigError
    try:
        return int(args.func(args) or 0)
    except (PackError, ConfigError, UserError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
