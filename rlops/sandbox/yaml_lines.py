"""YAML loading that remembers the line of every mapping key and sequence item.

``load_yaml`` returns plain dicts and lists of the subclasses :class:`LDict` / :class:`LList`
(every alias expanded into its own copy), whose ``line_of(key)`` gives the 1-based source line, so
validation errors can point at the exact line of a scenario file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlops.sandbox.errors import PackError
from rlops.sandbox.pack_files import read_pack_text

#: Nodes a document may hold once every alias is expanded. Aliases share nodes while parsing,
#: but anything that walks the result (validation, a deep copy) pays for the expanded tree: a
#: "billion laughs" file of a few hundred bytes expands to gigabytes.
MAX_YAML_NODES = 100_000


class LDict(dict[Any, Any]):
    """A dict that knows the source line of each key (and of itself)."""

    line: int | None = None
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int | None:
        return self.key_lines.get(key, self.line)


class LList(list[Any]):
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


# libyaml's parser when PyYAML has it: a pack is loaded by every step of every DAG run, and the
# pure-Python parser is most of that cost. Nodes, marks and errors are the same.
class _LineLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]  # base chosen at runtime
    pass


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> LDict:
    out = LDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    loader.flatten_mapping(node)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out.key_lines:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
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


def _expanded_size(root: yaml.Node) -> int | None:
    """How many nodes the document has with every alias expanded, or None for a recursive
    alias. Computed once per distinct node (memoised), iteratively so depth costs no stack."""
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            on_path.discard(key)
            size[key] = min(1 + sum(size[id(c)] for c in children), MAX_YAML_NODES + 1)
            continue
        if key in size:
            continue
        if key in on_path:
            return None
        on_path.add(key)
        stack.append((node, True))
        for c in children:
            if id(c) in on_path:
                return None
            if id(c) not in size:
                stack.append((c, False))
    return size[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml(path: Path, root: Path | None = None) -> Any:
    """Parse ``path`` (a file of the pack at ``root``, when given: see
    :func:`rlops.sandbox.pack_files.read_pack_text`); a syntax error becomes a :class:`PackError` with
    its line, and so does a document whose aliases expand past :data:`MAX_YAML_NODES` nodes."""
    text = read_pack_text(path, root)
    loader: _LineLoader | None = None
    try:
        loader = _LineLoader(text)  # the reader already rejects unprintable characters
        node = loader.get_single_node()
        if node is None:
            return None
        size = _expanded_size(node)
        if size is None:
            raise PackError(
                str(path),
                node.start_mark.line + 1,
                "",
                "invalid YAML: an alias refers to a node that contains it (recursive alias)",
            )
        if size > MAX_YAML_NODES:
            raise PackError(
                str(path),
                None,
                "",
                f"the YAML document expands to more than {MAX_YAML_NODES} "
                "values once its aliases (*name) are expanded; alias "
                "expansion is capped",
            )
        # An alias is the node it names, so its value would be one object in several places of the
        # tree: code that edits the document in place (a stress perturbation scaling every action's
        # latency, a calibration overlay) would then edit every place once per visit. Each place
        # gets its own copy, with its lines.
        return with_lines(loader.construct_document(node))
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise PackError(
            str(path), line, "", f"invalid YAML: unacceptable character #x{exc.character:04x} ({exc.reason})"
        ) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        mark_line = mark.line + 1 if mark is not None else None
        problem = str(exc.problem or exc)
        if "nesting depth" in problem:  # libyaml's own depth limit, where Python would recurse
            problem = "the document is nested too deeply"
        raise PackError(str(path), mark_line, "", f"invalid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise PackError(str(path), None, "", f"invalid YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise PackError(str(path), None, "", "invalid YAML: the document is nested too deeply") from None
    except ValueError as exc:  # a scalar the constructor cannot convert: a 5,000-digit int, a 13th month
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PackError(str(path), None, "", f"invalid YAML: a value cannot be read ({first})") from None
    finally:
        if loader is not None:
            loader.dispose()
