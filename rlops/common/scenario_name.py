"""What a scenario (pack) name may be, and that a pack's name is its folder's name. One home.

A scenario name is a key everywhere: the trace store's ``scenario=<name>`` partitions (read through
DuckDB, which takes ``*``, ``?`` and ``[`` in a path as a pattern), episode ids, the registered
models ``<name>-policy`` (:mod:`rlops.common.policy_ref` parses them), the DAG ids
``<kind>__<name>``, folders of calibrations and reports. So a name is 1 to
:data:`MAX_SCENARIO_NAME` ASCII letters, digits, ``_`` and ``-``, starting with a letter or a digit
(no leading ``-`` that a command line would read as an option), checked wherever a name enters:
the command line, params, a DAG run's conf, a pack's own ``name:``.

A pack is found by its folder's name and writes under its ``name:``; the two must be one, or a
copied pack folder would overwrite its original's partitions (:func:`identity_problem`).
"""

from __future__ import annotations

import re
from typing import Any

from rlops.common.errors import UserError

MAX_SCENARIO_NAME = 100
SCENARIO_NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_SCENARIO_NAME - 1}}}$")
RULE = f"expected 1 to {MAX_SCENARIO_NAME} ASCII letters, digits, '_' and '-', starting with a letter or a digit"


def shown(name: str) -> str:
    """``name`` quoted for a one-line message (escapes visible, a long one cut)."""
    return repr(name) if len(name) <= 60 else f"{name[:40]!r}… ({len(name)} characters)"


def scenario_name_problem(name: Any, what: str = "scenario") -> str | None:
    """Why ``name`` cannot be a scenario name (one line), or None."""
    if not isinstance(name, str):
        return f"{what} is a {type(name).__name__}, not a text: {RULE}"
    if SCENARIO_NAME.match(name):
        return None
    return f"{what} {shown(name)} is not a scenario name: {RULE}"


def check_scenario_name(name: Any, what: str = "scenario") -> str:
    """``name`` when it is a scenario name, else a :class:`UserError` (exit 2) saying why."""
    problem = scenario_name_problem(name, what)
    if problem is not None:
        raise UserError(problem)
    return str(name)


def identity_problem(folder: str, declared: Any, file: str) -> str | None:
    """Why a pack in the folder ``folder`` whose ``scenario.yaml`` (``file``) declares ``name:
    declared`` cannot be used (one line), or None when the two are one name."""
    if not isinstance(declared, str) or declared == folder or scenario_name_problem(declared) is not None:
        return None  # a missing, mistyped or ill-formed name: the pack loader says what is wrong, with its line
    return (
        f"pack folder {shown(folder)} declares name: {shown(declared)} in {file}: a pack's name keys "
        "its trace partitions, registered models and DAG ids, so it must be its folder's name (else "
        f"two packs write one partition); rename the folder or set name: {shown(folder)}"
    )
