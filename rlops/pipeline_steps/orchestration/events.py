"""The events file of a simulated production timeline: what happens to the production world.

::

    events:
      - at_hour: 10
        kind: population          # the applicant population changes
        init: {user_profile.age: {dist: normal, mean: 55, std: 11}}
      - at_hour: 20
        kind: latency             # an action's (an API's) latency is multiplied
        action: fetch_credit_report
        factor: 3
      - at_hour: 30
        kind: error_rate          # an API's error rate is set
        api: credit_bureau
        rate: 0.25
      - at_hour: 40
        kind: bad_candidate       # a deliberately worse policy is offered for promotion

Events change only the *production stand-in* (a copy of the pack whose ``live`` profile they
edit), never the pack or the calibrated sandbox; an event stays in force from ``at_hour`` on.
``population``, ``latency`` and ``error_rate`` are drift events (the timeline measures the delay
to the alarm); ``bad_candidate`` is a promotion event.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlops.common.errors import UserError

DRIFT_KINDS = ("population", "latency", "error_rate")
KINDS = DRIFT_KINDS + ("bad_candidate",)
_KEYS = {"population": {"init"}, "latency": {"action", "factor"}, "error_rate": {"api", "rate"},
         "bad_candidate": set()}


@dataclass(frozen=True)
class Event:
    """One scripted change of the production world, in force from ``at_hour`` on."""

    at_hour: float
    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def drift(self) -> bool:
        return self.kind in DRIFT_KINDS

    def label(self) -> str:
        detail = ", ".join(f"{k}={v}" for k, v in self.args.items() if k != "init") or \
            ", ".join(self.args.get("init", {}))
        return f"h{self.at_hour:g} {self.kind}" + (f" ({detail})" if detail else "")


def parse_events(doc: Any, where: str = "events") -> list[Event]:
    """Validate an events document (``{events: [...]}`` or a bare list); clear errors."""
    items = doc.get("events") if isinstance(doc, dict) else doc
    if not isinstance(items, list):
        raise UserError(f"{where}: expected a list under 'events:' of {{at_hour, kind, ...}} entries")
    out = []
    for i, raw in enumerate(items):
        at = f"{where}: events[{i}]"
        if not isinstance(raw, dict):
            raise UserError(f"{at}: expected a mapping with at_hour and kind, got {raw!r}")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise UserError(f"{at}: kind {kind!r} unknown; expected one of {', '.join(KINDS)}")
        hour = raw.get("at_hour")
        if not isinstance(hour, (int, float)) or isinstance(hour, bool) or hour < 0:
            raise UserError(f"{at}: at_hour {hour!r}: expected a number of hours >= 0 from the start")
        args = {k: v for k, v in raw.items() if k not in ("at_hour", "kind")}
        if set(args) != _KEYS[kind]:
            raise UserError(f"{at}: a {kind} event takes {sorted(_KEYS[kind]) or 'no other keys'}, got {sorted(args)}")
        if kind == "latency" and not (isinstance(args["factor"], (int, float)) and args["factor"] > 0):
            raise UserError(f"{at}: factor {args['factor']!r}: expected a number > 0")
        if kind == "error_rate" and not (isinstance(args["rate"], (int, float)) and 0 <= args["rate"] <= 1):
            raise UserError(f"{at}: rate {args['rate']!r}: expected a probability in [0, 1]")
        if kind == "population" and not (isinstance(args["init"], dict) and args["init"]):
            raise UserError(f"{at}: init: expected a mapping of field path → initial distribution")
        out.append(Event(float(hour), str(kind), args))
    return sorted(out, key=lambda e: e.at_hour)


def load_events(path: str | Path) -> list[Event]:
    import yaml
    p = Path(path)
    if not p.is_file():
        raise UserError(f"events file {p}: not found; expected a YAML file with an 'events:' list")
    try:
        doc = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"events file {p}: not valid YAML: {exc}") from exc
    return parse_events(doc, str(p))


def in_force(events: list[Event], hour: float) -> list[Event]:
    return [e for e in events if e.at_hour <= hour]


def production_doc(doc: dict[str, Any], events: list[Event], live: str = "live") -> dict[str, Any]:
    """The scenario document of the production world with the drift ``events`` applied to its
    ``live`` profile (field initial distributions, action latencies, API error rates)."""
    out = copy.deepcopy(doc)
    prof = out["simulation"]["profiles"][live]
    actions = {a["name"]: a for a in out["actions"]}
    for e in events:
        if e.kind == "population":
            for path, init in e.args["init"].items():
                node = out["state"]
                for part in path.split("."):
                    if part not in node:
                        raise UserError(f"event {e.label()}: no state field {path!r} in the scenario")
                    node = node[part]
                node["init"] = copy.deepcopy(init)
                for shift in prof.get("population") or []:  # the new population replaces the old one
                    shift.get("init", {}).pop(path, None)
        elif e.kind == "latency":
            a = actions.get(e.args["action"])
            if a is None:
                raise UserError(f"event {e.label()}: no action {e.args['action']!r}; expected one of {sorted(actions)}")
            lat = a["latency_ms"]
            a["latency_ms"] = {"mean": lat["mean"] * e.args["factor"], "std": lat.get("std", 0) * e.args["factor"]}
        elif e.kind == "error_rate":
            if e.args["api"] not in prof.get("error_rates", {}):
                raise UserError(f"event {e.label()}: no API {e.args['api']!r} in profile {live}")
            prof["error_rates"][e.args["api"]] = float(e.args["rate"])
    return out


DEFAULT_EVENTS_48H: dict[str, Any] = {"events": [
    {"at_hour": 10, "kind": "population", "init": {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}},
    {"at_hour": 20, "kind": "latency", "action": "fetch_credit_report", "factor": 3},
    {"at_hour": 30, "kind": "error_rate", "api": "credit_bureau", "rate": 0.25},
    {"at_hour": 40, "kind": "bad_candidate"},
]}


def scaled_events(hours: float) -> list[Event]:
    """The four default events spread over ``hours`` as over 48 (a 12-hour run: 2.5, 5, 7.5, 10)."""
    return [Event(e.at_hour * hours / 48.0, e.kind, e.args) for e in parse_events(DEFAULT_EVENTS_48H)]
