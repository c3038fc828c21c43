"""YAML loading that remembers the line of every mapping key and sequence item.

``load_yaml`` returns plain dicts and lists of the subclasses :class:`LDict` / :class:`LList`,
whose ``line_of(key)`` gives the 1-based source line, so validation errors can point at the exact
line of a scenario file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sandbox.errors import PackError


class LDict(dict):
    """A dict that knows the source line of each key (and of itself)."""

    line: int | None = None
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)


class LList(list):
    """A list that knows the source line of each item (and of itself)."""

    line: int | None = None
    item_lines: list[int]

    def line_of(self, index: int) -> int | None:
        return self.item_lines[index] if 0 <= index < len(self.item_lines) else self.line


def with_lines(obj: Any) -> Any:
    """``obj`` with every plain dict and list turned into :class:`LDict` / :class:`LList` (keeping
    the lines they already have), so a document built in code — a calibration overlay on a parsed
    scenario — validates like parsed YAML, its errors just carry no line."""
    if isinstance(obj, dict):
        d = LDict((k, with_lines(v)) for k, v in obj.items())
        d.line, d.key_lines = getattr(obj, "line", None), dict(getattr(obj, "key_lines", {}))
        return d
    if isinstance(obj, list):
        lst = LList(with_lines(v) for v in obj)
        lst.line, lst.item_lines = getattr(obj, "line", None), list(getattr(obj, "item_lines", []))
        return lst
    return obj


class _LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LDict:
    out = LDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out.key_lines:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> LList:
    out = LList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


def load_yaml(path: Path) -> Any:
    """Parse ``path``; a syntax error becomes a :class:`PackError` with its line."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise PackError(str(path), None, "", f"cannot read file: {exc.strerror}") from exc
    try:
        return yaml.load(text, Loader=_LineLoader)  # noqa: S506 - safe loader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PackError(str(path), line, "", f"invalid YAML: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise PackError(str(path), None, "", f"invalid YAML: {exc}") from exc
