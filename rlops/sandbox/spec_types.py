"""The typed records of a scenario (fields, initial distributions, actions, effects, simulation
profiles) and the size limits a scenario must respect; built by :func:`rlops.sandbox.spec.parse_scenario`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FIELD_TYPES = ("int", "float", "enum", "bool")
DISTS = {
    "normal": ("mean", "std"),
    "lognormal": ("mean", "sigma"),
    "uniform": ("low", "high"),
    "categorical": ("probs",),
    "bernoulli": ("p",),
}
RESERVED_GROUPS = ("episode",)

# Sizes a scenario may declare. Every one of them multiplies the work of validation (the liveness
# check steps ``horizon`` times) or the memory of an environment, so a typo such as
# ``horizon: 100000000`` must fail at once with a clear message instead of hanging CI.
MAX_HORIZON = 1000
MAX_HISTORY_LEN = 64
MAX_FIELDS = 1000
MAX_ACTIONS = 256
MAX_ENUM_VALUES = 1000
MAX_ROLES = 16
MAX_KPIS = 64
#: The largest magnitude of a number in a scenario: the state is float32 (at most ~3.4e38), and
#: a draw of ``normal(0, 1e300)`` must not overflow it.
MAX_MAGNITUDE = 1e30


@dataclass(frozen=True)
class InitSpec:
    """How a field is set at reset: a constant ``value``, a distribution ``dist`` with its
    ``params`` (numbers or expressions over fields declared earlier), or an ``expr``."""

    value: Any = None
    dist: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    expr: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class FieldSpec:
    path: str
    type: str
    min: float | None = None
    max: float | None = None
    unit: str | None = None
    values: tuple[str, ...] = ()
    init: InitSpec = InitSpec()
    observed: bool = True
    visible_when: str | None = None
    description: str = ""
    line: int | None = None
    default: Any = None
    """The value of a state that lacks the field (an agent or a log older than the field): the policy
    client and capture use it, and count it, instead of refusing the state."""

    @property
    def bounded(self) -> bool:
        return self.min is not None and self.max is not None


@dataclass(frozen=True)
class EffectSpec:
    """Assignments applied to the next state, optionally only ``when`` a condition holds and
    with probability ``prob`` (a random event drawn from (seed, state hash))."""

    set: dict[str, Any]
    when: str | None = None
    prob: Any = None
    line: int | None = None


@dataclass(frozen=True)
class ActionSpec:
    name: str
    description: str
    required_fields: tuple[str, ...] = ()
    precondition: Any = True
    effects: tuple[EffectSpec, ...] = ()
    terminal: Any = False
    api: str | None = None
    latency_mean_ms: float = 0.0
    latency_std_ms: float = 0.0
    error_rate: float = 0.0
    human_takeover: bool = False
    line: int | None = None


@dataclass(frozen=True)
class PopulationShift:
    """With probability ``probability`` per episode, the listed fields' initial distributions are
    replaced (e.g. an ``elderly`` population); the episode's ``episode.segment`` records which."""

    name: str
    probability: float
    init: dict[str, InitSpec]
    line: int | None = None


@dataclass(frozen=True)
class SimulationProfile:
    name: str
    latency_jitter_ms: tuple[float, float] = (0.0, 0.0)
    error_rates: dict[str, float] = field(default_factory=dict)
    population: tuple[PopulationShift, ...] = ()
    line: int | None = None
    #: per action, ``(mean, std)`` of its own latency in this profile (the action's declared one else)
    action_latency_ms: dict[str, tuple[float, float]] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleStep:
    """One line of the pack's rule engine: the first legal rule whose ``when`` holds decides."""

    when: Any
    action: str
    line: int | None = None


@dataclass(frozen=True)
class KpiSpec:
    """A business KPI the pack declares (``kpis:``): ``expr`` evaluated on each episode's final
    state (a bool is a rate, a number a mean), over the episodes where ``when`` holds."""

    name: str
    expr: str
    when: str | None = None
    description: str = ""
    better: str | None = None
    """``higher`` or ``lower``: which way the KPI improves (None: neither is better)."""
    rule_ref: str | None = None
    """The rule of rules.yaml the KPI measures (a breach rate names the rule it breaches)."""
    line: int | None = None


@dataclass(frozen=True)
class RoleSpec:
    """One agent of a multi-agent scenario: the actions it owns and when it is its turn.
    ``acts_when`` None (only the last role) means "when no role before it acts"."""

    name: str
    description: str
    actions: tuple[str, ...]
    acts_when: Any = None
    line: int | None = None


@dataclass(frozen=True)
class ScenarioSpec:
    name: str
    description: str
    horizon: int
    fields: tuple[FieldSpec, ...]
    actions: tuple[ActionSpec, ...]
    profiles: dict[str, SimulationProfile]
    default_profile: str
    rule_policy: tuple[RuleStep, ...]
    terminal_when: Any = None
    history_len: int = 4
    file: str = ""
    roles: tuple[RoleSpec, ...] = ()
    kpis: tuple[KpiSpec, ...] = ()

    def field(self, path: str) -> FieldSpec:
        return next(f for f in self.fields if f.path == path)
