"""Typed records of a scenario: fields, initial distributions, actions, effects, simulation profiles.

:func:`parse_scenario` turns the YAML mapping (with line numbers, see :mod:`sandbox.yaml_lines`)
into these records and checks everything that can be checked without expressions; expressions
are compiled by :mod:`sandbox.compile`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sandbox.errors import PackError
from sandbox.yaml_lines import LDict, LList, with_lines

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


@dataclass(frozen=True)
class RuleStep:
    """One line of the pack's rule engine: the first legal rule whose ``when`` holds decides."""

    when: Any
    action: str
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

    def field(self, path: str) -> FieldSpec:
        return next(f for f in self.fields if f.path == path)


class _Ctx:
    """Carries the file name for error construction."""

    def __init__(self, file: str):
        self.file = file

    def err(self, node: Any, key: Any, path: str, msg: str) -> PackError:
        line = None
        if isinstance(node, LDict):
            line = node.line_of(key) if key is not None else node.line
        elif isinstance(node, LList):
            line = node.line_of(key) if isinstance(key, int) else node.line
        return PackError(self.file, line, path, msg)

    def mapping(self, node: Any, parent: Any, key: Any, path: str) -> LDict:
        if not isinstance(node, dict):
            raise self.err(parent, key, path, f"expected a mapping, got {_kind(node)}")
        return node  # type: ignore[return-value]

    def check_keys(self, node: LDict, allowed: set[str], path: str) -> None:
        for k in node:
            if k not in allowed:
                raise self.err(node, k, f"{path}.{k}" if path else str(k),
                               f"unknown key '{k}' (expected one of {sorted(allowed)})")

    def number(self, node: LDict, key: str, path: str) -> float:
        v = node[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.err(node, key, f"{path}.{key}", f"type mismatch: expected a number, got {_kind(v)}")
        if not _finite(v):
            raise self.err(node, key, f"{path}.{key}", f"bad value: expected a finite number (at most "
                                                       f"{MAX_MAGNITUDE:g} in size), got {_kind(v)}")
        return float(v)


def _line(node: Any, key: Any = None) -> int | None:
    """Source line of ``node`` (or of its ``key``); None for values that did not come from YAML
    (a calibration overlay, a generated pack)."""
    if key is not None and hasattr(node, "line_of"):
        return node.line_of(key)
    return getattr(node, "line", None)


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return f"bool {v}"
    if isinstance(v, int) and abs(v) > 10**20:
        return f"a number of {len(str(abs(v)))} digits"
    if isinstance(v, (int, float)):
        return f"number {v}"
    if isinstance(v, str):
        return f"string {v!r}"
    if isinstance(v, dict):
        return "a mapping"
    if isinstance(v, list):
        return "a list"
    return type(v).__name__


_FIELD_KEYS = {"type", "min", "max", "unit", "values", "init", "observed", "visible_when", "description"}


def _parse_init(c: _Ctx, node: Any, parent: Any, key: Any, path: str) -> InitSpec:
    if node is None or (isinstance(node, dict) and not node):
        raise c.err(parent, key, path, "expected an initial value, a distribution or an expr, got nothing")
    if not isinstance(node, dict):
        return InitSpec(value=node, line=getattr(parent, "line_of", lambda _k: None)(key))
    c.check_keys(node, {"dist", "expr", "value", *{p for ps in DISTS.values() for p in ps}}, path)
    if "expr" in node:
        return InitSpec(expr=node["expr"], line=_line(node))
    if "value" in node:
        return InitSpec(value=node["value"], line=_line(node))
    dist = node.get("dist")
    if dist not in DISTS:
        raise c.err(node, "dist" if "dist" in node else None, path,
                    f"unknown distribution {dist!r} (expected one of {sorted(DISTS)}, or 'value'/'expr')")
    params = {}
    for p in DISTS[dist]:
        if p not in node:
            raise c.err(node, None, path, f"distribution '{dist}' needs parameter '{p}'")
        params[p] = node[p]
    extra = set(node) - {"dist", *DISTS[dist]}
    if extra:
        k = sorted(extra)[0]
        raise c.err(node, k, f"{path}.{k}", f"unknown key '{k}' for distribution '{dist}' "
                                            f"(expected {list(DISTS[dist])})")
    return InitSpec(dist=dist, params=params, line=_line(node))


def _parse_field(c: _Ctx, node: LDict, parent: LDict, path: str) -> FieldSpec:
    c.check_keys(node, _FIELD_KEYS, path)
    t = node.get("type")
    if t not in FIELD_TYPES:
        raise c.err(node, "type" if "type" in node else None, path,
                    f"unknown field type {t!r} (expected one of {list(FIELD_TYPES)})")
    lo = c.number(node, "min", path) if "min" in node else None
    hi = c.number(node, "max", path) if "max" in node else None
    if t in ("enum", "bool") and (lo is not None or hi is not None):
        raise c.err(node, "min" if lo is not None else "max", path, f"a {t} field takes no min/max")
    if lo is not None and hi is not None and lo > hi:
        raise c.err(node, "min", path, f"bad range: min {lo:g} is greater than max {hi:g}")
    values: tuple[str, ...] = ()
    if t == "enum":
        vals = node.get("values")
        if not isinstance(vals, list) or not vals or not all(isinstance(v, str) for v in vals):
            raise c.err(node, "values" if "values" in node else None, path,
                        "an enum field needs 'values': a non-empty list of names")
        if len(vals) > MAX_ENUM_VALUES:
            raise c.err(node, "values", path, f"an enum field takes at most {MAX_ENUM_VALUES} values, got {len(vals)}")
        if len(set(vals)) != len(vals):
            raise c.err(node, "values", path, "enum values must be unique")
        values = tuple(vals)
    if "init" not in node:
        raise c.err(node, None, path, "missing 'init' (a value, a distribution or an expr)")
    init = _parse_init(c, node["init"], node, "init", f"{path}.init")
    _check_init_value(c, node, "init", f"{path}.init", t, lo, hi, values, init)
    observed = node.get("observed", True)
    if not isinstance(observed, bool):
        raise c.err(node, "observed", path, f"type mismatch: 'observed' expects a bool, got {_kind(observed)}")
    return FieldSpec(path=path, type=t, min=lo, max=hi, unit=node.get("unit"), values=values, init=init,
                     observed=observed, visible_when=node.get("visible_when"),
                     description=str(node.get("description", "")), line=_line(parent, path.rsplit(".", 1)[-1]))


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: int | float) -> bool:
    """YAML spells NaN and infinity ``.nan`` / ``.inf``; a number beyond :data:`MAX_MAGNITUDE`
    is no better (the state is float32)."""
    try:
        return math.isfinite(float(v)) and abs(float(v)) <= MAX_MAGNITUDE
    except OverflowError:
        return False


