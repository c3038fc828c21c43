"""The checks of a pack that run no code of the pack and need no torch: its files (inside the
pack, regular, bounded, UTF-8), ``scenario.yaml`` against the schema, ``rules.yaml`` and
``params.yaml``. :func:`rlops.sandbox.isolate.validate_isolated` runs them in the calling process, so
that most broken packs are reported at once, without starting a child interpreter."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from rlops.sandbox.errors import PackError
from rlops.sandbox.pack_files import check_pack_file, read_pack_text
from rlops.sandbox.spec import ScenarioSpec, parse_scenario
from rlops.sandbox.spec_fields import _line
from rlops.sandbox.yaml_lines import load_yaml

REWARD_FILE = re.compile(r"^reward_(v\w+)\.py$")


def present(path: Path) -> bool:
    """``path`` exists, or is a link (a dangling or outside link is reported by the read)."""
    return path.exists() or path.is_symlink()


def load_rules(path: Path, root: Path | None) -> dict[str, Any]:
    """``rules.yaml``: a non-empty mapping ``rules:`` of rule id → ``{title, text}``."""
    if not present(path):
        raise PackError(str(path), None, "", "missing rules.yaml (the rule registry reward components cite)")
    doc = load_yaml(path, root)
    rules = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(rules, dict) or not rules:
        raise PackError(
            str(path), getattr(doc, "line", None), "rules", "expected a mapping 'rules:' of rule id → {title, text}"
        )
    for rid, body in rules.items():
        if not isinstance(body, dict) or "title" not in body:
            raise PackError(str(path), _line(rules, rid), f"rules.{rid}", "each rule needs at least a 'title'")
    return dict(rules)


def load_params(root: Path) -> dict[str, Any]:
    """``params.yaml`` (optional): a mapping of parameter overrides, as parsed (an
    :class:`~rlops.sandbox.yaml_lines.LDict` that knows each key's line). The one reader of a
    pack's params: the sandbox and :func:`rlops.common.config.resolve_params` both call it."""
    path = root / "params.yaml"
    if not present(path):
        return {}
    params = load_yaml(path, root) or {}
    if not isinstance(params, dict):
        raise PackError(str(path), None, "", "expected a mapping of parameter overrides")
    return params


def reward_files(root: Path) -> list[Path]:
    files = sorted(p for p in root.iterdir() if REWARD_FILE.match(p.name))
    if not files:
        raise PackError(str(root), None, "", "no reward function: expected reward_v<N>.py files in the pack")
    return files


def check_reward_syntax(path: Path, root: Path) -> None:
    """A reward module is a file of the pack whose source parses as Python: compiled, never run,
    so a parse of the DAG folder can refuse a broken module without running pack code."""
    source = read_pack_text(path, root)
    try:
        compile(source, str(path), "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise PackError(str(path), exc.lineno, "", f"syntax error in reward module: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        # CPython's compiler gives up on deep nesting with one of these instead of a SyntaxError.
        raise PackError(str(path), None, "", "the reward module is nested too deeply to compile") from None


def scenario_file(root: Path) -> Path:
    """``root/scenario.yaml``, or a :class:`PackError` when the folder or the file is missing."""
    if not root.is_dir():
        raise PackError(str(root), None, "", "scenario pack folder not found")
    scen_file = root / "scenario.yaml"
    if not present(scen_file):
        raise PackError(str(scen_file), None, "", "missing scenario.yaml in the pack")
    return scen_file


def precheck_pack(path: str | Path) -> ScenarioSpec:
    """Everything of the pack at ``path`` that can be checked without running it; the parsed
    scenario (expressions not yet compiled) or a :class:`PackError`."""
    if not str(path).strip():
        raise PackError("''", None, "", "expected the path of a pack folder, got an empty path")
    root = Path(path)
    scen_file = scenario_file(root)
    try:
        spec = parse_scenario(load_yaml(scen_file, root), str(scen_file))
    except RecursionError:
        raise PackError(str(scen_file), None, "", "the scenario is nested too deeply") from None
    load_rules(root / "rules.yaml", root)
    for p in reward_files(root):
        check_pack_file(p, root)
    load_params(root)
    if present(root / "oracle.py"):
        check_pack_file(root / "oracle.py", root)
    return spec
