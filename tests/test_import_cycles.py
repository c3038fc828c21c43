"""No import cycle in the rlops package, counting the imports inside functions.

The graph is built from the source (AST), not from ``sys.modules``: an import inside a function is
an edge like one at the top of a module, because it is a dependency all the same (the cycle is
only postponed to the call). Imports under ``if TYPE_CHECKING:`` are left out: they never run,
they only name types for the checker.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from rlops.common.config import REPO_ROOT

PACKAGE = "rlops"


def module_files(root: Path = REPO_ROOT / PACKAGE) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package (``__init__`` as the package)."""
    out = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``; ``from a.b import c`` points at ``a.b.c``
    when that is a module, else at ``a.b``."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:  # ``import a.b.c`` of a name inside a module
                    target = target.rpartition(".")[0]
                if target and target != name and target.split(".")[0] == PACKAGE:
                    graph[name].add(target)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (each one holds a cycle)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of ``component`` (breadth-first inside it)."""
    start, members = component[0], set(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & members):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return component


def test_the_graph_sees_function_level_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from rlops.sub import b\n")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rlops.c\nfrom .. import a\n"
    )
    (pkg / "c.py").write_text("import rlops.sub.b\n")
    graph = import_graph(module_files(pkg))
    assert graph["rlops.a"] == {"rlops.sub.b"} and graph["rlops.sub.b"] == {"rlops.a"}
    assert graph["rlops.c"] == {"rlops.sub.b"}
    cycles = strongly_connected(graph)
    assert cycles == [["rlops.a", "rlops.sub.b"]]
    assert one_cycle(graph, cycles[0]) == ["rlops.a", "rlops.sub.b", "rlops.a"]


def test_no_import_cycle_in_rlops() -> None:
    graph = import_graph(module_files())
    components = strongly_connected(graph)
    report = "\n".join(
        f"  {' → '.join(one_cycle(graph, c))}   (component of {len(c)}: {', '.join(c)})" for c in components
    )
    assert not components, f"{len(components)} import cycle(s), function-level imports counted:\n{report}"


def function_level_imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of each import of an rlops module inside a function of ``path`` (a module
    imported at the top shows its dependency where a reader looks first)."""
    out = []
    for fn in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in _imports(fn):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            out += [(node.lineno, n) for n in names if n.split(".")[0] == PACKAGE and not getattr(node, "level", 0)]
    return sorted(set(out))


# Function-level imports of rlops modules outside the command-line layer (which imports lazily
# for start-up speed). A ceiling that only goes down: move an import to the top of its module
# (where no cycle forbids it) and lower the figure in the same change.
FUNCTION_LEVEL_IMPORT_CEILING = 54


def test_function_level_imports_of_rlops_modules_stay_under_the_ceiling() -> None:
    root = REPO_ROOT / PACKAGE
    counted = {
        f: function_level_imports(f)
        for f in module_files().values()
        if f != root / "cli.py" and root / "commands" not in f.parents
    }
    total = sum(len(v) for v in counted.values())
    worst = sorted(counted.items(), key=lambda kv: -len(kv[1]))[:5]
    where = ", ".join(f"{f.relative_to(REPO_ROOT)} {len(v)}" for f, v in worst)
    assert total <= FUNCTION_LEVEL_IMPORT_CEILING, f"{total} function-level rlops imports (most: {where})"


def test_nothing_in_the_library_imports_the_timeline() -> None:
    """The simulated timeline drives the DAGs from above: only it, the command line (``rlops
    simulate``) and the benches and tests may import it."""
    graph = import_graph(module_files())
    above = ("rlops.timeline", "rlops.commands", "rlops.cli")
    below = {m: sorted(t for t in ts if t.startswith("rlops.timeline")) for m, ts in graph.items()}
    offenders = {m: ts for m, ts in below.items() if ts and not m.startswith(above)}
    assert not offenders, f"modules below the timeline that import it: {offenders}"


def test_the_base_packages_import_no_step() -> None:
    """The registry, the trace store and storage sit beside the sandbox, below the steps: none of
    their modules (nor the base layers' under them) imports ``rlops.pipeline_steps`` or above."""
    graph = import_graph(module_files())
    base = ("rlops.registry", "rlops.trace_store", "rlops.storage", "rlops.common", "rlops.sandbox")
    above = ("rlops.pipeline_steps", "rlops.timeline", "rlops.commands", "rlops.cli", "rlops.console")
    offenders = {m: sorted(t for t in ts if t.startswith(above)) for m, ts in graph.items() if m.startswith(base)}
    offenders = {m: ts for m, ts in offenders.items() if ts}
    assert not offenders, f"base modules that import a step or above: {offenders}"


def test_only_the_command_line_imports_the_console() -> None:
    """The console is the top layer: it reads the library's results; no library module imports it
    (what both need lives in the library), only ``rlops console``'s command registration."""
    graph = import_graph(module_files())
    above = ("rlops.console", "rlops.commands")
    offenders = {m: sorted(t for t in ts if t.startswith("rlops.console")) for m, ts in graph.items()}
    offenders = {m: ts for m, ts in offenders.items() if ts and not m.startswith(above)}
    assert not offenders, f"modules outside the console and the commands that import it: {offenders}"


def imported_names(path: Path, name: str) -> set[str]:
    """Every module name ``path`` (module ``name``) imports, at any depth, ``if TYPE_CHECKING:``
    included (a type-only import is a dependency of the source all the same); relative imports
    resolved, ``from a import b`` counted as ``a.b``."""
    is_pkg = path.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_pkg else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            out.update(f"{base}.{a.name}" for a in node.names)
    return out


def test_the_layer_check_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / PACKAGE / "common"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import rlops.model.x\n"
        "def f():\n    from ..model import y\n"
    )
    assert imported_names(pkg / "a.py", "rlops.common.a") >= {"rlops.model.x", "rlops.model.y"}


def test_the_common_layer_imports_no_model() -> None:
    """``rlops.common`` is the base layer every package builds on, the learners of ``rlops.model``
    included: no module of it imports ``rlops.model``, in a function or for types only either (the
    config records the params model is generated from are pure settings and live in ``rlops.common``)."""
    offenders = {
        name: sorted(t for t in imported_names(path, name) if t == "rlops.model" or t.startswith("rlops.model."))
        for name, path in module_files().items()
        if name == "rlops.common" or name.startswith("rlops.common.")
    }
    offenders = {m: ts for m, ts in offenders.items() if ts}
    assert not offenders, f"modules of rlops.common that import rlops.model: {offenders}"