def _check_init_value(c: _Ctx, node: LDict, key: str, where: str, t: str, lo: float | None, hi: float | None,
                      values: tuple[str, ...], init: InitSpec) -> None:
    """Check an initial value or distribution against its field (``node[key]`` holds it)."""
    if init.value is not None:
        v = init.value
        if t == "bool" and not isinstance(v, bool):
            raise c.err(node, key, where, f"type mismatch: expected a bool, got {_kind(v)}")
        if t == "enum" and v not in values:
            raise c.err(node, key, where, f"unknown enum value {v!r} (expected one of {list(values)})")
        if t in ("int", "float"):
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                raise c.err(node, key, where, f"type mismatch: expected a number, got {_kind(v)}")
            if not _finite(v):
                raise c.err(node, key, where, f"bad value: expected a finite number (at most {MAX_MAGNITUDE:g} "
                                             f"in size), got {_kind(v)}")
            if (lo is not None and v < lo) or (hi is not None and v > hi):
                raise c.err(node, key, where, f"bad range: initial value {v:g} outside [{lo}, {hi}]")
    if init.dist == "categorical":
        if t != "enum":
            raise c.err(node, key, where, f"a categorical distribution needs an enum field, not {t}")
        probs = init.params["probs"]
        if isinstance(probs, dict):
            unknown = [k for k in probs if k not in values]
            if unknown:
                raise c.err(node, key, where, f"unknown enum value {unknown[0]!r} in probs "
                                                 f"(expected one of {list(values)})")
        elif not (isinstance(probs, list) and len(probs) == len(values)):
            raise c.err(node, key, where, f"probs needs {len(values)} numbers (one per enum value) "
                                             "or a mapping value → probability")
        weights = list(probs.values()) if isinstance(probs, dict) else probs
        if not all(_is_num(w) and _finite(w) and w >= 0 for w in weights) or sum(weights) <= 0:
            raise c.err(node, key, where, "bad range: probs must be non-negative numbers, not all zero")
    for k, v in init.params.items():
        if k != "probs" and not (_is_num(v) or isinstance(v, str)):
            raise c.err(node, key, where, f"type mismatch: distribution parameter '{k}' expects a number or an "
                                         f"expression, got {_kind(v)}")
        if _is_num(v) and not _finite(v):
            raise c.err(node, key, where, f"bad value: distribution parameter '{k}' must be a finite number "
                                         f"(at most {MAX_MAGNITUDE:g} in size), got {_kind(v)}")
    num = {k: float(v) for k, v in init.params.items() if _is_num(v)}
    if init.dist == "bernoulli" and "p" in num and not 0.0 <= num["p"] <= 1.0:
        raise c.err(node, key, where, f"bad range: probability p {num['p']:g} must be within [0, 1]")
    for k in ("std", "sigma"):
        if num.get(k, 0.0) < 0:
            raise c.err(node, key, where, f"bad range: {k} {num[k]:g} must be >= 0")
    if num.get("low", -float("inf")) > num.get("high", float("inf")):
        raise c.err(node, key, where, f"bad range: low {num['low']:g} is greater than high {num['high']:g}")
    if init.dist == "bernoulli" and t != "bool":
        raise c.err(node, key, where, f"a bernoulli distribution needs a bool field, not {t}")
    if init.dist in ("normal", "lognormal", "uniform") and t not in ("int", "float"):
        raise c.err(node, key, where, f"distribution '{init.dist}' needs an int or float field, not {t}")


