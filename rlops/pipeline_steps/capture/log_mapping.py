"""How a decision log's columns become trace columns (``rlops import``): the ``--columns`` pairs and
the ``--mapping`` YAML file, read and checked against the pack and its trace contract before a row
of the log is read. Whatever the mapping names that cannot be meant — a trace column the contract
does not have, a column mapped twice to different log columns, a constant that is no value of its
column's type, an action or a mask position the pack does not have — is one :class:`UserError`
naming the file or option, the entry and what was expected.
"""

from __future__ import annotations

import difflib
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.common.errors import UserError
from rlops.data_contracts.schema import STATE_PREFIX, ColumnSpec, Contract

if TYPE_CHECKING:
    from rlops.pipeline_steps.capture.request import ImportRequest
    from rlops.sandbox.pack import Pack

PROPENSITY = "propensity"
MAPPING_KEYS = ("columns", "actions", "constants", "mask_actions")
#: Trace columns the import sets itself: a mapping for them would be overwritten without a word.
SET_BY_IMPORT = ("scenario",)


@dataclass(frozen=True)
class LogMapping:
    """How the log's columns become trace columns: ``columns`` maps a trace column (or a state
    column ``state.<path>``, or ``propensity``) to the log's column; ``actions`` maps logged
    action values to the pack's action names; ``constants`` gives a trace column one value."""

    columns: dict[str, str]
    actions: dict[str, str]
    constants: dict[str, Any]
    mask_actions: tuple[str, ...] = ()
    """The log's action at each position of its ``action_mask`` (its system's order; after
    ``actions``): masks are rewritten in the pack's order. Empty: the masks are in the pack's order."""

    @classmethod
    def of(cls, request: ImportRequest, pack: Pack, contract: Contract, read_text: Callable[[str], str]) -> LogMapping:
        doc = _document(request.mapping, read_text) if request.mapping else {}
        where = f"import mapping {shown(request.mapping or '')}"
        columns = _names(doc.get("columns"), f"{where}: columns")
        actions = _names(doc.get("actions"), f"{where}: actions")
        constants = doc.get("constants") or {}
        if not isinstance(constants, Mapping):
            raise UserError(f"{where}: constants is {_kind(constants)}; expected {{TRACE column: value for every row}}")
        for trace, log in _pairs(request.columns or "").items():
            if columns.get(trace, log) != log:
                raise UserError(
                    f"import: trace column {trace!r} is mapped twice, to {columns[trace]!r} in {where} and to "
                    f"{log!r} by --columns; keep one"
                )
            columns[trace] = log
        fields = {c.name.removeprefix(STATE_PREFIX) for c in contract.columns if c.name.startswith(STATE_PREFIX)}
        named = {_trace_name(k, fields): v for k, v in columns.items()}
        fixed = {_trace_name(str(k), fields): v for k, v in constants.items()}
        for trace in [*named, *fixed]:
            _check_trace_column(trace, contract, "import --columns or mapping columns" if trace in named else where)
        both = sorted(set(named) & set(fixed))
        if both:
            raise UserError(f"{where}: {both} have both a log column and a constant; keep one")
        for trace, value in fixed.items():
            problem = _constant_problem(next((c for c in contract.columns if c.name == trace), None), value)
            if problem:
                raise UserError(f"{where}: constants: {trace} is {value!r}; {problem}")
        names = list(pack.scenario.action_names)
        unknown = sorted(set(actions.values()) - set(names))
        if unknown:
            raise UserError(
                f"{where}: actions {unknown} are not actions of {pack.name} (expected one of {names[:30]}"
                f"{' …' if len(names) > 30 else ''})"
            )
        return cls(named, actions, fixed, _mask_actions(doc.get("mask_actions"), actions, names, where))


