"""The contracts rlops enforces: a scenario's trace rows and the label queue's items.

* :func:`trace_contract` (:func:`contract_for` of a pack) — the columns every trace row holds
  (:func:`trace_base_columns`, the same for every pack) around the pack's own ``state.<field>``
  columns, described by :class:`StateField`;
* :func:`label_contract` — a label queue item.

The column machinery they are built from (:class:`~rlops.data_contracts.schema.ColumnSpec`,
:class:`~rlops.data_contracts.schema.Contract` and its suites) lives in
:mod:`rlops.data_contracts.schema`. State fields come from the caller as plain descriptions
``(name, kind, min, max, enum_values)``, so this module does not depend on the sandbox.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlops.data_contracts.schema import EXTRA_COLUMN, STATE_PREFIX, ColumnSpec, Contract


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
