"""The docs cannot drift: every ``rlops …`` command line shown in the README, the guides and the
docker README is parsed against the real command-line parser, and every module path named in the
docs, the docstrings and params.yaml exists in the tree."""

from __future__ import annotations

import argparse
import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlops.cli import build_parser
from rlops.common.config import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md")), REPO_ROOT / "docker" / "README.md"]
SOURCES = [p for d in ("rlops", "dags", "bench") for p in sorted((REPO_ROOT / d).rglob("*.py"))]

_FENCE = re.compile(r"^```.*?$(.*?)^```", re.DOTALL | re.MULTILINE)
_SPAN = re.compile(r"`([^`\n]+)`")
_COMMAND = re.compile(r"(?:^|[\s/$(])rlops\s+(-{0,2}[a-z][\w-]*.*)$")


# --------------------------------------------------------------------------- commands
def command_lines(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, text after "rlops ")`` of each command line in code: a fenced block's lines
    (continuations joined) and inline code spans."""
    spans = []
    for m in _FENCE.finditer(text):
        first = text.count("\n", 0, m.start(1)) + 1
        lines = m.group(1).split("\n")
        i = 0
        while i < len(lines):
            line, at = lines[i], i
            while line.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line.rstrip()[:-1] + " " + lines[i]
            spans.append((first + at, line.split("  #")[0]))
            i += 1
    prose = _FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # the same line numbers
    for m in _SPAN.finditer(prose):
        spans.append((prose.count("\n", 0, m.start()) + 1, m.group(1)))
    for line_no, code in spans:
        found = _COMMAND.search(code.strip())
        if found:
            yield line_no, found.group(1)


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for a in parser._actions for o in a.option_strings}


def _alternatives(token: str) -> list[str]:
    """``run\\|export\\|import`` or ``[--simulate|--landing-zone]`` → its alternatives, brackets stripped."""
    return [t for t in re.split(r"\\?\|", token.strip("[]()…,.;:")) if t]


def check_command(root: argparse.ArgumentParser, command: str) -> list[str]:
    """Problems of one command line (text after ``rlops``): an unknown command or verb, or a flag the
    parser of that command does not take."""
    tokens = command.replace("…", " ").split()
    parsers = [root]
    path = ["rlops"]
    problems: list[str] = []
    i = 0
    while i < len(tokens) and tokens[i].startswith("-"):  # global options (rlops --debug …)
        problems += [
            f"`rlops` has no option {f}"
            for f in _alternatives(tokens[i].split("=")[0])
            if f.startswith("-") and f not in _options(root)
        ]
        i += 1
    while i < len(tokens):  # the nouns and verbs
        choices = _subparsers(parsers[0])
        if not choices:
            break
        words = [w for w in _alternatives(tokens[i]) if not w.startswith("-")]
        if not words or not re.fullmatch(r"[a-z][\w-]*", words[0]):
            break
        unknown = [w for w in words if w not in choices]
        if unknown:
            expected = ", ".join(sorted(choices))
            return [*problems, f"`{' '.join(path)}` has no command {', '.join(unknown)} (expected one of {expected})"]
        path.append(tokens[i])
        parsers = [choices[w] for w in words]
        i += 1
    for token in tokens[i:]:
        for flag in _alternatives(token.split("=")[0]):
            if re.fullmatch(r"--?[a-zA-Z][\w-]*", flag):
                missing = [p.prog for p in parsers if flag not in _options(p) and flag not in _options(root)]
                problems += [f"`{prog}` has no option {flag}" for prog in missing]
    return problems


def command_problems(text: str, source: str, root: argparse.ArgumentParser) -> list[str]:
    return [
        f"{source}:{line}: `rlops {cmd}`: {problem}"
        for line, cmd in command_lines(text)
        for problem in check_command(root, cmd)
    ]


# --------------------------------------------------------------------------- module paths
_FILE_PATH = re.compile(r"(?<![\w./-])(rlops/[\w/]*\w(?:\.py)?)")
_DOTTED = re.compile(r"(?<![\w./-])(rlops(?:\.[A-Za-z_]\w*)+)")


@functools.cache
def _module_names(path: Path) -> set[str]:
    """Top-level names a module defines (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If):  # TYPE_CHECKING blocks and the like
            names |= {
                a.asname or a.name
                for n in ast.walk(node)
                if isinstance(n, (ast.Import, ast.ImportFrom))
                for a in n.names
            }
    return names