def _walk_fields(c: _Ctx, node: LDict, prefix: str, out: list[FieldSpec]) -> None:
    for key, val in node.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise c.err(node, key, f"{prefix}{key}", f"field name {key!r} must be an identifier")
        path = f"{prefix}{key}"
        if prefix == "" and key in RESERVED_GROUPS:
            raise c.err(node, key, path, f"'{key}' is reserved for built-in episode variables")
        val = c.mapping(val, node, key, path)
        if "type" in val and not isinstance(val.get("type"), dict):
            out.append(_parse_field(c, val, node, path))
        else:
            _walk_fields(c, val, path + ".", out)


_ACTION_KEYS = {"name", "description", "required_fields", "precondition", "effects", "terminal", "api",
                "latency_ms", "error_rate", "human_takeover"}


def _parse_action(c: _Ctx, node: Any, parent: LList, i: int, paths: set[str]) -> ActionSpec:
    where = f"actions[{i}]"
    node = c.mapping(node, parent, i, where)
    c.check_keys(node, _ACTION_KEYS, where)
    name = node.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise c.err(node, "name" if "name" in node else None, where, "each action needs a 'name' (an identifier)")
    where = f"actions.{name}"
    req = node.get("required_fields", [])
    if not isinstance(req, list):
        raise c.err(node, "required_fields", where, "required_fields must be a list of field paths")
    for j, r in enumerate(req):
        if r not in paths:
            raise c.err(req, j, f"{where}.required_fields", f"unknown field '{r}'")
    effects = []
    for j, e in enumerate(node.get("effects", []) or []):
        ew = f"{where}.effects[{j}]"
        e = c.mapping(e, node.get("effects"), j, ew)
        c.check_keys(e, {"set", "when", "prob"}, ew)
        assigns = c.mapping(e.get("set"), e, "set", f"{ew}.set")
        for target in assigns:
            if target not in paths:
                raise c.err(assigns, target, f"{ew}.set", f"unknown field '{target}'")
        prob = e.get("prob")
        if _is_num(prob) and not 0.0 <= prob <= 1.0:
            raise c.err(e, "prob", f"{ew}.prob", f"bad range: probability {prob:g} must be within [0, 1]")
        effects.append(EffectSpec(set=dict(assigns), when=e.get("when"), prob=prob, line=_line(e)))
    lat = node.get("latency_ms", 0.0)
    if isinstance(lat, dict):
        c.check_keys(lat, {"mean", "std"}, f"{where}.latency_ms")
        lat_mean = c.number(lat, "mean", f"{where}.latency_ms") if "mean" in lat else 0.0
        lat_std = c.number(lat, "std", f"{where}.latency_ms") if "std" in lat else 0.0
    else:
        lat_mean = c.number(node, "latency_ms", where) if "latency_ms" in node else 0.0
        lat_std = 0.0
    if lat_mean < 0 or lat_std < 0:
        raise c.err(node, "latency_ms", f"{where}.latency_ms", "bad range: latency mean and std must be >= 0")
    api, takeover = node.get("api"), node.get("human_takeover", False)
    if api is not None and not isinstance(api, str):
        raise c.err(node, "api", f"{where}.api", f"type mismatch: expected an API name, got {_kind(api)}")
    if not isinstance(takeover, bool):
        raise c.err(node, "human_takeover", f"{where}.human_takeover",
                    f"type mismatch: 'human_takeover' expects a bool, got {_kind(takeover)}")
    err = c.number(node, "error_rate", where) if "error_rate" in node else 0.0
    if not 0.0 <= err <= 1.0:
        raise c.err(node, "error_rate", where, f"bad range: error_rate {err:g} must be within [0, 1]")
    return ActionSpec(name=name, description=str(node.get("description", "")), required_fields=tuple(req),
                      precondition=node.get("precondition", True), effects=tuple(effects),
                      terminal=node.get("terminal", False), api=api, latency_mean_ms=lat_mean,
                      latency_std_ms=lat_std, error_rate=err, human_takeover=takeover,
                      line=_line(parent, i))


