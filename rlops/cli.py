"""The ``rlops`` command line: nouns, then verbs.

    rlops env {validate,describe,rollout} | capture | import | drift {detect,check} | calibrate
          | outcome {import,capture,schema}
          | labels {run,export,import} | train {policy,relabel,switch-reward,reward-model,tune,status}
          | profile | stress | reward {whatif} | model {evaluate,promote,rollback,webhook} | replay | audit | simulate
          | console | demo | config {show,validate,schema} | stack {up,status,down} | init | signal {set,show}

Each noun is one module of ``rlops.commands`` holding only its argparse definitions and thin
handlers; a handler imports its step (and with it torch, pandas, MLflow) when it runs, so
building the parser — ``rlops --help`` — imports nothing heavy. The pipeline commands (all but
``console``, ``demo``, ``config`` and ``model webhook``) take ``--scenario NAME_OR_PATH``, ``--json``
and ``--dry-run``; results go to stdout, errors to stderr. With ``--json`` stdout carries the JSON
result only: whatever else a command or a library prints there goes to stderr.

Exit codes: 0 success, 1 a check failed (stress test, gate) or a service/internal error,
2 bad input (pack, config, arguments), 3 drift found with ``--fail-on-drift``; 130 interrupted
(SIGINT), 143 terminated (SIGTERM) — either way the command's open MLflow runs end as KILLED;
141 when stdout's reader went away (``rlops … | head``), quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from rlops.common.errors import ExitCode, RlopsError
from rlops.common.library_logs import library_tracebacks_to_debug
from rlops.common.signals import Terminated, exit_code, signals_unwind

EXIT_CODES = """exit codes:
  0  success
  1  a check failed (stress test, promotion gate), or a service or internal error
  2  bad input: arguments, scenario pack, params, data
  3  drift found, with --fail-on-drift
  130, 143  interrupted (SIGINT), terminated (SIGTERM): the command's MLflow runs end KILLED
  141  stdout closed before the command finished (piped into head): it stops quietly
"""
#: 128 + SIGPIPE: what a shell reports for a Unix tool whose reader went away.
EXIT_STDOUT_CLOSED = 141


def _registrars() -> list[Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]]:
    from rlops.commands import (
        audit,
        calibrate,
        capture,
        config,
        console,
        demo,
        drift,
        env,
        import_log,
        init,
        labels,
        model,
        outcome,
        profile,
        reward,
        signal,
        simulate,
        stack,
        stress,
        train,
    )

    return [
        env.register,
        capture.register,
        import_log.register,
        outcome.register,
        drift.register,
        calibrate.register,
        labels.register,
        train.register,
        profile.register,
        stress.register,
        reward.register,
        signal.register,
        model.register,
        audit.register,
        simulate.register,
        console.register,
        demo.register,
        config.register,
        stack.register,
        init.register,
    ]


class OneLineParser(argparse.ArgumentParser):
    """A usage error is one line on stderr — ``error: rlops env rollout: argument --episodes: …``
    — and exit code 2, like every other bad input; ``--help`` still shows the full usage.
    Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(int(ExitCode.BAD_INPUT))


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = OneLineParser(
        prog="rlops",
        description="Train, test and promote agent decision policies with reinforcement learning.",
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in _registrars():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from rlops.commands.common_args import json_stdout

    parser = build_parser()
    args = parser.parse_args(argv)
    # Progress bars of artifact downloads drown the step summaries on a terminal.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        # SIGTERM unwinds like SIGINT: the command's open MLflow runs end KILLED, not RUNNING for ever;
        # a library's logged traceback is debug output: the command's own error says what failed
        quiet = contextlib.nullcontext() if args.debug else library_tracebacks_to_debug()
        with signals_unwind(), json_stdout(bool(getattr(args, "json", False))), quiet:
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled, not in the flush at exit
        return code
    except RlopsError as exc:
        if args.debug:
            raise
        hint = f" ({exc.hint})" if exc.hint else ""
        print(f"error: {exc}{hint}", file=sys.stderr)
        return int(exc.exit_code)
    except KeyboardInterrupt as exc:
        print("terminated" if isinstance(exc, Terminated) else "interrupted", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # an internal error: a short message, the traceback only on request
        if isinstance(exc, BrokenPipeError) and _stdout_closed():  # not another pipe or socket
            # quiet, like `cat | head`; stdout goes to /dev/null so the interpreter's last flush of
            # what is still buffered does not meet the broken pipe again and print about it
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return EXIT_STDOUT_CLOSED
        if args.debug:
            raise
        print(
            f"internal error: {type(exc).__name__}: {exc} (rerun with `rlops --debug ...` for the traceback)",
            file=sys.stderr,
        )
        return int(ExitCode.FAILED)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe or socket whose reader has gone (poll reports an error on it)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by a buffer (tests, --json capture)
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


if __name__ == "__main__":
    sys.exit(main())
