"""A step's request: one frozen dataclass whose fields are the step's options, each declared once.

A field made with :func:`option` carries its help text and its bounds; from the class come

- the command's flags (:func:`add_arguments`, :func:`from_args`; a command that runs one of several
  requests, picked by the required flag given: :func:`add_alternatives`, :func:`from_alternatives`),
- the DAG's typed Airflow ``Param`` s (:func:`dag_params`) and the re-check of a run's conf
  (:func:`conf_problems`, :func:`from_conf`): Airflow checks the types of a triggered run, the
  step's own check also catches what a caller of the task function passes,
- the options that decide whether a retrain would repeat itself (:func:`digest_options`).

So an option is one edit: a field on the request. A field whose default is ``None`` means "params
decide" (its help says which key); a DAG may give it the resolved value as the ``Param`` default.
A ``required`` option has no default: the command's flag must be given, and a caller builds the
request with it (declare it before the options that have a default).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import types
import typing
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from rlops.common.errors import UserError

if TYPE_CHECKING:
    from pydantic import BaseModel

R = TypeVar("R")
B = TypeVar("B", bound="BaseModel")

_JSON_TYPE = {bool: "boolean", int: "integer", float: "number", str: "string"}


@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a request, as declared by :func:`option` and the field's annotation."""

    name: str
    kind: type  # bool, int, float or str
    nullable: bool
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    pattern: str | None = None
    max_length: int | None = None
    cli: bool = True
    dag: bool = True
    digest: bool = True
    required: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def expected(self, unset: str = "null") -> str:
        """What a valid value is, in words (``unset``: how a DAG conf or a command leaves it to params)."""
        if self.choices:
            words = ", ".join(repr(c) for c in self.choices)
        elif self.pattern:
            words = f"a string matching {self.pattern}"
        elif self.max_length is not None:
            words = f"a text of at most {self.max_length} characters"
        else:
            words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[self.kind]
            if self.minimum is not None:
                words += f" >= {self.minimum:g}"
            if self.maximum is not None:
                words += f"{',' if self.minimum is not None else ''} at most {self.maximum:.0f}"
        return words + (f" (or {unset}: params)" if self.nullable else "")

    def problem(self, value: Any, label: str | None = None) -> str | None:
        """Why ``value`` is not a valid value of this option (None: it is); ``label`` names it
        (default: its name, as in a DAG run's conf)."""
        unset = "null" if label is None else "leave it out"
        label = label or self.name
        if value is None:
            return None if self.nullable else f"{label} None: expected {self.expected(unset)}"
        ok = isinstance(value, self.kind) and not (self.kind is not bool and isinstance(value, bool))
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        ok = ok and (self.choices is None or value in self.choices)
        ok = ok and (self.minimum is None or value >= self.minimum)
        ok = ok and (self.maximum is None or value <= self.maximum)
        ok = ok and (self.pattern is None or re.fullmatch(self.pattern, value) is not None)
        ok = ok and (self.max_length is None or len(value) <= self.max_length)
        shown = f"{value[:80]!r}..." if isinstance(value, str) and len(value) > 80 else repr(value)
        return None if ok else f"{label} {shown}: expected {self.expected(unset)}"


def option(
    default: Any = None,
    *,
    help: str,  # noqa: A002 - argparse's word for it
    choices: Sequence[Any] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    pattern: str | None = None,
    max_length: int | None = None,
    cli: bool = True,
    dag: bool = True,
    digest: bool = True,
    required: bool = False,
) -> Any:
    """A request field: ``cli``/``dag`` say whether the command and the DAG offer it, ``digest``
    whether a change of it makes a retrain train again, ``required`` that it has no default (the
    command's flag must be given)."""
    meta = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "minimum": minimum,
        "maximum": maximum,
        "pattern": pattern,
        "max_length": max_length,
        "cli": cli,
        "dag": dag,
        "digest": digest,
        "required": required,
    }
    if required:
        if default is not None:
            raise TypeError("a required option has no default")
        return dataclasses.field(metadata={"rlops_option": meta})
    return dataclasses.field(default=default, metadata={"rlops_option": meta})


def options(request: type) -> list[Option]:
    """The options of a request class, in field order."""
    hints = typing.get_type_hints(request)
    out = []
    for f in dataclasses.fields(request):
        meta = f.metadata.get("rlops_option")
        if meta is None:
            raise TypeError(f"{request.__name__}.{f.name}: declare it with rlops.common.step_request.option()")
        kind, nullable = _kind(hints[f.name], f"{request.__name__}.{f.name}")
        default = None if f.default is dataclasses.MISSING else f.default
        out.append(Option(f.name, kind, nullable, default, **meta))
    return out


def _kind(hint: Any, where: str) -> tuple[type, bool]:
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) == 1 and kinds[0] in _JSON_TYPE:
            return kinds[0], type(None) in args
    elif hint in _JSON_TYPE:
        return hint, False
    raise TypeError(f"{where}: an option is a bool, int, float or str, optionally | None; got {hint}")


# --------------------------------------------------------------------------- the command line
def add_arguments(parser: argparse.ArgumentParser, request: type, skip: Sequence[str] = ()) -> None:
    """One flag per option of ``request`` the command offers (``skip``: those it declares itself,
    shared with other commands)."""
    for o in options(request):
        if o.cli and o.name not in skip:
            _add_flag(parser, o, o.required)