def _parse_profiles(c: _Ctx, node: Any, root: LDict, fields: dict[str, FieldSpec],
                    apis: set[str]) -> dict[str, SimulationProfile]:
    if node is None:
        return {"sandbox": SimulationProfile("sandbox")}
    node = c.mapping(node, root, "simulation", "simulation")
    c.check_keys(node, {"profiles"}, "simulation")
    profiles_node = c.mapping(node.get("profiles"), node, "profiles", "simulation.profiles")
    if not profiles_node:
        raise c.err(node, "profiles", "simulation.profiles", "expected at least one simulation profile")
    out = {}
    for pname, p in profiles_node.items():
        where = f"simulation.profiles.{pname}"
        p = c.mapping(p, profiles_node, pname, where)
        c.check_keys(p, {"latency_jitter_ms", "error_rates", "population", "description"}, where)
        jitter = (0.0, 0.0)
        if "latency_jitter_ms" in p:
            j = c.mapping(p["latency_jitter_ms"], p, "latency_jitter_ms", f"{where}.latency_jitter_ms")
            c.check_keys(j, {"min", "max"}, f"{where}.latency_jitter_ms")
            jitter = (c.number(j, "min", where), c.number(j, "max", where))
            if jitter[0] > jitter[1] or jitter[0] < 0:
                raise c.err(j, "min", f"{where}.latency_jitter_ms", "bad range: need 0 <= min <= max")
        rates = {}
        rates_node = c.mapping(p["error_rates"], p, "error_rates", f"{where}.error_rates") \
            if p.get("error_rates") is not None else {}
        for api, r in rates_node.items():
            if api not in apis:
                # A misspelt API would silently never fail: name the APIs the actions call.
                raise c.err(rates_node, api, f"{where}.error_rates.{api}",
                            f"unknown api '{api}' (APIs of the actions: {sorted(apis)})")
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1:
                raise c.err(p["error_rates"], api, f"{where}.error_rates.{api}",
                            f"bad range: an error rate is a number within [0, 1], got {_kind(r)}")
            rates[api] = float(r)
        shifts = []
        if not isinstance(p.get("population") or [], list):
            raise c.err(p, "population", f"{where}.population", "expected a list of population shifts")
        for k, s in enumerate(p.get("population") or []):
            sw = f"{where}.population[{k}]"
            s = c.mapping(s, p["population"], k, sw)
            c.check_keys(s, {"name", "probability", "init"}, sw)
            prob = c.number(s, "probability", sw) if "probability" in s else -1.0
            if not 0.0 <= prob <= 1.0:
                raise c.err(s, "probability" if "probability" in s else None, sw,
                            "bad range: a population shift needs a probability within [0, 1]")
            inits = {}
            init_node = c.mapping(s.get("init"), s, "init", f"{sw}.init")
            for fpath, spec in init_node.items():
                if fpath not in fields:
                    raise c.err(init_node, fpath, f"{sw}.init", f"unknown field '{fpath}'")
                f = fields[fpath]
                inits[fpath] = _parse_init(c, spec, init_node, fpath, f"{sw}.init.{fpath}")
                _check_init_value(c, init_node, fpath, f"{sw}.init.{fpath}", f.type, f.min, f.max, f.values,
                                  inits[fpath])
            shifts.append(PopulationShift(str(s.get("name", f"shift{k}")), prob, inits, _line(s)))
        if sum(s.probability for s in shifts) > 1.0 + 1e-9:
            raise c.err(p, "population", f"{where}.population", "population shift probabilities sum over 1")
        out[pname] = SimulationProfile(pname, jitter, rates, tuple(shifts), _line(profiles_node, pname))
    return out


