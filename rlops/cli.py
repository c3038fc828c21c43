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

from common.errors import ExitCode, RlopsError


def _registrars() -> list[Callable[[argparse._SubParsersAction], None]]:
    from rlops.commands import env, pipeline
    return [env.register, pipeline.register]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlops", description="Train, test and promote agent decision "
                                     "policies with reinforcement learning.")
    parser.add_argument("--debug", action="store_true",
                        help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Progress bars of artifact downloads drown the step summaries on a terminal.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return int(args.func(args) or 0)
    except RlopsError as exc:
        if args.debug:
            raise
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # an internal error: a short message, the traceback only on request
        if args.debug:
            raise
        print(f"internal error: {type(exc).__name__}: {exc} (rerun with `rlops --debug ...` for "
              "the traceback)", file=sys.stderr)
        return int(ExitCode.FAILED)


if __name__ == "__main__":
    sys.exit(main())