def _add_flag(container: argparse._ActionsContainer, o: Option, required: bool) -> None:
    if o.kind is bool:
        container.add_argument(
            o.flag, action=argparse.BooleanOptionalAction, default=o.default, required=required, help=o.help
        )
    else:
        container.add_argument(
            o.flag,
            type=o.kind,
            choices=list(o.choices) if o.choices else None,
            default=o.default,
            required=required,
            help=o.help,
        )


def _picking_option(request: type) -> Option:
    """The one required option that picks ``request`` among a command's alternatives."""
    required = [o for o in options(request) if o.required and o.cli]
    if len(required) != 1:
        raise TypeError(f"{request.__name__}: an alternative request has exactly one required option")
    return required[0]


def add_alternatives(parser: argparse.ArgumentParser, *requests: type) -> None:
    """The flags of a command that runs one of several requests, the one whose required option is
    given: those required flags form a required mutually exclusive group (exactly one must be
    given), every other option is a flag as usual. An option name belongs to one request only."""
    names = [o.name for r in requests for o in options(r) if o.cli]
    if len(names) != len(set(names)):
        raise TypeError(f"{', '.join(r.__name__ for r in requests)}: an option name appears in two alternatives")
    group = parser.add_mutually_exclusive_group(required=True)
    for request in requests:  # side by side, so that the usage line shows them as (--a A | --b B)
        _add_flag(group, _picking_option(request), required=False)  # the group requires one
    for request in requests:
        add_arguments(parser, request, skip=(_picking_option(request).name,))


def from_alternatives(args: argparse.Namespace, *requests: type) -> Any:
    """The request of the alternative whose required flag was given (see :func:`add_alternatives`);
    a flag of another alternative given too is a :class:`UserError` naming both."""
    picked = next((r for r in requests if getattr(args, _picking_option(r).name, None) is not None), None)
    if picked is None:
        flags = " or ".join(_picking_option(r).flag for r in requests)
        raise UserError(f"give one of {flags}")
    by = _picking_option(picked).flag
    for request in requests:
        if request is picked:
            continue
        for o in options(request):
            if o.cli and hasattr(args, o.name) and getattr(args, o.name) != o.default:
                raise UserError(f"{o.flag} goes with {_picking_option(request).flag}, not with {by}")
    return from_args(picked, args)


def from_args(request: type[R], args: argparse.Namespace) -> R:
    """The request a command's parsed arguments make (options it does not offer keep their
    default), each value checked against the option's bounds as a DAG run's conf is."""
    offered = [o for o in options(request) if o.cli and hasattr(args, o.name)]
    problems = [p for o in offered if (p := o.problem(getattr(args, o.name), o.flag))]
    if problems:
        raise UserError("; ".join(problems))
    return request(**{o.name: getattr(args, o.name) for o in offered})


# --------------------------------------------------------------------------- the DAG
def dag_params(
    request: type, defaults: Mapping[str, Any] | None = None, only: Sequence[str] | None = None
) -> dict[str, Any]:
    """The Airflow ``Param`` of each option the DAG offers (``only``: those, in that order), its
    default from ``defaults`` (the pack's resolved params) else the field's. An option with a
    resolved default is not nullable in the DAG: null would only mean "params" again."""
    from airflow.sdk import Param

    defaults = defaults or {}
    by_name = {o.name: o for o in options(request) if o.dag}
    names = list(only) if only is not None else list(by_name)
    out = {}
    for name in names:
        o = by_name[name]
        default = defaults.get(name, o.default)
        nullable = o.nullable and default is None
        schema: dict[str, Any] = {"type": ["null", _JSON_TYPE[o.kind]] if nullable else _JSON_TYPE[o.kind]}
        if o.choices:
            schema["enum"] = [None, *o.choices] if nullable else list(o.choices)
        for key in ("minimum", "maximum"):
            if getattr(o, key) is not None:
                schema[key] = getattr(o, key)
        if o.pattern is not None:  # JSON Schema searches; the option's pattern is the whole value
            schema["pattern"] = f"^(?:{o.pattern})$"
        if o.max_length is not None:
            schema["maxLength"] = o.max_length
        out[name] = Param(default, description=o.help, **schema)
    return out


def conf_problems(request: type, conf: Mapping[str, Any], required: Sequence[str] = ()) -> list[str]:
    """What is wrong with the request's options in a DAG run's ``conf`` (``required``: options that
    must have a value there, the DAG having resolved their default)."""
    problems = []
    for o in options(request):
        if not o.dag or o.name not in conf:
            continue
        value = conf[o.name]
        if value is None and o.name in required:
            problems.append(f"{o.name} None: expected {dataclasses.replace(o, nullable=False).expected()}")
            continue
        problem = o.problem(value)
        if problem:
            problems.append(problem)
    return problems


def from_conf(request: type[R], conf: Mapping[str, Any], **given: Any) -> R:
    """The request of a DAG run's checked ``conf`` (``given``: what the task decides itself)."""
    values = {o.name: conf[o.name] for o in options(request) if o.dag and o.name in conf}
    return request(**{**values, **given})


def digest_options(request: type) -> tuple[str, ...]:
    """The options that decide what a retrain trains (a change of one makes it train again)."""
    return tuple(o.name for o in options(request) if o.digest)


def overlay(request: Any, block: B) -> B:
    """The params ``block`` with the options of ``request`` that share a name with one of its keys
    laid over it, where the request gives a value (``None`` leaves the block's): the settings a
    step runs with."""
    given = {
        o.name: value
        for o in options(type(request))
        if o.name in type(block).model_fields and (value := getattr(request, o.name)) is not None
    }
    return block.model_copy(update=given)
