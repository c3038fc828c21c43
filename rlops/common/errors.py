"""The errors of rlops and the exit codes they map to, in one place.

Anything in rlops raises one of these (or a subclass); the edges — the command line, an Airflow
task, the agent SDK — render it once: a user error is one paragraph on stderr and exit 2, an
internal error a short message with a hint and exit 1 (the traceback only under ``--debug``).
Nothing here imports anything of rlops, so every layer may import it.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The exit codes of every ``rlops`` command, as documented in docs/cli.md."""

    OK = 0
    FAILED = 1  # a check failed (stress test, gate), or an internal error
    BAD_INPUT = 2  # bad input: pack, config, arguments, data
    DRIFT = 3  # drift found with ``--fail-on-drift``


class RlopsError(Exception):
    """Base of every error rlops raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code: ExitCode = ExitCode.FAILED
    hint: str = ""


class UserError(RlopsError, ValueError):
    """Bad input from the user (an argument, a config value, a file): printed as one paragraph
    saying what, where and what was expected; exit code 2, no traceback."""

    exit_code = ExitCode.BAD_INPUT


class CheckFailed(RlopsError):
    """A check that ran and said no (a stress test, a promotion gate): exit code 1."""

    exit_code = ExitCode.FAILED


class InfrastructureError(RlopsError, RuntimeError):
    """A service rlops depends on failed for good (storage, the tracking server): exit code 1
    with a hint about what to check."""

    exit_code = ExitCode.FAILED
    hint = "check that the storage root and the MLflow tracking URI in params.yaml are reachable"
