"""The docs cannot drift: every ``rlops …`` command line shown in the README, the documentation
site's pages (``docs/**/*.md``) and the docker README is parsed against the real command-line parser,
every import in their Python code blocks runs, every module path named in the docs, the docstrings
and params.yaml exists in the tree, and the generated pages (the CLI and params references, the
benchmark table) are what their generators write now."""

from __future__ import annotations

import argparse
import ast
import functools
import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.cli import build_parser
from rlops.common.config import REPO_ROOT

DOCS = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")), REPO_ROOT / "docker" / "README.md"]
CLI_GUIDE = REPO_ROOT / "docs" / "cli.md"
README_MAX_LINES = 250
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


def test_the_cli_guide_says_which_commands_take_the_common_flags(parser: argparse.ArgumentParser) -> None:
    """ "The pipeline commands — all but `console`, `demo`, `config` and `model webhook` — take
    `--scenario`, `--json` and `--dry-run`": the parser agrees, both ways."""
    guide = " ".join(CLI_GUIDE.read_text().split())
    claim = re.search(r"The pipeline commands — all but (.*?) — take `--scenario NAME_OR_PATH`", guide)
    assert claim, "the command-line guide's sentence on the common flags is gone"
    named = set(re.findall(r"`([^`]+)`", claim.group(1)))
    lacking = {
        " ".join(path) for path, p in _leaf_commands(parser) if not {"--scenario", "--json", "--dry-run"} <= _options(p)
    }
    assert {c for c in lacking if not any(c == n or c.startswith(n + " ") for n in named)} == set()
    assert all(any(c == n or c.startswith(n + " ") for c in lacking) for n in named)


def test_the_checker_fails_on_a_renamed_flag_or_command(parser: argparse.ArgumentParser) -> None:
    guide = CLI_GUIDE.read_text()
    assert "[--bh] [--fail-on-drift]" in guide and "rlops model rollback" in guide
    renamed = guide.replace("[--bh] [--fail-on-drift]", "[--bh] [--fail-if-drift]", 1)
    problems = command_problems(renamed, "docs/cli.md", parser)
    assert len(problems) == 1 and "`rlops drift detect` has no option --fail-if-drift" in problems[0]
    assert command_problems(guide.replace("rlops model rollback", "rlops model roll-back"), "docs/cli.md", parser)
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
    """The names of the DAGs' typed Params, as the DAGs of every kind make them for a pack."""
    from rlops.pipeline_steps.orchestration.settings import DAG_KINDS, PackDagConfig, dag_params

    pack = PackDagConfig("credit_approval", "v1", 5000, 1000)
    return {name for kind in DAG_KINDS for name in dag_params(pack, kind)}


def test_dag_conf_shown_in_the_docs_uses_the_dags_params() -> None:
    known = _dag_param_names()
    assert {"scenario", "reward_fn", "timesteps", "dry_run", "candidate"} <= known
    confs = [(doc, m.group(1)) for doc in DOCS for m in re.finditer(r"--conf '(\{.*?\})'", doc.read_text())]
    assert confs
    unknown = [f"{_rel(doc)}: {key}" for doc, conf in confs for key in json.loads(conf) if key not in known]
    assert not unknown, f"DAG conf keys the DAGs do not take: {unknown} (expected some of {sorted(known)})"


# --------------------------------------------------------------------------- Python imports in the docs
_PY_FENCE = re.compile(r"^```(?:python|py)\s*$(.*?)^```", re.DOTALL | re.MULTILINE)


