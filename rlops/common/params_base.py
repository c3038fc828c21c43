"""What every params block shares: unknown keys are errors; blocks generated from a config record.

:func:`block_from_dataclass` turns an algorithm's config dataclass (CleanRL style: a docstring
under each field) into a params block with the same defaults and descriptions, so they are
written once, in the algorithm's own record.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, create_model, field_validator


class Block(BaseModel):
    """A params block: unknown keys are errors, values are checked on assignment too."""

    # NaN passes every range check (each comparison is false) and infinity is no setting: both refused.
    # Every field's description is its Field(description=...): pydantic's attribute docstrings would
    # read and parse the source of each block at every start (~0.4 s) for nothing.
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        """``seed: true`` is a mistake, not the number 1 (pydantic's lax mode would take it as one)."""
        if isinstance(value, bool) and info.field_name is not None:
            allowed = _types(cls.model_fields[info.field_name].annotation)
            if bool not in allowed and allowed & {int, float}:
                raise ValueError("expected a number, not a boolean")
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """``block.get("key", fallback)`` for code that reads a block like a mapping: the field's
        validated value (the model's default when params leave it out). A name that is not a field
        of the block is a programming error, raised, never a silent ``fallback``; ``fallback`` is
        used only for a field whose value is null."""
        if key not in type(self).model_fields:
            raise KeyError(
                f"params block {type(self).__name__} has no key {key!r}; "
                f"expected one of {sorted(type(self).model_fields)}"
            )
        value = getattr(self, key)
        return default if value is None else value


def checked_by(problem: Callable[[str], str | None]) -> Callable[[Any, str], str]:
    """A field validator (``field_validator("key")(checked_by(f))``) refusing a text value for which
    ``problem`` says what is wrong."""

    def check(cls: Any, value: str) -> str:
        found = problem(value)
        if found is not None:
            raise ValueError(found)
        return value

    return classmethod(check)  # type: ignore[return-value]  # pydantic takes the classmethod itself


def _types(annotation: Any) -> set[Any]:
    """The plain types an annotation admits (``int | None`` → {int, NoneType}; Literal values as given)."""
    args = typing.get_args(annotation)
    if not args:
        return {annotation}
    if typing.get_origin(annotation) is typing.Literal:
        return {type(a) for a in args}
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        return set().union(*(_types(a) for a in args))
    return {typing.get_origin(annotation)}


def _field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string after each field), by field name."""
    body = _class_body(cls)
    docs: dict[str, str] = {}
    for stmt, nxt in itertools.pairwise(body):
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[stmt.target.id] = " ".join(nxt.value.value.split())
    return docs


def _class_body(cls: type) -> list[ast.stmt]:
    """The statements of ``cls``'s definition. A module-level class is found in its module's file
    directly: ``inspect.getsource`` first maps every loaded module to its file, which costs a
    command's start-up a tenth of a second once Airflow or torch are loaded."""
    file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if file is not None and "." not in cls.__qualname__:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
                return node.body
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    return tree.body[0].body  # type: ignore[attr-defined, no-any-return]  # the class definition


def _annotation(tp: str) -> Any:
    """A dataclass field's annotation text as a type pydantic checks (tuples of ints become lists)."""
    return {
        "int": int,
        "float": float,
        "bool": bool,
        "str": str,
        "tuple[int, ...]": list[int],
        "float | None": float | None,
        "int | None": int | None,
        "str | None": str | None,
    }[tp]


def block_from_dataclass(
    name: str,
    record: type,
    exclude: frozenset[str] = frozenset(),
    derived: dict[str, str] | None = None,
    optional: bool = False,
    base: type[BaseModel] = Block,
    doc: str = "",
    bounds: dict[str, tuple[float | None, float | None]] | None = None,
) -> type[BaseModel]:
    """A params block whose fields are those of ``record`` (minus ``exclude``), with its defaults and
    docstrings. ``derived`` fields default to null (the value is derived elsewhere: the text says
    where); ``optional`` makes every field default to null (an override of another block);
    ``bounds`` gives a field its ``(lowest, highest)`` value."""
    docs, derived, bounds = _field_docs(record), derived or {}, bounds or {}
    spec: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.name in exclude:
            continue
        tp = _annotation(str(f.type))
        if f.default is not dataclasses.MISSING:
            default: Any = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{record.__name__}.{f.name} has no default; a params block needs one")
        if isinstance(default, tuple):
            default = list(default)
        desc = docs.get(f.name, "")
        lo, hi = bounds.get(f.name, (None, None))
        if f.name in derived:
            spec[f.name] = (tp | None, Field(None, description=f"{desc} (null: {derived[f.name]})", ge=lo, le=hi))
        elif optional:
            spec[f.name] = (tp | None, Field(None, description=f"{desc} (null: the `ppo:` value)", ge=lo, le=hi))
        else:
            spec[f.name] = (tp, Field(default, description=desc, ge=lo, le=hi))
    model = create_model(name, __base__=base, __doc__=doc, **spec)
    return model


__all__ = ["Block", "block_from_dataclass", "checked_by"]
