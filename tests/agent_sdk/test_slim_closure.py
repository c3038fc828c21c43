"""The slim agent package (``agent/pyproject.toml``, distribution ``rlops-agent``) carries the framework
integrations, without a fresh virtualenv: every module ``rlops.integrations`` imports, at import time
or when an adapter is used, is either in one of the package's packages, a dependency of the package,
or a framework of the adapter's own extra, and the extras pin what ``setup.cfg`` and the lock file pin.
Importing the integrations loads neither torch, Airflow, DVC, pandas nor Great Expectations.
(``test_slim_install.py`` installs the package for real: slow.)"""

from __future__ import annotations

import ast
import configparser
import importlib.metadata
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement

from rlops.common.config import REPO_ROOT

AGENT = tomllib.loads((REPO_ROOT / "agent" / "pyproject.toml").read_text())
#: Each framework module of rlops.integrations and the extra that installs its framework.
EXTRA_OF = {"langgraph": "langgraph", "otlp": "langgraph", "openai_agents": "openai-agents", "autogen": "autogen"}
HEAVY = ("torch", "airflow", "dvc", "great_expectations", "pandas", "mlflow", "scipy", "pyarrow", "boto3")


@dataclass(frozen=True)
class Import:
    module: str
    where: str
    lazy: bool
    """Inside a function (runs when the adapter is used), or a module name given to ``require``."""


def _file(module: str) -> Path | None:
    path = REPO_ROOT.joinpath(*module.split("."))
    if (path / "__init__.py").exists():
        return path / "__init__.py"
    return path.with_suffix(".py") if path.with_suffix(".py").exists() else None


def _type_checking_only(node: ast.If) -> bool:
    return isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"


def imports_of(module: str) -> Iterator[Import]:
    """What ``module`` imports (``from a import b`` yields ``a.b`` too when that is a module); names
    passed to ``rlops.integrations.require`` count as lazy imports."""
    file = _file(module)
    assert file is not None, module
    package = module if file.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST, lazy: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            where = f"{module}:{getattr(child, 'lineno', '?')}"
            if isinstance(child, ast.If) and _type_checking_only(child):
                continue
            if isinstance(child, ast.Import):
                yield from (Import(a.name, where, lazy) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*parts, *([child.module] if child.module else [])])
                yield Import(base, where, lazy)
                yield from (Import(f"{base}.{a.name}", where, lazy) for a in child.names if _file(f"{base}.{a.name}"))
            elif (
                isinstance(child, ast.Call)
                and getattr(child.func, "id", None) == "require"
                and child.args
                and isinstance(child.args[0], ast.Constant)
            ):
                yield Import(str(child.args[0].value), where, True)
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from visit(child, inner)

    yield from visit(ast.parse(file.read_text()), False)


def integration_modules() -> list[str]:
    return sorted(
        "rlops.integrations" if p.stem == "__init__" else f"rlops.integrations.{p.stem}"
        for p in (REPO_ROOT / "rlops" / "integrations").glob("*.py")
    )


def import_closure() -> tuple[set[str], list[Import]]:
    """The rlops modules the integrations load, imported or used (their module-level imports and their
    own lazy ones, transitively), and every import outside rlops met on the way."""
    seen: set[str] = set()
    outside: list[Import] = []
    todo = integration_modules()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # a module's packages run first
        for imp in imports_of(module):
            if imp.lazy and not module.startswith("rlops.integrations"):
                continue  # another package's optional paths (the sandbox's torch ops): its own tests hold them
            if imp.module.split(".")[0] != "rlops":
                outside.append(imp)
            else:
                todo.append(imp.module if _file(imp.module) else imp.module.rpartition(".")[0])
    return seen, outside


def distributions_needed(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` install (names normalised), transitively, as installed here."""
    out: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = req.name.lower().replace("_", "-")
        if name in out or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
            continue
        out.add(name)
        try:
            todo += [Requirement(r) for r in importlib.metadata.requires(name) or []]
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def test_the_agent_package_carries_the_integrations_and_what_they_import() -> None:
    packages = set(AGENT["tool"]["setuptools"]["packages"])
    modules, outside = import_closure()
    homes = {m if (_file(m) or Path()).name == "__init__.py" else m.rpartition(".")[0] for m in modules}
    assert homes <= packages, f"imported by rlops.integrations but not in rlops-agent: {sorted(homes - packages)}"

    providers = importlib.metadata.packages_distributions()
    base = distributions_needed(AGENT["project"]["dependencies"])
    extras = AGENT["project"]["optional-dependencies"]
    for imp in outside:
        top = imp.module.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
        assert dists, f"{imp.where} imports {imp.module}, which no installed distribution provides"
        stem = imp.where.split(":")[0].rpartition(".")[2]
        if not imp.lazy:  # runs when the integrations are imported: the package's own dependencies only
            assert dists & base, f"{imp.where} imports {imp.module} ({dists}) at import time; rlops-agent needs {base}"
        else:
            assert stem in EXTRA_OF, f"{imp.where} imports {imp.module} lazily, in no framework module"
            extra = EXTRA_OF[stem]
            assert extra in extras, f"rlops-agent has no [{extra}] extra for {imp.where}"
            needed = distributions_needed(extras[extra]) | base
            assert dists & needed, (
                f"{imp.where} uses {imp.module} ({dists}), which rlops-agent[{extra}] does not install"
            )


def test_the_framework_extras_are_pinned_as_the_full_package_and_the_lock_file_pin_them() -> None:
    cfg = configparser.ConfigParser()
    cfg.read(REPO_ROOT / "setup.cfg")
    lock = dict(
        line.split("==", 1)
        for line in (REPO_ROOT / "requirements" / "lock.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )
    extras = AGENT["project"]["optional-dependencies"]
    for extra in sorted(set(EXTRA_OF.values())):
        full = [ln.strip() for ln in cfg["options.extras_require"][extra].splitlines() if ln.strip()]
        full = [ln for ln in full if not ln.startswith("#")]
        assert sorted(extras.get(extra, [])) == sorted(full), extra
        for pin in full:
            name, version = pin.split("==")
            assert lock[name] == version, f"{pin}: the lock file pins {name}=={lock[name]}"


def test_importing_the_integrations_loads_nothing_heavy() -> None:
    """``python -X importtime`` lists every module an import loads, however it was reached."""
    code = "import " + ", ".join(integration_modules())
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, check=True)
    loaded = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "rlops.integrations.langgraph" in loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY or m == "rlops.sandbox.pack")
    assert heavy == [], heavy
