"""Where each params value comes from, and errors that point at the file and line of a bad key.

A :class:`ParamsSource` is one params file as read (its document and the line of every key); the
loader in :mod:`rlops.common.config` merges the project's and the pack's and validates the result
with :func:`validate_document`, which turns pydantic's errors into one :class:`ParamsError`:
each problem with the file and line it comes from and, for an unknown key, the closest valid name.
"""

from __future__ import annotations

import copy
import difflib
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISDIR, S_ISREG
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rlops.common.errors import UserError
from rlops.common.params_model import Params
from rlops.common.redact import redact

KeyPath = tuple[str, ...]
DEFAULT = "default"


class ConfigError(UserError):
    """A params file that cannot be read, or holds a bad key or value (exit code 2)."""


@dataclass(frozen=True)
class ParamsProblem:
    """One bad key or value of a params document."""

    key: str
    """Dotted key path, e.g. ``capture.windw``."""
    message: str
    file: str | None = None
    line: int | None = None
    suggestion: str | None = None
    """The closest valid key name, for an unknown key."""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else f"{self.file}: " if self.file else ""
        hint = f"; did you mean '{self.suggestion}'?" if self.suggestion else ""
        return f"{where}{self.key}: {self.message}{hint}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "message": self.message,
            "file": self.file,
            "line": self.line,
            "suggestion": self.suggestion,
        }


class ParamsError(ConfigError):
    """The params document breaks the typed model; ``problems`` lists each bad key."""

    def __init__(self, problems: list[ParamsProblem]) -> None:
        self.problems = problems
        n = len(problems)
        super().__init__(
            f"invalid params ({n} problem{'s' if n > 1 else ''}): "
            + "; ".join(str(p) for p in problems)
            + " (see `rlops config show` for every valid key and its meaning)"
        )


@dataclass(frozen=True)
class ParamsSource:
    """One params file: its label (``project params.yaml``, ``pack <name> params.yaml``), path,
    the line of each key path and the document."""

    label: str
    path: Path | None
    lines: dict[KeyPath, int]
    document: dict[str, Any]


def _duplicate_key(root: yaml.Node) -> tuple[str, int, int] | None:
    """``(key, line, first line)`` of the first mapping key given twice in one mapping (1-based
    lines), anywhere in the document; None when there is none. YAML keeps the last value of a
    repeated key without a word, so ``seed`` given twice would silently mean the second."""
    stack, seen_nodes = [root], set()
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias shares its node: walk it once
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                name, line = str(key.value), key.start_mark.line + 1
                if isinstance(key, yaml.ScalarNode) and name in first and key.tag != "tag:yaml.org,2002:merge":
                    return name, line, first[name]
                first.setdefault(name, line)
                stack.append(value)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return None


