"""MLflow is reached through :mod:`rlops.registry` only, and an alias is written in one place.

Read from the source (AST), so an import inside a function, or under ``if TYPE_CHECKING:``, counts
like one at the top of a module. Two places outside the registry may import MLflow, each for the
reason its package documentation gives: the agent SDK's registry reader and trace exporter (the
SDK ships without the rest of rlops) and the console (its read views query the tracking server).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import rlops.agent_sdk
import rlops.console
from rlops.common.config import REPO_ROOT

ROOT = REPO_ROOT / "rlops"
REGISTRY = ROOT / "registry"
ALLOWED_FILES = {
    ROOT / "agent_sdk" / "registry_source.py",
    ROOT / "agent_sdk" / "mlflow_tracing.py",
}
ALLOWED_PACKAGES = {ROOT / "console"}
ALIAS_WRITES = ("set_registered_model_alias", "delete_registered_model_alias")


def _is_mlflow(name: str | None) -> bool:
    return name is not None and (name == "mlflow" or name.startswith("mlflow."))


def mlflow_imports(source: str, filename: str = "<module>") -> Iterator[int]:
    """The line of every import of MLflow in ``source``, at any depth: ``import mlflow…``,
    ``from mlflow… import …`` and ``importlib.import_module("mlflow…")`` / ``__import__("mlflow…")``."""
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            if any(_is_mlflow(a.name) for a in node.names):
                yield node.lineno
        elif isinstance(node, ast.ImportFrom):
            if not node.level and _is_mlflow(node.module):
                yield node.lineno
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            fn = node.func
            called = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
            arg = node.args[0].value
            if called in ("import_module", "__import__") and isinstance(arg, str) and _is_mlflow(arg):
                yield node.lineno


def _allowed(path: Path) -> bool:
    return REGISTRY in path.parents or path in ALLOWED_FILES or any(p in path.parents for p in ALLOWED_PACKAGES)


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_the_finder_sees_every_form_of_import() -> None:
    source = (
        "import os, mlflow.pyfunc\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from mlflow import MlflowClient\n"
        "def f():\n"
        "    from mlflow.entities import Dataset\n"
        "    import importlib\n"
        "    return importlib.import_module('mlflow.artifacts')\n"
        "from . import mlflow_tracing\n"
        "import mlflowish\n"
    )
    assert list(mlflow_imports(source)) == [1, 4, 6, 8]


def test_mlflow_is_imported_only_under_the_registry_and_the_documented_places() -> None:
    offenders = [
        f"{path.relative_to(REPO_ROOT)}:{line}"
        for path in _modules()
        if not _allowed(path)
        for line in mlflow_imports(path.read_text(), str(path))
    ]
    assert not offenders, "MLflow imported outside rlops/registry (add a function there and call it): " + ", ".join(
        offenders
    )


def test_the_allowed_packages_say_why_they_import_mlflow() -> None:
    sdk, console = rlops.agent_sdk.__doc__ or "", rlops.console.__doc__ or ""
    assert "MLflow" in sdk and "without the rest of rlops" in sdk
    for path in ALLOWED_FILES:
        assert f"rlops.agent_sdk.{path.stem}" in sdk, f"rlops/agent_sdk/__init__.py does not name {path.name}"
    assert "MLflow" in console and "tracking server directly" in console


def test_an_alias_is_written_in_one_place() -> None:
    """Every alias move goes through :meth:`Tracker.set_alias` / :meth:`Tracker.delete_alias`, which
    sign rlops' record of it first; a raw MLflow alias write anywhere else would go unrecorded."""
    found: dict[str, list[str]] = {name: [] for name in ALIAS_WRITES}
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ALIAS_WRITES:
                found[node.attr].append(f"{path.relative_to(REPO_ROOT)}:{node.lineno}")
    for name, places in found.items():
        assert len(places) == 1 and places[0].startswith("rlops/registry/"), (
            f"MLflow's {name} called in {places or 'no place'}; expected once, under rlops/registry"
        )