def python_imports(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, statement)`` of each ``import`` / ``from … import`` statement of the document's
    Python code blocks. A block that is not valid Python as a whole (a fragment with ``…``) gives
    the import statements found line by line, parenthesised continuations joined."""
    for m in _PY_FENCE.finditer(text):
        first = text.count("\n", 0, m.start(1)) + 1
        code = m.group(1).lstrip("\n")
        first += len(m.group(1)) - len(m.group(1).lstrip("\n")) - 1
        try:
            tree = ast.parse(code)
        except SyntaxError:
            lines = code.split("\n")
            i = 0
            while i < len(lines):
                line, at = lines[i], i
                if re.match(r"\s*(import|from)\s+\w", line):
                    while line.count("(") > line.count(")") and i + 1 < len(lines):
                        i += 1
                        line += "\n" + lines[i]
                    yield first + at + 1, line.strip()
                i += 1
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                yield first + node.lineno, ast.unparse(node)


def import_problems(text: str, source: str) -> list[str]:
    problems = []
    for line, statement in python_imports(text):
        try:
            exec(compile(statement, f"{source}:{line}", "exec"), {})
        except Exception as exc:  # any failure of the import is the finding
            problems.append(f"{source}:{line}: `{statement}`: {type(exc).__name__}: {exc}")
    return problems


def test_every_import_in_the_docs_python_blocks_runs() -> None:
    problems = [p for doc in DOCS for p in import_problems(doc.read_text(), _rel(doc))]
    assert not problems, "imports shown in the docs that do not run:\n" + "\n".join(problems)
    assert sum(1 for doc in DOCS for _ in python_imports(doc.read_text())) >= 5  # the checker sees them


def test_the_import_checker_sees_a_wrong_import() -> None:
    doc = "```python\nfrom rlops.agent_kit import Tracer\nclient.decide(state, …)\n```\n"
    assert [line for line, _ in python_imports("text\n\n" + doc)] == [4]
    problems = import_problems(doc, "x.md")
    assert len(problems) == 1 and "x.md:2: `from rlops.agent_kit import Tracer`: ModuleNotFoundError" in problems[0]
    ok = "```python\nfrom rlops.agent_sdk import (\n    Episode,\n    Tracer,\n)\n```\n"
    assert import_problems(ok, "x.md") == []


# --------------------------------------------------------------------------- the site and its generated pages
def test_the_readme_stays_short() -> None:
    lines = len((REPO_ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move reference material to a page under docs/"
    )


def _load_tool(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_cli_and_params_references_are_current() -> None:
    """docs/reference/cli.md and params.md are what tools/docs_reference.py writes from the parser
    and the params model now; a new flag or params key is documented by rerunning it."""
    tool = _load_tool(REPO_ROOT / "tools" / "docs_reference.py")
    stale = [str(p.relative_to(REPO_ROOT)) for p in tool.stale_pages()]
    assert not stale, f"{stale} differ from the code: run `python tools/docs_reference.py` and commit the pages"


def test_the_references_name_every_command_and_params_key(parser: argparse.ArgumentParser) -> None:
    from rlops.common.params_model import Params

    cli = (REPO_ROOT / "docs" / "reference" / "cli.md").read_text()
    assert all(f"`rlops {' '.join(path)}`" in cli for path, _ in _leaf_commands(parser))
    assert "`--fail-on-drift`" in cli and "`--reward-fn`" in cli
    params = (REPO_ROOT / "docs" / "reference" / "params.md").read_text()
    assert all(f"`{block}:`" in params for block in ("storage", "ppo", "train", "promotion.webhook", "stack"))
    ppo_block = Params.model_fields["ppo"].annotation
    assert isinstance(ppo_block, type) and all(f"| `{key}` |" in params for key in ppo_block.model_fields)


def test_the_benchmark_table_is_generated_from_the_recorded_results() -> None:
    tool = _load_tool(REPO_ROOT / "bench" / "results_table.py")
    page = tool.PAGE.read_text()
    runs = tool.load_runs()
    assert tool.render(page, runs) == page, "docs/benchmarks.md is stale: run `python bench/results_table.py`"
    assert len({r.bench for r in runs}) >= 15 and all(r.record["load_average"] or r.record["load_note"] for r in runs)


def test_the_benchmark_table_shows_the_latest_run_of_each_command(tmp_path: Path) -> None:
    tool = _load_tool(REPO_ROOT / "bench" / "results_table.py")

    def result(bench: str, host: str, runs: list[dict[str, Any]]) -> None:
        doc = {"bench": bench, "host_class": host, "host": "2 cores", "runs": runs}
        (tmp_path / f"{bench}.{host}.json").write_text(json.dumps(doc))

    def run(date: str, ratio: str, command: str = "bench/x.py") -> dict[str, Any]:
        fields = dict.fromkeys(("what", "rlops", "peer", "bar"), "-")
        return {**fields, "date": date, "commit": "abc", "command": command, "ratio": ratio, "bar_met": True,
                "figures": {}, "load_average": [[0.5, 1.0]]}  # fmt: skip

    result("x", "old-host", [run("2026-12-01T00:00:00+00:00", "11×"), run("2026-12-03T00:00:00+00:00", "33×")])
    other = run("2026-12-02T00:00:00+00:00", "7×", "bench/x.py --y")
    result("x", "new-host", [run("2026-12-02T00:00:00+00:00", "22×"), other])
    runs = tool.load_runs(tmp_path)
    table = tool.current_table(runs)
    assert "33×" in table and "7×" in table and "11×" not in table and "22×" not in table
    assert "| `bench/results/x.old-host.json` | 2 | 2026-12-01 → 2026-12-03 | 2 of 2 |" in tool.history_table(runs)
    (tmp_path / "x.new-host.json").rename(tmp_path / "x.json")
    with pytest.raises(tool.ResultsError, match="named <bench>.<host_class>.json"):
        tool.load_runs(tmp_path)


def test_every_page_of_the_docs_is_in_the_site_nav() -> None:
    """Every docs/**/*.md is reachable from the site's navigation (mkdocs.yml), and every nav entry exists."""
    config = yaml.load((REPO_ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def entries(nav: Any) -> Iterator[str]:
        for item in nav:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from entries(value) if isinstance(value, list) else [value]

    in_nav = set(entries(config["nav"]))
    pages = {str(p.relative_to(REPO_ROOT / "docs")) for p in (REPO_ROOT / "docs").rglob("*.md")}
    generated = {"docker.md"}  # tools/mkdocs_hooks.py adds docker/README.md as this page
    assert pages - in_nav == set(), f"pages missing from the nav of mkdocs.yml: {sorted(pages - in_nav)}"
    assert in_nav - pages - generated == set(), f"nav entries with no page: {sorted(in_nav - pages - generated)}"


def test_the_package_map_names_every_package_of_rlops() -> None:
    """The concepts page's package map lists every sub-package of ``rlops`` (and every stage of
    ``pipeline_steps``), so a newcomer finds each part, and names no package that is gone."""
    page = (REPO_ROOT / "docs" / "concepts.md").read_text()
    table = page[page.index("## The package map") :]
    packages = [p.parent for p in sorted((REPO_ROOT / "rlops").glob("*/__init__.py"))]
    unlisted = [f"rlops/{p.name}/" for p in packages if f"`rlops/{p.name}/`" not in table]
    assert not unlisted, f"packages missing from the package map of docs/concepts.md: {unlisted}"
    stages = [p.parent.name for p in sorted((REPO_ROOT / "rlops" / "pipeline_steps").glob("*/__init__.py"))]
    assert [s for s in stages if f"`{s}/`" not in table] == []
    named = set(re.findall(r"`rlops/(\w+)/`", table))
    assert named <= {p.name for p in packages}, f"the package map names packages that are gone: {named}"


def test_the_site_shows_a_pipe_in_a_table_code_span_as_github_does() -> None:
    hooks = _load_tool(REPO_ROOT / "tools" / "mkdocs_hooks.py")
    text = "| `a\\|b` | x \\| y |\n`c\\|d`\n```\n| `e\\|f` |\n```"
    assert hooks.unescape_table_code(text) == "| `a|b` | x \\| y |\n`c\\|d`\n```\n| `e\\|f` |\n```"


def test_the_cli_guide_tree_names_every_command(parser: argparse.ArgumentParser) -> None:
    tree = CLI_GUIDE.read_text().split("```")[1]
    nouns = re.findall(r"[├└]── ([a-z-]+)", tree)
    assert sorted(nouns) == sorted(_subparsers(parser)), "the command tree of docs/cli.md differs from the parser"


def test_the_readme_opens_with_the_two_commands_and_ci_runs_its_test_command() -> None:
    """The README's first lines are the command that sets up and runs the main job and the one that
    runs the tests; CI (``.ci/run``) runs exactly that test command."""
    readme = (REPO_ROOT / "README.md").read_text()
    first_block = _FENCE.search(readme)
    assert first_block and readme[: first_block.start()].count("\n") <= 3, "the README opens with its two commands"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).strip().split("\n")]
    assert commands == ["make demo", "make test"]
    ci_lines = [line.strip() for line in (REPO_ROOT / ".ci" / "run").read_text().split("\n")]
    assert commands[1] in ci_lines
