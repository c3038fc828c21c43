"""The arguments every command shares and the step context built from them.

``--scenario NAME_OR_PATH`` means the same thing everywhere: a pack name under ``scenarios_dir``
of params, or a pack folder anywhere. Only the standard library is imported here, so building
the parser stays instant; the step modules are imported inside the handlers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext


def add_common_args(p: argparse.ArgumentParser, run_key: bool = True) -> None:
    """``--scenario``, ``--run-key`` (steps that write per data interval), ``--json``, ``--dry-run``."""
    p.add_argument(
        "--scenario",
        metavar="NAME_OR_PATH",
        default=None,
        help="scenario pack: a name under scenarios/ or a pack folder (default: params 'scenario')",
    )
    if run_key:
        p.add_argument(
            "--run-key",
            default=None,
            help="the data interval: 20261130T0500 (an hour) or 20261130T0545-15m, UTC "
            "(default: the hour that has just ended)",
        )
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("--dry-run", action="store_true", help="compute and print; write nothing")


def add_reward_fn_arg(p: argparse.ArgumentParser, files: bool = False) -> None:
    """``--reward-fn``: the one name of the reward-function choice (a pack label such as ``v1``)."""
    what = "a label of the pack (v1) or a reward module file" if files else "a label of the pack, e.g. v1"
    p.add_argument(
        "--reward-fn",
        default=None,
        metavar="LABEL" + ("|FILE" if files else ""),
        help=f"reward function: {what} (default: the pack's params.yaml 'reward_fn', else the project's, "
        "else the pack's newest)",
    )


def context_from_args(args: argparse.Namespace) -> StepContext:
    """A :class:`StepContext` from ``--scenario`` (a name or a pack folder), ``--run-key`` and
    ``--dry-run``; a malformed run key is a user error (exit 2)."""
    from rlops.common.config import load_params
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.infra.context import StepContext

    params = load_params()
    scenario = getattr(args, "scenario", None)
    if scenario is not None:
        params["scenarios_dir"], scenario = scenario_of(scenario, params)
    try:
        return StepContext.create(
            scenario=scenario,
            run_key=getattr(args, "run_key", None),
            dry_run=bool(getattr(args, "dry_run", False)),
            params=params,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None


def scenario_of(given: str, params: dict[str, Any]) -> tuple[str, str]:
    """``(scenarios_dir, pack name)`` of an explicit ``--scenario``: a pack folder (it holds a
    scenario.yaml) or a pack name under ``scenarios_dir``. Anything else — an empty text, ``/``, a
    folder that is no pack — is a :class:`UserError`, never "the default pack"."""
    from rlops.common.config import REPO_ROOT
    from rlops.common.errors import UserError

    root = str(params.get("scenarios_dir") or REPO_ROOT / "scenarios")
    if not given.strip():
        raise UserError("--scenario '': empty path; expected a pack name under scenarios/ or a pack folder")
    path = Path(given)
    if path.is_dir():
        folder = path.resolve()
        if folder.name and (folder / "scenario.yaml").is_file():
            return str(folder.parent), folder.name
        if folder.name and "/" not in given and not given.startswith(".") and (Path(root) / given).is_dir():
            return root, given  # a pack name that is also a folder here
        raise UserError(
            f"--scenario {given!r}: the folder {folder} is not a scenario pack (no scenario.yaml); "
            "expected a pack name under scenarios/ or a pack folder"
        )
    if "/" in given or given.startswith(".") or given != given.strip():
        raise UserError(
            f"--scenario {given!r}: no such pack folder; expected a pack name under scenarios/ or a pack folder"
        )
    return root, given


def pack_dir_from_args(args: argparse.Namespace) -> Path:
    """The pack folder ``--scenario`` names (without building a full step context)."""
    from rlops.common.config import check_pack_identity, load_params, scenarios_dir
    from rlops.common.errors import UserError
    from rlops.common.params_sources import as_params
    from rlops.common.scenario_name import check_scenario_name

    scenario = getattr(args, "scenario", None)
    if scenario is not None and not scenario.strip():
        raise UserError("--scenario '': empty path; expected a pack name under scenarios/ or a pack folder")
    if scenario and (Path(scenario).is_dir() or "/" in scenario or scenario.startswith(".")):
        # A pack given as a folder is named by that folder, as a step given that path names it.
        check_pack_identity(Path(scenario).resolve())
        return Path(scenario)
    params = load_params()
    if scenario:
        folder = scenarios_dir(params) / check_scenario_name(scenario, "--scenario")
    else:
        folder = scenarios_dir(params) / check_scenario_name(as_params(params).scenario, "params 'scenario'")
    check_pack_identity(folder)  # the pack a step of that name would refuse is refused here too
    return folder


_json_out: list[TextIO] = []
"""The real stdout while a ``--json`` command runs (see :func:`json_stdout`); empty otherwise."""


@contextmanager
def json_stdout(as_json: bool) -> Iterator[None]:
    """While a ``--json`` command runs, its stdout carries only the JSON :func:`print_json` writes:
    anything else printed to stdout — MLflow's "View run … at: http://…" lines when a run ends on a
    tracking server, a library's chatter — goes to stderr instead."""
    if not as_json:
        yield
        return
    # MLflow prints those links itself (at run end, possibly at exit); this switch is its own.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
    _json_out.append(sys.stdout)
    try:
        with redirect_stdout(sys.stderr):
            yield
    finally:
        _json_out.pop()


def print_json(data: Any, indent: int | None = 2) -> None:
    """``data`` as the command's JSON result, on the real stdout even inside :func:`json_stdout`."""
    out = _json_out[-1] if _json_out else sys.stdout
    out.write(json.dumps(data, indent=indent, default=str) + "\n")
    out.flush()


def print_result(result: dict[str, Any], as_json: bool, lines: list[str]) -> None:
    """The result as JSON (``--json``) or as the human-readable lines."""
    if as_json:
        print_json(result)
    else:
        print("\n".join(lines))


def infrastructure(exc: Exception) -> Exception:
    """A tracking/storage failure as the error the CLI renders on stderr with exit code 1."""
    from rlops.common.errors import InfrastructureError, RlopsError

    return exc if isinstance(exc, RlopsError) else InfrastructureError(str(exc))


@contextmanager
def as_user_error(command: str) -> Iterator[None]:
    """A step's ``ValueError`` or ``FileNotFoundError`` comes from what the user gave it (a path, a
    version, a window): one paragraph naming the command, exit 2."""
    try:
        yield
    except (ValueError, FileNotFoundError) as exc:
        from rlops.common.errors import UserError

        raise UserError(f"{command}: {exc}") from exc