def _document(path: str, read_text: Callable[[str], str]) -> dict[str, Any]:
    """The mapping file's document: a YAML mapping with no key but :data:`MAPPING_KEYS`."""
    import yaml

    check_local_file(path, "import mapping")
    where = f"import mapping {shown(path)}"
    try:
        doc = yaml.safe_load(read_text(path))
    except UnicodeDecodeError as exc:
        raise UserError(f"{where}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        what = getattr(exc, "problem", None) or type(exc).__name__
        raise UserError(f"{where}: not valid YAML{at} ({what})") from None
    doc = doc or {}
    if not isinstance(doc, dict) or not set(doc) <= set(MAPPING_KEYS):
        got = sorted(map(str, doc)) if isinstance(doc, dict) else _kind(doc)
        raise UserError(f"{where}: expected a YAML mapping with the keys {', '.join(MAPPING_KEYS)}, got {got}")
    return doc


def _names(value: Any, where: str) -> dict[str, str]:
    """A ``{name: name}`` block (columns, actions): keys scalars (a logged action may be a
    number), values non-empty text."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UserError(f"{where} is {_kind(value)}; expected a mapping {{name: name}}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(k, (Mapping, list)) or k is None or not isinstance(v, (str, int)) or isinstance(v, bool):
            raise UserError(f"{where}: {k!r}: {v!r} is no pair of names; expected {{name: name}}")
        if not str(v).strip():
            raise UserError(f"{where}: {k!r} maps to an empty name")
        out[str(k)] = str(v)
    return out


def _pairs(text: str) -> dict[str, str]:
    """``--columns``' TRACE=LOG pairs; a trace column named twice is an error, not the last one winning."""
    out: dict[str, str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        trace, sep, log = (s.strip() for s in pair.partition("="))
        if not sep or not trace or not log:
            raise UserError(f"import --columns: {pair!r} is not TRACE=LOG (e.g. episode_id=session)")
        if trace in out and out[trace] != log:
            raise UserError(f"import --columns: {trace!r} is given twice ({out[trace]!r} and {log!r}); keep one")
        out[trace] = log
    return out


def _trace_name(name: str, fields: set[str]) -> str:
    """A state field named with or without ``state.`` as its trace column."""
    bare = name.removeprefix(STATE_PREFIX)
    return STATE_PREFIX + bare if bare in fields else name


def _check_trace_column(name: str, contract: Contract, where: str) -> None:
    if name in SET_BY_IMPORT:
        raise UserError(f"{where}: {name!r} is set by the import (the pack's name); leave it out")
    if name in contract or name == PROPENSITY:
        return
    known = [*contract.column_names, PROPENSITY]
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UserError(
        f"{where}: {name!r} is no trace column, state field or {PROPENSITY}; {hint}expected one of "
        f"the trace columns (docs/trace-store.md: episode_id, step, ts, action, reward_total …), a state field "
        f"of the pack (with or without state.) or {PROPENSITY}"
    )


def _constant_problem(spec: ColumnSpec | None, value: Any) -> str | None:
    """Why ``value`` cannot be the column's value on every row (None: it can)."""
    if value is None or isinstance(value, (Mapping, list)):
        return "expected one plain value (text, a number, true/false) for every row"
    kind = spec.kind if spec is not None else "float"  # only propensity has no spec: a probability
    if kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return f"expected a number ({spec.name if spec else PROPENSITY} is numeric)"
        if kind == "int" and not float(value).is_integer():
            return "expected a whole number"
    elif kind == "bool" and not isinstance(value, bool):
        return "expected true or false"
    elif kind in ("str", "mask", "timestamp") and not isinstance(value, str):
        return "expected text"
    return None


def _mask_actions(value: Any, actions: dict[str, str], names: list[str], where: str) -> tuple[str, ...]:
    """``mask_actions`` (after ``actions``), each once. A name that is no pack action is a log action
    the pack does not model (its position is dropped) — unless some pack action then has no position,
    when the name is more likely a misspelt one, and it is an error."""
    if value is None:
        return ()
    if not isinstance(value, list) or any(isinstance(a, (Mapping, list)) or a is None for a in value):
        raise UserError(f"{where}: mask_actions is {_kind(value)}; expected a list of action names")
    given = [str(a) for a in value]
    order = [actions.get(a, a) for a in given]
    unknown = [a for a, o in zip(given, order, strict=True) if o not in names]
    unplaced = [n for n in names if n not in order]
    if unknown and unplaced:
        shown = unplaced[:5] + (["…"] if len(unplaced) > 5 else [])
        raise UserError(
            f"{where}: mask_actions {unknown} are no actions of the pack, nor mapped to one by actions, while the "
            f"pack's {shown} have no position: each position of the log's mask names the pack action it stands "
            "for (a log action the pack does not model may be named as it is, once every pack action has its "
            "position)"
        )
    twice = sorted({a for a in order if order.count(a) > 1})
    if twice:
        raise UserError(f"{where}: mask_actions names {twice} at more than one position; one position per action")
    return tuple(given)


def check_local_file(path: str, what: str) -> None:
    """A local path (or ``file://`` URI) that is no readable regular file is a :class:`UserError`
    saying which of missing, a folder, a pipe or a device it is; a FIFO is never opened (it could
    block). Other URIs are left to the storage layer."""
    if "://" in path and not path.startswith("file://"):
        return
    local = path.removeprefix("file://")
    try:
        info = os.stat(local)
    except FileNotFoundError:
        raise UserError(f"{what} {shown(path)}: no such file") from None
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a file on the way
        why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        raise UserError(f"{what} {shown(path)}: cannot read it ({why})") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"{what} {shown(path)}: a folder; expected a file")
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"{what} {shown(path)}: not a regular file (a pipe or a device); expected a file")


def shown(path: str) -> str:
    """A path as an error shows it: control characters escaped, at most 200 characters."""
    text = path if path.isprintable() else repr(path)
    return text if len(text) <= 200 else text[:200] + "…"


def _kind(value: Any) -> str:
    return f"a {type(value).__name__} ({str(value)[:60]!r})"


__all__ = ["PROPENSITY", "LogMapping", "check_local_file", "shown"]
