"""Typed records of a scenario: fields, initial distributions, actions, effects, simulation profiles.

:func:`parse_scenario` turns the YAML mapping (with line numbers, see :mod:`rlops.sandbox.yaml_lines`)
into these records and checks everything that can be checked without expressions; expressions
are compiled by :mod:`rlops.sandbox.compile`. The records and limits are defined in
:mod:`rlops.sandbox.spec_types` (importable from here too), the ``state:`` section is parsed by
:mod:`rlops.sandbox.spec_fields`; actions, simulation profiles and the rule policy here.
"""

from __future__ import annotations

from typing import Any

from rlops.common.scenario_name import RULE, SCENARIO_NAME, shown
from rlops.sandbox.errors import PackError
from rlops.sandbox.spec_fields import _check_init_value, _Ctx, _is_num, _kind, _line, _parse_init, _walk_fields
from rlops.sandbox.spec_kpis import parse_kpis
from rlops.sandbox.spec_roles import parse_roles
from rlops.sandbox.spec_types import (
    DISTS,
    FIELD_TYPES,
    MAX_ACTIONS,
    MAX_ENUM_VALUES,
    MAX_FIELDS,
    MAX_HISTORY_LEN,
    MAX_HORIZON,
    MAX_MAGNITUDE,
    MAX_ROLES,
    RESERVED_GROUPS,
    ActionSpec,
    EffectSpec,
    FieldSpec,
    InitSpec,
    PopulationShift,
    RoleSpec,
    RuleStep,
    ScenarioSpec,
    SimulationProfile,
)
from rlops.sandbox.yaml_lines import with_lines

__all__ = [
    "DISTS",
    "FIELD_TYPES",
    "MAX_ACTIONS",
    "MAX_ENUM_VALUES",
    "MAX_FIELDS",
    "MAX_HISTORY_LEN",
    "MAX_HORIZON",
    "MAX_MAGNITUDE",
    "MAX_ROLES",
    "RESERVED_GROUPS",
    "ActionSpec",
    "EffectSpec",
    "FieldSpec",
    "InitSpec",
    "PopulationShift",
    "RoleSpec",
    "RuleStep",
    "ScenarioSpec",
    "SimulationProfile",
    "parse_scenario",
]


_ACTION_KEYS = {
    "name",
    "description",
    "required_fields",
    "precondition",
    "effects",
    "terminal",
    "api",
    "latency_ms",
    "error_rate",
    "human_takeover",
}


def _parse_action(c: _Ctx, node: Any, parent: Any, i: int, paths: set[str]) -> ActionSpec:
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
        prob: Any = e.get("prob")
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
        raise c.err(
            node,
            "human_takeover",
            f"{where}.human_takeover",
            f"type mismatch: 'human_takeover' expects a bool, got {_kind(takeover)}",
        )
    err = c.number(node, "error_rate", where) if "error_rate" in node else 0.0
    if not 0.0 <= err <= 1.0:
        raise c.err(node, "error_rate", where, f"bad range: error_rate {err:g} must be within [0, 1]")
    return ActionSpec(
        name=name,
        description=str(node.get("description", "")),
        required_fields=tuple(req),
        precondition=node.get("precondition", True),
        effects=tuple(effects),
        terminal=node.get("terminal", False),
        api=api,
        latency_mean_ms=lat_mean,
        latency_std_ms=lat_std,
        error_rate=err,
        human_takeover=takeover,
        line=_line(parent, i),
    )