@functools.cache
def _names_in_code() -> frozenset[str]:
    """String constants of the code that look like paths but name other things: MLflow tag keys
    (``rlops.step``, the prefix ``rlops.alias.``), span attributes (``rlops.record``), profiler
    labels (``rlops/env_step``)."""
    out: set[str] = set()
    for src in (REPO_ROOT / "rlops").rglob("*.py"):
        out |= {
            n.value
            for n in ast.walk(ast.parse(src.read_text()))
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and re.fullmatch(r"rlops[./][\w./]*", n.value)
        }
    return frozenset(out)


def _is_code_name(ref: str, names: frozenset[str]) -> bool:
    return any(
        c == ref or c.startswith((ref + ".", ref + "/")) or (c.endswith(".") and ref.startswith(c)) for c in names
    )


def check_module_path(ref: str, root: Path = REPO_ROOT, code_names: frozenset[str] = frozenset()) -> str | None:
    """None when ``ref`` (``rlops/x/y.py``, ``rlops/x/``, ``rlops.x.y`` or ``rlops.x.y.name``) names
    something in the tree (or one of ``code_names``: a tag key, a label), else what is missing."""
    if _is_code_name(ref, code_names) and not (root / ref).exists():
        return None
    if "/" in ref:
        return None if (root / ref).exists() else f"{ref} does not exist"
    parts = ref.split(".")
    for n in range(len(parts), 1, -1):
        base = root.joinpath(*parts[:n])
        module = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
        if module.exists():
            rest = parts[n:]
            if rest and rest[0] not in _module_names(module) and not (base / f"{rest[0]}.py").exists():
                return f"{ref}: {'.'.join(parts[:n])} has no {rest[0]}"
            return None
    return f"{ref}: no module {'.'.join(parts[:2])}"


def _docstrings(path: Path) -> Iterator[tuple[int, str]]:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body:
                yield node.body[0].lineno, doc


def module_path_problems(text: str, source: str, first_line: int = 1) -> list[str]:
    keys = _names_in_code()
    out = []
    for pattern in (_FILE_PATH, _DOTTED):
        for m in pattern.finditer(text):
            ref = m.group(1).rstrip(".")
            problem = check_module_path(ref, code_names=keys)
            if problem:
                out.append(f"{source}:{first_line + text.count(chr(10), 0, m.start())}: {problem}")
    return out


# --------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def _rel(p: Path) -> str:
    return str(p.relative_to(REPO_ROOT))


def test_every_command_line_in_the_docs_parses(parser: argparse.ArgumentParser) -> None:
    problems = [p for doc in DOCS for p in command_problems(doc.read_text(), _rel(doc), parser)]
    assert not problems, "commands in the docs that the CLI does not have:\n" + "\n".join(problems)
    assert sum(1 for doc in DOCS for _ in command_lines(doc.read_text())) > 50  # the checker sees them


def _leaf_commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    choices = _subparsers(parser)
    if not choices:
        yield path, parser
    for name, child in choices.items():
        yield from _leaf_commands(child, path + (name,))


def test_the_readme_says_which_commands_take_the_common_flags(parser: argparse.ArgumentParser) -> None:
    """ "The pipeline commands — all but `console`, `demo`, `config` and `model webhook` — take
    `--scenario`, `--json` and `--dry-run`": the parser agrees, both ways."""
    readme = " ".join((REPO_ROOT / "README.md").read_text().split())
    claim = re.search(r"The pipeline commands — all but (.*?) — take `--scenario NAME_OR_PATH`", readme)
    assert claim, "the README's sentence on the common flags is gone"
    named = set(re.findall(r"`([^`]+)`", claim.group(1)))
    lacking = {
        " ".join(path) for path, p in _leaf_commands(parser) if not {"--scenario", "--json", "--dry-run"} <= _options(p)
    }
    assert {c for c in lacking if not any(c == n or c.startswith(n + " ") for n in named)} == set()
    assert all(any(c == n or c.startswith(n + " ") for c in lacking) for n in named)