def _walk_lines(node: yaml.Node, prefix: KeyPath, out: dict[KeyPath, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = prefix + (str(key.value),)
            out[path] = key.start_mark.line + 1
            _walk_lines(value, path, out)


# libyaml when PyYAML was built with it (the pure-Python parser costs ~0.1 s per params file, and
# every task of every DAG run reads two of them)
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _lines_of(path: Path) -> dict[KeyPath, int]:
    """The 1-based line of every mapping key of a YAML file, by key path."""
    out: dict[KeyPath, int] = {}
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=_YAML_LOADER) if path.is_file() else None
    except (OSError, ValueError, yaml.YAMLError):
        return out
    if root is not None:
        _walk_lines(root, (), out)
    return out


def _parse(text: str) -> tuple[dict[KeyPath, int], Any]:
    """The key lines and the document of one YAML text, from a single parse."""
    loader = _YAML_LOADER(text)
    try:
        root = loader.get_single_node()
        duplicate = _duplicate_key(root) if root is not None else None
        if duplicate is not None:
            raise DuplicateKeyError(*duplicate)
        doc = loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()
    lines: dict[KeyPath, int] = {}
    if root is not None:
        _walk_lines(root, (), lines)
    return lines, doc


class DuplicateKeyError(ValueError):
    """A mapping key given twice in one params file."""

    def __init__(self, key: str, line: int, first: int) -> None:
        self.line = line
        super().__init__(
            f"key {key!r} is given twice (first at line {first}); keep one — YAML would silently use the last"
        )


# A long-lived process (a Celery worker, the simulated timeline) reads the same params files for
# every task: keep the last parse of each, keyed by the file's identity (mtime, size, inode), so an
# edited file is read again at once.
_PARSED: dict[Path, tuple[tuple[int, int, int], dict[KeyPath, int], dict[str, Any]]] = {}


#: The most values a params document may hold once its YAML aliases are expanded: a few hundred in
#: practice, while aliases can make a few hundred bytes stand for billions ("billion laughs"), which
#: validating, merging or printing the document would walk.
MAX_VALUES = 100_000


def expands_past(doc: Any, limit: int) -> bool:
    """Whether a loaded YAML ``doc`` holds more than ``limit`` values (keys included), counting a
    shared (aliased) value each time it appears. The loader shares an aliased value rather than
    copying it, so loading a "billion laughs" document is cheap; this walk stops at ``limit``, so
    counting one is too."""
    stack, seen = [doc], 0
    while stack:
        value = stack.pop()
        seen += 1
        if seen > limit:
            return True
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def read_params_file(path: Path, label: str) -> ParamsSource:
    """Read one params file (a mapping) with the line of every key. The source is a fresh copy
    (callers may edit its document)."""
    try:
        stat = path.stat()
        # a FIFO or a device would block the read (or never end): only a regular file is read
        if not S_ISREG(stat.st_mode):
            kind = "a folder" if S_ISDIR(stat.st_mode) else "not a regular file"
            raise ConfigError(f"params file {path} is {kind}; expected a YAML file")
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        cached = _PARSED.get(path)
        if cached is None or cached[0] != stamp:
            text = path.read_text(encoding="utf-8")
            try:
                lines, doc = _parse(text)
            except DuplicateKeyError as exc:
                raise ConfigError(f"params file {path}:{exc.line}: {exc}") from None
            except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of over 4,300 digits
                where = " ".join(str(exc).split())  # PyYAML's message spans lines: one line here
                raise ConfigError(f"params file {path} is not valid YAML: {where}") from exc
            doc = doc or {}
            if not isinstance(doc, dict):
                raise ConfigError(f"params file {path}: expected a mapping of params blocks at the top level")
            if expands_past(doc, MAX_VALUES):
                raise ConfigError(
                    f"params file {path} expands to more than {MAX_VALUES:,} values (YAML aliases repeating "
                    "a list?); expected a params document"
                )
            cached = _PARSED[path] = (stamp, lines, doc)
    except FileNotFoundError as exc:
        hint = "set RLOPS_PARAMS or run from the repository root" if label.startswith("project") else f"fix {label}"
        raise ConfigError(f"params file {path} not found; {hint}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"params file {path} is not UTF-8 text (byte {exc.start}); expected a YAML file") from None
    except OSError as exc:
        raise ConfigError(f"params file {path} cannot be read ({exc.strerror or exc})") from None
    return ParamsSource(label, path, dict(cached[1]), copy.deepcopy(cached[2]))


def _model_at(path: tuple[Any, ...]) -> type[BaseModel] | None:
    """The block model that holds the key at ``path`` (None when it is not a model, e.g. a dict value)."""
    model: Any = Params
    for part in path:
        if isinstance(model, type) and issubclass(model, BaseModel):
            info = model.model_fields.get(str(part))
            if info is None:
                return None
            model = info.annotation
        elif typing.get_origin(model) is dict:  # dict[str, Block]: ``part`` is the entry's name
            model = typing.get_args(model)[1]
        else:
            return None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _locate(path: KeyPath, sources: list[ParamsSource]) -> tuple[str | None, int | None]:
    """The file and line that set ``path``: the last source whose document holds it (with the line
    of the deepest key it has), else the nearest parent key found in any file."""
    for src in reversed(sources):
        if _has(src.document, path):
            line = next((src.lines[path[:d]] for d in range(len(path), 0, -1) if path[:d] in src.lines), None)
            return (str(src.path) if src.path else src.label), line
    for depth in range(len(path), 0, -1):
        prefix = path[:depth]
        for src in reversed(sources):
            if prefix in src.lines:
                return (str(src.path) if src.path else src.label), src.lines[prefix]
    return None, None


def validate_document(doc: dict[str, Any], sources: list[ParamsSource]) -> Params:
    """``doc`` as the typed model, or a :class:`ParamsError` naming each problem's file, line and,
    for an unknown key, the closest valid name."""
    try:
        return Params.model_validate(doc)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            file, line = _locate(loc, sources)
            suggestion = None
            if err["type"] == "extra_forbidden":
                parent = _model_at(err["loc"][:-1])
                names = list(parent.model_fields) if parent is not None else []
                close = difflib.get_close_matches(loc[-1], names, n=1, cutoff=0.6)
                suggestion = close[0] if close else None
                message = "unknown key" + (f" (valid: {', '.join(names)})" if not suggestion and names else "")
            else:
                message = f"{err['msg']} (got {err['input']!r})" if "input" in err else err["msg"]
            # a URI's user:password must not reach the terminal or a log through "got '…'"
            problems.append(ParamsProblem(".".join(loc), redact(message), file, line, suggestion))
        raise ParamsError(problems) from None


def as_params(params: Params | Mapping[str, Any]) -> Params:
    """The typed document from itself or a raw params mapping (validated: a bad key raises :class:`ParamsError`)."""
    return params if isinstance(params, Params) else validate_document(dict(params), [])


def params_block(params: Params | BaseModel | Mapping[str, Any], name: str) -> Any:
    """The typed block ``name`` from the whole typed document, the block itself, or a raw params
    mapping (validated here: a bad key raises :class:`ParamsError`)."""
    if isinstance(params, Params):
        return getattr(params, name)
    if isinstance(params, BaseModel):
        expected = Params.model_fields[name].annotation  # a block's annotation is its model class
        if not isinstance(params, expected):  # type: ignore[arg-type]  # a block's annotation is its model class
            raise TypeError(f"expected the params document or its {name!r} block, got {type(params).__name__}")
        return params
    return getattr(as_params(params), name)


def _leaves(value: Any, prefix: KeyPath) -> Iterator[tuple[KeyPath, Any]]:
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from _leaves(v, prefix + (str(k),))
    else:
        yield prefix, value


@dataclass(frozen=True)
class ResolvedParams:
    """The validated params of one scenario and where each value came from."""

    model: Params
    document: dict[str, Any]
    """The merged document as written (no defaults filled in)."""
    sources: tuple[ParamsSource, ...]
    env: dict[KeyPath, str] = field(default_factory=dict)
    """Key paths set by an environment variable, with the variable's name."""

    def origin(self, path: KeyPath) -> str:
        """``env VAR``, ``<file>:<line>`` or ``default``."""
        if path in self.env:
            return f"env {self.env[path]}"
        for src in reversed(self.sources):
            if _has(src.document, path):
                line = next((src.lines[path[:d]] for d in range(len(path), 0, -1) if path[:d] in src.lines), None)
                return f"{src.path or src.label}" + (f":{line}" if line else "")
        return DEFAULT

    def rows(self) -> list[tuple[str, Any, str]]:
        """``(dotted key, value, origin)`` for every resolved leaf value."""
        return [
            (".".join(path), value, self.origin(path))
            for path, value in _leaves(self.model.model_dump(mode="json"), ())
        ]


def _has(doc: Any, path: KeyPath) -> bool:
    for part in path:
        if not isinstance(doc, dict) or part not in doc:
            return False
        doc = doc[part]
    return True


__all__ = [
    "ConfigError",
    "ParamsError",
    "ParamsProblem",
    "ParamsSource",
    "ResolvedParams",
    "as_params",
    "params_block",
    "read_params_file",
    "validate_document",
]