def _parse_profiles(
    c: _Ctx,
    node: Any,
    root: dict[Any, Any],
    fields: dict[str, FieldSpec],
    apis: set[str],
    actions: tuple[str, ...] = (),
) -> dict[str, SimulationProfile]:
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
        c.check_keys(p, {"latency_jitter_ms", "error_rates", "population", "description", "action_latency_ms"}, where)
        jitter = (0.0, 0.0)
        if "latency_jitter_ms" in p:
            j = c.mapping(p["latency_jitter_ms"], p, "latency_jitter_ms", f"{where}.latency_jitter_ms")
            c.check_keys(j, {"min", "max"}, f"{where}.latency_jitter_ms")
            jitter = (c.number(j, "min", where), c.number(j, "max", where))
            if jitter[0] > jitter[1] or jitter[0] < 0:
                raise c.err(j, "min", f"{where}.latency_jitter_ms", "bad range: need 0 <= min <= max")
        rates = {}
        rates_node = (
            c.mapping(p["error_rates"], p, "error_rates", f"{where}.error_rates")
            if p.get("error_rates") is not None
            else {}
        )
        for api, r in rates_node.items():
            if api not in apis:
                # A misspelt API would silently never fail: name the APIs the actions call.
                raise c.err(
                    rates_node,
                    api,
                    f"{where}.error_rates.{api}",
                    f"unknown api '{api}' (APIs of the actions: {sorted(apis)})",
                )
            if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r <= 1:
                raise c.err(
                    p["error_rates"],
                    api,
                    f"{where}.error_rates.{api}",
                    f"bad range: an error rate is a number within [0, 1], got {_kind(r)}",
                )
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
                raise c.err(
                    s,
                    "probability" if "probability" in s else None,
                    sw,
                    "bad range: a population shift needs a probability within [0, 1]",
                )
            inits = {}
            init_node = c.mapping(s.get("init"), s, "init", f"{sw}.init")
            for fpath, spec in init_node.items():
                if fpath not in fields:
                    raise c.err(init_node, fpath, f"{sw}.init", f"unknown field '{fpath}'")
                f = fields[fpath]
                inits[fpath] = _parse_init(c, spec, init_node, fpath, f"{sw}.init.{fpath}")
                _check_init_value(
                    c, init_node, fpath, f"{sw}.init.{fpath}", f.type, f.min, f.max, f.values, inits[fpath]
                )
            shifts.append(PopulationShift(str(s.get("name", f"shift{k}")), prob, inits, _line(s)))
        if sum(s.probability for s in shifts) > 1.0 + 1e-9:
            raise c.err(p, "population", f"{where}.population", "population shift probabilities sum over 1")
        out[pname] = SimulationProfile(
            pname, jitter, rates, tuple(shifts), _line(profiles_node, pname), _action_latency(c, p, where, actions)
        )
    return out


def _action_latency(c: _Ctx, p: dict[Any, Any], where: str, actions: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    """A profile's ``action_latency_ms: {action: {mean, std}}`` (an action's own latency there)."""
    if p.get("action_latency_ms") is None:
        return {}
    node = c.mapping(p["action_latency_ms"], p, "action_latency_ms", f"{where}.action_latency_ms")
    out = {}
    for name, spec in node.items():
        w = f"{where}.action_latency_ms.{name}"
        if name not in actions:
            raise c.err(node, name, w, f"unknown action '{name}' (actions: {sorted(actions)})")
        spec = c.mapping(spec, node, name, w)
        c.check_keys(spec, {"mean", "std"}, w)
        mean, std = c.number(spec, "mean", w), c.number(spec, "std", w) if "std" in spec else 0.0
        if mean < 0 or std < 0:
            raise c.err(node, name, w, "bad range: a latency mean and std are >= 0")
        out[str(name)] = (mean, std)
    return out


_TOP_KEYS = {
    "name",
    "description",
    "horizon",
    "state",
    "actions",
    "simulation",
    "rule_policy",
    "terminal_when",
    "history_len",
    "default_profile",
    "roles",
    "kpis",
}


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
    if not SCENARIO_NAME.match(doc["name"]):  # the name keys trace partitions, DAG ids, registered models
        raise c.err(doc, "name", "name", f"the scenario name {shown(doc['name'])} is not a scenario name: {RULE}")
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
    roles = parse_roles(c, doc, names)
    profiles = _parse_profiles(
        c,
        doc.get("simulation"),
        doc,
        {f.path: f for f in fields},
        {a.api for a in actions if a.api},
        tuple(a.name for a in actions),
    )
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
            raise c.err(
                r,
                "action" if "action" in r else None,
                f"rule_policy[{i}].action",
                f"undefined action '{r.get('action')}' in a rule (actions: {names})",
            )
        rules.append(RuleStep(r.get("when", True), r["action"], _line(rp, i)))
    hl = doc.get("history_len", 4)
    if isinstance(hl, bool) or not isinstance(hl, int) or hl < 1:
        raise c.err(doc, "history_len", "history_len", "history_len expects a positive int")
    if hl > MAX_HISTORY_LEN:
        raise c.err(
            doc, "history_len", "history_len", f"bad range: history_len {hl} is over the limit of {MAX_HISTORY_LEN}"
        )
    return ScenarioSpec(
        name=str(doc["name"]),
        description=str(doc.get("description", "")),
        horizon=horizon,
        fields=tuple(fields),
        actions=tuple(actions),
        profiles=profiles,
        default_profile=default_profile,
        rule_policy=tuple(rules),
        terminal_when=doc.get("terminal_when"),
        history_len=hl,
        file=file,
        roles=roles,
        kpis=parse_kpis(c, doc),
    )