_TOP_KEYS = {"name", "description", "horizon", "state", "actions", "simulation", "rule_policy",
             "terminal_when", "history_len", "default_profile"}


def parse_scenario(doc: Any, file: str) -> ScenarioSpec:
    """Validate the structure of ``scenario.yaml`` and return its records (expressions unchecked)."""
    c = _Ctx(file)
    if not isinstance(doc, dict):
        raise PackError(file, None, "", f"expected a mapping at the top level, got {_kind(doc)}")
    doc = with_lines(doc)
    c.check_keys(doc, _TOP_KEYS, "")
    for key in ("name", "state", "actions"):
        if key not in doc:
            raise PackError(file, None, key, f"missing required key '{key}'")
    if not isinstance(doc["name"], str) or not doc["name"].strip():
        raise c.err(doc, "name", "name", f"type mismatch: the scenario name is a string, got {_kind(doc['name'])}")
    horizon = doc.get("horizon", 20)
    if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
        raise c.err(doc, "horizon", "horizon", f"type mismatch: horizon expects a positive int, got {_kind(horizon)}")
    if horizon > MAX_HORIZON:
        raise c.err(doc, "horizon", "horizon", f"bad range: horizon {horizon} is over the limit of {MAX_HORIZON} steps")
    fields: list[FieldSpec] = []
    _walk_fields(c, c.mapping(doc["state"], doc, "state", "state"), "", fields)
    if not fields:
        raise c.err(doc, "state", "state", "the state declares no fields")
    if len(fields) > MAX_FIELDS:
        raise c.err(doc, "state", "state", f"the state declares {len(fields)} fields, over the limit of {MAX_FIELDS}")
    paths = {f.path for f in fields}
    acts_node = doc["actions"]
    if not isinstance(acts_node, list) or not acts_node:
        raise c.err(doc, "actions", "actions", "expected a non-empty list of actions")
    if len(acts_node) > MAX_ACTIONS:
        raise c.err(doc, "actions", "actions", f"{len(acts_node)} actions, over the limit of {MAX_ACTIONS}")
    actions = [_parse_action(c, a, acts_node, i, paths) for i, a in enumerate(acts_node)]
    names = [a.name for a in actions]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise c.err(acts_node, names.index(dup, names.index(dup) + 1), f"actions.{dup}", f"duplicate action '{dup}'")
    profiles = _parse_profiles(c, doc.get("simulation"), doc, {f.path: f for f in fields},
                               {a.api for a in actions if a.api})
    default_profile = doc.get("default_profile", "sandbox" if "sandbox" in profiles else next(iter(profiles)))
    if default_profile not in profiles:
        raise c.err(doc, "default_profile", "default_profile", f"unknown profile '{default_profile}'")
    rules = []
    rp = doc.get("rule_policy") or []
    if not isinstance(rp, list):
        raise c.err(doc, "rule_policy", "rule_policy", "expected a list of {when, action} rules")
    for i, r in enumerate(rp):
        r = c.mapping(r, rp, i, f"rule_policy[{i}]")
        c.check_keys(r, {"when", "action"}, f"rule_policy[{i}]")
        if r.get("action") not in names:
            raise c.err(r, "action" if "action" in r else None, f"rule_policy[{i}].action",
                        f"undefined action '{r.get('action')}' in a rule (actions: {names})")
        rules.append(RuleStep(r.get("when", True), r["action"], _line(rp, i)))
    hl = doc.get("history_len", 4)
    if isinstance(hl, bool) or not isinstance(hl, int) or hl < 1:
        raise c.err(doc, "history_len", "history_len", "history_len expects a positive int")
    if hl > MAX_HISTORY_LEN:
        raise c.err(doc, "history_len", "history_len", f"bad range: history_len {hl} is over the limit of "
                                                       f"{MAX_HISTORY_LEN}")
    return ScenarioSpec(name=str(doc["name"]), description=str(doc.get("description", "")), horizon=horizon,
                        fields=tuple(fields), actions=tuple(actions), profiles=profiles,
                        default_profile=default_profile, rule_policy=tuple(rules),
                        terminal_when=doc.get("terminal_when"), history_len=hl, file=file)