def test_the_checker_fails_on_a_renamed_flag_or_command(parser: argparse.ArgumentParser) -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    assert "[--bh] [--fail-on-drift]" in readme and "rlops model rollback" in readme
    renamed = readme.replace("[--bh] [--fail-on-drift]", "[--bh] [--fail-if-drift]", 1)
    problems = command_problems(renamed, "README.md", parser)
    assert len(problems) == 1 and "`rlops drift detect` has no option --fail-if-drift" in problems[0]
    assert command_problems(readme.replace("rlops model rollback", "rlops model roll-back"), "README.md", parser)
    assert command_problems("```\nrlops label-queue import x.json\n```\n", "x.md", parser)
    assert command_problems("`rlops labels run\\|export\\|imports`", "x.md", parser)
    assert not command_problems("`rlops labels run\\|export\\|import`, `rlops --debug env validate`", "x.md", parser)


def test_every_module_path_named_in_docs_docstrings_and_params_exists() -> None:
    files = [*DOCS, REPO_ROOT / "params.yaml"]
    problems = [p for doc in files for p in module_path_problems(doc.read_text(), _rel(doc))]
    for src in SOURCES:
        for line, doc in _docstrings(src):
            problems += module_path_problems(doc, _rel(src), line)
    assert not problems, "module paths that are not in the tree:\n" + "\n".join(problems)


def test_the_module_path_checker_sees_what_is_gone() -> None:
    assert check_module_path("rlops/common/config.py") is None
    assert check_module_path("rlops.common.config.load_params") is None
    assert check_module_path("rlops.pipeline_steps.labels.select") is None
    assert check_module_path("rlops/pipeline_steps/train.py") == "rlops/pipeline_steps/train.py does not exist"
    assert check_module_path("rlops.config.load_params") == "rlops.config.load_params: no module rlops.config"
    assert "has no nowhere" in str(check_module_path("rlops.common.config.nowhere"))
    names = frozenset({"rlops.dag_run_id", "rlops.alias.", "rlops/env_step"})
    assert all(
        check_module_path(ref, code_names=names) is None
        for ref in ("rlops.dag_run_id", "rlops.alias.champion", "rlops.alias", "rlops/env_step")
    )
    assert check_module_path("rlops.config", code_names=names) == "rlops.config: no module rlops.config"


def _dag_param_names() -> set[str]:
    """The names of the DAGs' typed Params (``"name": Param(...)`` in the DAG files and their settings)."""
    files = [
        REPO_ROOT / "rlops" / "pipeline_steps" / "orchestration" / "settings.py",
        *sorted((REPO_ROOT / "dags").glob("*.py")),
    ]
    return {
        k.value
        for f in files
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.Dict)
        for k, v in zip(node.keys, node.values)
        if isinstance(k, ast.Constant)
        and isinstance(v, ast.Call)
        and getattr(v.func, "id", getattr(v.func, "attr", None)) == "Param"
    }


def test_dag_conf_shown_in_the_docs_uses_the_dags_params() -> None:
    import json

    known = _dag_param_names()
    assert {"scenario", "reward_fn", "timesteps", "dry_run", "candidate"} <= known
    confs = [(doc, m.group(1)) for doc in DOCS for m in re.finditer(r"--conf '(\{.*?\})'", doc.read_text())]
    assert confs
    unknown = [f"{_rel(doc)}: {key}" for doc, conf in confs for key in json.loads(conf) if key not in known]
    assert not unknown, f"DAG conf keys the DAGs do not take: {unknown} (expected some of {sorted(known)})"
