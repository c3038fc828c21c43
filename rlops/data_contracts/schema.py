"""Trace and label schemas, and the Great Expectations suites that enforce them.

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

The scenario's state fields come from the caller as plain descriptions
``(name, kind, min, max, enum_values)`` (see :class:`StateField`), so this module does not
depend on the sandbox.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
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
class StateField:
    """A scenario state field as the contract needs it: ``(name, kind, min, max, enum_values)``.

    ``kind`` is ``int``, ``float``, ``bool`` or ``enum``; ``name`` is the dotted path of the
    production field (``user_profile.credit_score``), with or without the ``state.`` prefix.
    ``nullable``: the field may be null, because it is not visible to the agent in every
    state (a scenario field with ``visible_when``); otherwise a null is quarantined.
    """

    name: str
    kind: str
    min: float | None = None
    max: float | None = None
    enum_values: tuple[Any, ...] | None = None
    nullable: bool = False
    default: Any = None
    """The value a row that lacks the field takes (the scenario field's ``default:``)."""

    @classmethod
    def coerce(cls, item: Any) -> StateField:
        """Accept a ``StateField``; a tuple/list ``(name, kind[, min[, max[, enum_values[,
        nullable]]]])``; a mapping with those keys (``values`` for ``enum_values``); or a
        scenario field object with ``path``, ``type``, ``min``, ``max``, ``values`` and
        ``visible_when`` attributes (a field with ``visible_when`` is nullable)."""
        if isinstance(item, StateField):
            return item
        if isinstance(item, Mapping):
            get = item.get
        elif isinstance(item, Sequence) and not isinstance(item, str) and 2 <= len(item) <= 6:
            name, kind, lo, hi, values, nullable = (list(item) + [None] * 6)[:6]
            return cls(str(name), str(kind), lo, hi, _values(values), bool(nullable))
        elif hasattr(item, "path") or (hasattr(item, "name") and hasattr(item, "kind")):

            def get(key: str, default: Any = None) -> Any:
                return getattr(item, key, default)
        else:
            raise ValueError(
                f"state field description {item!r}: expected (name, kind, min, max, "
                "enum_values), a mapping with those keys, or a scenario field"
            )
        name, kind = get("name", get("path")), get("kind", get("type"))
        if name is None or kind is None:
            raise ValueError(f"state field description {item!r}: needs a name (or path) and a kind (or type)")
        values = get("enum_values", get("values"))
        nullable = bool(get("nullable", False)) or get("visible_when") is not None
        return cls(str(name), str(kind), get("min"), get("max"), _values(values), nullable, get("default"))

    def column_spec(self) -> ColumnSpec:
        col = self.name if self.name.startswith(STATE_PREFIX) else STATE_PREFIX + self.name
        kind = self.kind.lower()
        required = not self.nullable
        if kind in ("int", "float"):
            return ColumnSpec(
                col,
                kind,  # type: ignore[arg-type]  # "int" or "float": checked just above
                required=required,
                min=self.min,
                max=self.max,
                finite=kind == "float",
                default=self.default,
            )
        if kind == "bool":
            return ColumnSpec(col, "bool", required=required, default=self.default)
        if kind == "enum":
            if not self.enum_values:
                raise ValueError(f"state field {self.name!r}: kind 'enum' needs enum_values")
            if not all(isinstance(v, str) for v in self.enum_values):
                raise ValueError(
                    f"state field {self.name!r}: enum values must be strings, got {list(self.enum_values)!r}"
                )
            return ColumnSpec(col, "str", required=required, values=tuple(self.enum_values), default=self.default)
        raise ValueError(f"state field {self.name!r}: unknown kind {self.kind!r}; expected int, float, bool or enum")


def _values(values: Any) -> tuple[Any, ...] | None:
    return tuple(values) if values else None


def _observed(item: Any) -> bool:
    """Scenario fields marked ``observed: false`` never appear in a production trace."""
    flag = item.get("observed", True) if isinstance(item, Mapping) else getattr(item, "observed", True)
    return flag is not False


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


# --------------------------------------------------------------------------- trace records


def trace_base_columns(
    actions: Sequence[str],
    scenario: str | None = None,
    reward_fn_versions: Sequence[str] | None = None,
) -> tuple[list[ColumnSpec], list[ColumnSpec]]:
    """The scenario-independent trace columns, as (columns before the state, columns after);
    :func:`trace_contract` puts the ``state.<field>`` columns between them."""
    n = len(actions)
    return [
        ColumnSpec(
            "trace_id", "str", min_length=1, description="the traced interaction (production request/conversation id)"
        ),
        ColumnSpec("episode_id", "str", min_length=1, description="one episode; unique with step"),
        ColumnSpec("step", "int", min=0, description="0-based step index in the episode"),
        ColumnSpec("ts", "timestamp", description="when the step was taken (UTC)"),
        ColumnSpec(
            "scenario", "str", values=(scenario,) if scenario else None, description="the pack the decision belongs to"
        ),
        ColumnSpec(
            "source",
            "str",
            values=("sandbox", "live"),
            description="live: production traffic (what the off-policy gate and drift read); sandbox: simulated",
        ),
        ColumnSpec("test_group", "str", required=False, description="A/B group, passed through"),
        ColumnSpec(
            "policy_version",
            "str",
            min_length=1,
            description="what decided: PACK-policy/VERSION, rules, or the name of a policy outside rlops",
        ),
        ColumnSpec(
            "reward_fn_version",
            "str",
            required=False,
            values=tuple(reward_fn_versions) if reward_fn_versions else None,
            description="the reward function that scored the row",
        ),
    ], [
        ColumnSpec("action", "str", values=tuple(actions), description="the action served"),
        ColumnSpec(
            "action_mask",
            "mask",
            regex=r"^[01]*1[01]*$",
            length=n,
            description="'0'/'1' per action in scenario order (one character per action), one legal at least",
        ),
        ColumnSpec(
            "logp",
            "float",
            required=False,
            max=0.0,
            finite=True,
            description="log of the probability with which the serving policy chose the action (exploration included): "
            "the off-policy gate's importance-weight denominator; 0 for a deterministic choice",
        ),
        ColumnSpec(
            "entropy", "float", required=False, min=0.0, finite=True, description="of the policy's action distribution"
        ),
        ColumnSpec(
            "value", "float", required=False, finite=True, description="the policy's value estimate of the state"
        ),
        ColumnSpec(
            "reward_total",
            "float",
            required=False,
            finite=True,
            description="the step's reward (the episode's return sums them)",
        ),
        ColumnSpec(
            "reward_breakdown",
            "json",
            required=False,
            shape="reward_breakdown",
            description="{total, breakdown: [{component, score, reason, rule_ref}]}; a list of "
            "components or {component: score} is accepted and normalised",
        ),
        ColumnSpec(
            "reward_signals",
            "json",
            required=False,
            description="the business signals in force that drove the reward's weights, {signal: value} "
            "(reward lineage beside reward_fn_version)",
        ),
        ColumnSpec("done", "bool", description="the episode ended with this step"),
        ColumnSpec(
            "latency_ms",
            "float",
            required=False,
            min=0.0,
            finite=True,
            description="how long executing the action took",
        ),
        ColumnSpec(
            "error",
            "str",
            required=False,
            true_text="error",
            description="what went wrong executing the action; null: nothing",
        ),
        ColumnSpec("fallback", "bool", required=False, description="the policy client fell back to the rule engine"),
        ColumnSpec(
            "explored",
            "bool",
            required=False,
            description="the action was drawn from the exploration distribution, not the serving policy's own choice",
        ),
        ColumnSpec(
            "fallback_reason",
            "str",
            required=False,
            description="why it fell back: '<code>: <detail>' (agent_sdk.serving.FALLBACK_CODES)",
        ),
        # A shadow candidate's decision on the same request (served: nothing); for its agreement
        # with the served policy and the off-policy estimate of its value.
        ColumnSpec("shadow_policy_version", "str", required=False, description="the shadow candidate"),
        ColumnSpec("shadow_action", "str", required=False, values=tuple(actions)),
        ColumnSpec(
            "shadow_served_logp",
            "float",
            required=False,
            max=0.0,
            description="log π_shadow(served action | state): the importance-weight numerator",
        ),
        ColumnSpec(
            "shadow_probs", "json", required=False, description="the shadow's action probabilities, {action: p}"
        ),
        ColumnSpec("terminated", "bool", required=False),
        ColumnSpec("truncated", "bool", required=False),
        ColumnSpec(
            EXTRA_COLUMN,
            "json",
            required=False,
            description="input keys the contract does not know, as one JSON object",
        ),
    ]


def contract_for(pack: Any) -> Contract:
    """The trace contract of a scenario pack (a ``Pack``): its name, actions and fields."""
    return trace_contract(pack.name, pack.scenario.action_names, pack.scenario.spec.fields)


def trace_contract(
    scenario: str,
    actions: Sequence[str],
    expected_state_fields: Iterable[Any] | Callable[[], Iterable[Any]] = (),
    reward_fn_versions: Sequence[str] | None = None,
) -> Contract:
    r"""The trace contract of one scenario.

    ``actions`` are the scenario's action names in mask order; ``expected_state_fields`` is
    the scenario's field list (or a callable returning it): ``(name, kind, min, max,
    enum_values[, nullable])`` descriptions, mappings, :class:`StateField`\ s, or the
    scenario's own field objects (``pack.scenario.spec.fields``; fields with
    ``observed: false`` are left out, fields with ``visible_when`` may be null);
    ``reward_fn_versions`` optionally restricts that column.
    """
    if not actions:
        raise ValueError(
            f"trace contract for scenario {scenario!r}: the action list is empty; "
            "expected the scenario's action names in mask order"
        )
    if len(set(actions)) != len(actions):
        raise ValueError(f"trace contract for scenario {scenario!r}: duplicate action names in {list(actions)!r}")
    head, tail = trace_base_columns(actions, scenario, reward_fn_versions)
    if callable(expected_state_fields):
        expected_state_fields = expected_state_fields()
    state = [StateField.coerce(f).column_spec() for f in expected_state_fields if _observed(f)]
    return Contract(name=f"trace.{scenario}", columns=tuple(head + state + tail))


# --------------------------------------------------------------------------- label queue items


def label_contract(scenario: str, actions: Sequence[str]) -> Contract:
    """Label queue items: a state to label, the candidate actions, and (once labelled) the
    chosen action and who chose it. ``label``/``annotator`` are null while pending."""
    return Contract(
        name=f"label.{scenario}",
        columns=(
            ColumnSpec("item_id", "str", min_length=1),
            ColumnSpec("scenario", "str", values=(scenario,)),
            ColumnSpec(
                "state",
                "json",
                json_schema={"type": "object"},
                description="the state as a JSON object of dotted field names",
            ),
            ColumnSpec(
                "candidate_actions",
                "json",
                json_schema={"type": "array", "minItems": 1, "items": {"enum": list(actions)}},
            ),
            ColumnSpec("label", "str", required=False, values=tuple(actions)),
            ColumnSpec("annotator", "str", required=False, min_length=1),
            ColumnSpec("ts", "timestamp"),
        ),
    )
