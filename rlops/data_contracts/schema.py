"""What a data contract is made of, and the Great Expectations suites that enforce it.

A :class:`Contract` is a list of :class:`ColumnSpec` (name, kind, required, bounds, allowed
values, ...). From it come three things every consumer shares:

* the column order and the stored dtypes (:meth:`Contract.arrow_schema`), so every parquet
  partition of a scenario has the same schema;
* the Great Expectations 1.x suites, one per validation *stage* (:meth:`Contract.suites`);
* readable reasons: each expectation carries ``meta={"column": ..., "check": ...}``.

Stages exist because some checks only make sense once a value has the right type:

====== ===================================================================================
stage  checks (each row only reaches stage *k* if it passed every stage before it)
====== ===================================================================================
0      required columns exist, required values are not null, each value has the right
       JSON type (run on the raw, untyped rows)
1      values: numeric bounds and finiteness, allowed values, id lengths, the action mask
       pattern and length, the timestamp parses, JSON text parses (on typed columns)
2      JSON documents match their JSON schema (label items only)
====== ===================================================================================

The contracts themselves (a scenario's trace rows, the label queue's items) are built in
:mod:`rlops.data_contracts.contracts`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

if TYPE_CHECKING:
    import great_expectations as gx

Kind = Literal["str", "int", "float", "bool", "timestamp", "json", "mask"]
KINDS: tuple[str, ...] = ("str", "int", "float", "bool", "timestamp", "json", "mask")

#: JSON types accepted in the landing zone for each kind (GE ``type_list`` names).
#: ``json`` columns may arrive as a nested object/list; they are serialised to text first.
RAW_TYPES: dict[str, list[str]] = {
    "str": ["str"],
    "int": ["int"],
    "float": ["int", "float"],
    "bool": ["bool"],
    # ISO-8601 text or epoch seconds; datetime values from in-process producers (sandbox).
    "timestamp": ["str", "int", "float", "Timestamp", "datetime64"],
    "json": ["str"],
    "mask": ["str"],
}

_ARROW_TYPES: dict[str, pa.DataType] = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "json": pa.string(),
    "mask": pa.string(),
}

#: Kinds whose conversion can fail on a value of the right JSON type, and the check text.
_CONVERSION_CHECK: dict[str, str] = {
    "timestamp": "not a valid ISO-8601 timestamp or epoch seconds",
}

STATE_PREFIX = "state."
#: Unknown input keys are kept, serialised as one JSON object in this column.
EXTRA_COLUMN = "extra"
#: Columns whose name starts with this prefix are bookkeeping (source file, line number);
#: they travel with the rows but are not part of the contract.
META_PREFIX = "_"
_FINITE = sys.float_info.max


@dataclass(frozen=True)
class ColumnSpec:
    """One column of a contract.

    ``required`` means present and non-null on every row. Bounds are inclusive. ``values``
    restricts the allowed values; ``length`` fixes the string length (action masks);
    ``min_length`` rejects empty ids; ``json_schema`` validates JSON text (stage 2);
    ``true_text`` lets a ``str`` column take a boolean flag: true becomes this text, false
    becomes null (simulated steps flag an error, live ones describe it). ``shape`` names the
    shape a ``json`` column must hold (:data:`rlops.data_contracts.shapes.SHAPES`): accepted values
    are normalised to its canonical form, any other quarantined with the reason.
    """

    name: str
    kind: Kind
    required: bool = True
    min: float | None = None
    max: float | None = None
    values: tuple[Any, ...] | None = None
    regex: str | None = None
    length: int | None = None
    min_length: int | None = None
    finite: bool = False
    json_schema: dict[str, Any] | None = None
    true_text: str | None = None
    description: str = ""
    shape: str | None = None
    default: Any = None
    """A row that lacks the column (absent or null) takes this value (a state field's ``default:``)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"column {self.name!r}: unknown kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind in _CONVERSION_CHECK and not self.required:
            # A value that fails conversion becomes null; only a required column's not-null
            # check can then tell it from a genuinely missing value.
            raise ValueError(
                f"column {self.name!r}: {self.kind} columns must be required "
                "(a value that does not convert is told apart by a not-null check)"
            )

    @property
    def arrow_type(self) -> pa.DataType:
        return _ARROW_TYPES[self.kind]


@dataclass(frozen=True)
class Contract:
    """An ordered set of column specs plus the metadata that names its suites."""

    name: str
    columns: tuple[ColumnSpec, ...]
    _by_name: dict[str, ColumnSpec] = field(init=False, repr=False, compare=False)
    _suites: dict[tuple[frozenset[str] | None, frozenset[str]], list[Any]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        by_name: dict[str, ColumnSpec] = {}
        for spec in self.columns:
            if spec.name in by_name:
                raise ValueError(f"contract {self.name!r}: column {spec.name!r} declared twice")
            by_name[spec.name] = spec
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_suites", {})

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]

    @property
    def required_columns(self) -> list[str]:
        return [c.name for c in self.columns if c.required]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __getitem__(self, name: str) -> ColumnSpec:
        return self._by_name[name]

    def arrow_schema(self) -> pa.Schema:
        """The stored schema: every contract column, in order, nullable where not required."""
        return pa.schema([pa.field(c.name, c.arrow_type, nullable=not c.required) for c in self.columns])

    def suites(self, present: Iterable[str] | None = None, typed: Iterable[str] = ()) -> list[gx.ExpectationSuite]:
        """The GE suites, one per stage, restricted to the columns ``present`` in a batch.

        Expectations on an absent optional column are left out (there is nothing to check);
        an absent required column is caught by its ``ExpectColumnToExist``, which a column known
        to be present does not need. The columns ``typed`` are known to hold only values of their
        kind (a numeric or boolean dtype, or text only: see ``validation.typed_columns``), so their
        type check is left out too: on a batch of a thousand rows GE's cost is per expectation.
        With ``present=None`` the suites are whole (every check of every column).
        """
        key = (None if present is None else frozenset(present), frozenset(typed))
        if key not in self._suites:  # chunks of one input share their column set
            self._suites[key] = build_suites(self, *key)
        return self._suites[key]


def _exp(stage: int, make: Any, column: str, check: str, **kwargs: Any) -> tuple[int, Any]:
    return stage, make(column=column, meta={"column": column, "check": check}, **kwargs)


def _column_expectations(spec: ColumnSpec, present: bool | None, typed: bool = False) -> list[tuple[int, Any]]:
    """The expectations of one column, by stage. ``present``: True (the batch has it), False (it
    has not) or None (unknown: the whole suite); ``typed``: its values are known to be of its kind."""
    from great_expectations.expectations import (  # type: ignore[attr-defined]  # GX 1.x re-exports without __all__
        ExpectColumnToExist,
        ExpectColumnValueLengthsToBeBetween,
        ExpectColumnValueLengthsToEqual,
        ExpectColumnValuesToBeBetween,
        ExpectColumnValuesToBeInSet,
        ExpectColumnValuesToBeInTypeList,
        ExpectColumnValuesToBeJsonParseable,
        ExpectColumnValuesToMatchJsonSchema,
        ExpectColumnValuesToMatchRegex,
        ExpectColumnValuesToNotBeNull,
    )

    c = spec.name
    out: list[tuple[int, Any]] = []
    if spec.required and present is not True:
        out.append(_exp(0, ExpectColumnToExist, c, "required column is missing from the input"))
    if present is False:
        return out
    if spec.required:
        out.append(_exp(0, ExpectColumnValuesToNotBeNull, c, "required value is missing"))
    if not typed:
        out.append(
            _exp(
                0,
                ExpectColumnValuesToBeInTypeList,
                c,
                f"expected {spec.kind} ({' or '.join(RAW_TYPES[spec.kind])}), wrong type",
                type_list=RAW_TYPES[spec.kind],
            )
        )
    if spec.kind in _CONVERSION_CHECK:
        # Stage 1 sees the converted value; one that did not convert is null there.
        out.append(_exp(1, ExpectColumnValuesToNotBeNull, c, _CONVERSION_CHECK[spec.kind]))
    if spec.min is not None or spec.max is not None:
        bound = (
            f"above the maximum {spec.max}"
            if spec.min is None
            else f"below the minimum {spec.min}"
            if spec.max is None
            else f"outside [{spec.min}, {spec.max}]"
        )
        out.append(_exp(1, ExpectColumnValuesToBeBetween, c, bound, min_value=spec.min, max_value=spec.max))
    if spec.finite and not (
        spec.min is not None and spec.max is not None and -_FINITE <= spec.min <= spec.max <= _FINITE
    ):
        # (bounds on both sides already reject ±inf: one check fewer, GE's cost is per check)
        out.append(
            _exp(1, ExpectColumnValuesToBeBetween, c, "not a finite number", min_value=-_FINITE, max_value=_FINITE)
        )
    if spec.values is not None:
        out.append(
            _exp(1, ExpectColumnValuesToBeInSet, c, f"not one of {list(spec.values)}", value_set=list(spec.values))
        )
    if spec.min_length is not None:
        out.append(
            _exp(
                1,
                ExpectColumnValueLengthsToBeBetween,
                c,
                f"shorter than {spec.min_length} characters",
                min_value=spec.min_length,
            )
        )
    if spec.regex is not None:
        out.append(_exp(1, ExpectColumnValuesToMatchRegex, c, f"does not match {spec.regex}", regex=spec.regex))
    if spec.length is not None:
        out.append(_exp(1, ExpectColumnValueLengthsToEqual, c, f"length is not {spec.length}", value=spec.length))
    if spec.kind == "json":
        out.append(_exp(1, ExpectColumnValuesToBeJsonParseable, c, "not valid JSON"))
        if spec.json_schema is not None:
            # A separate stage: MatchJsonSchema fails the whole column on unparseable text.
            out.append(
                _exp(
                    2,
                    ExpectColumnValuesToMatchJsonSchema,
                    c,
                    f"does not match JSON schema {spec.json_schema}",
                    json_schema=spec.json_schema,
                )
            )
    return out


def build_suites(
    contract: Contract, present: frozenset[str] | None, typed: frozenset[str] = frozenset()
) -> list[gx.ExpectationSuite]:
    """Build one ``gx.ExpectationSuite`` per stage, in stage order (see :meth:`Contract.suites`)."""
    import great_expectations as gx

    staged: dict[int, list[Any]] = {}
    for spec in contract.columns:
        is_present = None if present is None else spec.name in present
        for stage, expectation in _column_expectations(spec, is_present, spec.name in typed):
            staged.setdefault(stage, []).append(expectation)
    # Built in one call: ``add_expectation`` would look for a stored copy in a context.
    # The list index is the stage number (a stage with nothing to check is an empty suite).
    return [
        gx.ExpectationSuite(name=f"{contract.name}.stage{stage}", expectations=staged.get(stage, []))
        for stage in range(max(staged, default=-1) + 1)
    ]
