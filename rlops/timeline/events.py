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
      - at_hour: 24
        kind: outcome             # the hidden dynamics change: what the sandbox cannot observe
        field: hidden.default_prob
        factor: 2.5               # × 2.5 (capped at 1) …
        when: "user_profile.age >= 60"   # … for these applicants (optional: everyone)
      - at_hour: 34
        kind: reward_fn           # the business scores with another reward function version
        version: v2
        module: changes/reward_v2.py   # optional: a module (inside the pack) the production world adds
      - at_hour: 40
        kind: bad_candidate       # a deliberately worse policy is offered for promotion

Events change only the *production stand-in* (a copy of the pack whose ``live`` profile they
edit), never the pack or the calibrated sandbox; an event stays in force from ``at_hour`` on.
``population``, ``latency`` and ``error_rate`` are input drift events (the timeline measures the
delay to the alarm); ``outcome`` and ``reward_fn`` are outcome events: the inputs the sandbox is
calibrated on do not move, only what follows a decision does. An ``outcome`` event either scales a
hidden field (``factor``, optionally only ``when`` a condition over the state holds; a
probability-like field bounded by ``max: 1`` stays ≤ 1) or replaces its expression (``expr``);
it rewrites every place the scenario computes that field — its ``init`` (an ``expr`` or a
Bernoulli ``p``) and each action effect that sets it. ``bad_candidate`` is a promotion event.
"""

from __future__ import annotations

import copy
import math
import re
import reprlib
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from rlops.common.errors import UserError
from rlops.common.params_sources import expands_past
from rlops.sandbox.outcome_params import OutcomeFieldError, rewrite_field, scaled
from rlops.sandbox.pack import load_pack

DRIFT_KINDS = ("population", "latency", "error_rate")
OUTCOME_KINDS = ("outcome", "reward_fn")
KINDS = DRIFT_KINDS + OUTCOME_KINDS + ("bad_candidate",)
_KEYS = {
    "population": {"init"},
    "latency": {"action", "factor"},
    "error_rate": {"api", "rate"},
    "outcome": {"field", "factor"},
    "reward_fn": {"version"},
    "bad_candidate": set(),
}
_OPTIONAL = {"outcome": {"when", "expr", "factor"}, "reward_fn": {"module"}}
#: The most values an events document may hold once its YAML aliases are expanded: a timeline has a
#: few dozen events, while nested aliases can make a few hundred bytes stand for billions ("billion
#: laughs"), which any check that shows, copies or walks a value would expand.
MAX_EVENT_VALUES = 100_000


@dataclass(frozen=True)
class Event:
    """One scripted change of the production world, in force from ``at_hour`` on."""

    at_hour: float
    kind: str
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def drift(self) -> bool:
        """An input drift event (the calibrated sandbox can observe and reproduce it)."""
        return self.kind in DRIFT_KINDS

    @property
    def outcome(self) -> bool:
        """An outcome event: the world's dynamics or the business's reward change, inputs do not."""
        return self.kind in OUTCOME_KINDS

    @property
    def changes_world(self) -> bool:
        """Whether the production stand-in differs once this event is in force (its scenario document,
        or the reward modules it holds)."""
        return (
            self.kind in DRIFT_KINDS or self.kind == "outcome" or (self.kind == "reward_fn" and "module" in self.args)
        )

    def label(self) -> str:
        if self.kind == "outcome":  # short: the label annotates the timeline's plot
            change = f"×{self.args['factor']:g}" if "factor" in self.args else "new expr"
            return f"h{self.at_hour:g} outcome ({self.args['field']} {change})"
        if self.kind == "reward_fn":
            return f"h{self.at_hour:g} reward_fn ({self.args['version']})"
        detail = ", ".join(f"{k}={v}" for k, v in self.args.items() if k != "init") or ", ".join(
            self.args.get("init", {})
        )
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
            raise UserError(f"{at}: expected a mapping with at_hour and kind, got {_shown(raw)}")
        kind = raw.get("kind")
        if not isinstance(kind, str) or kind not in KINDS:
            raise UserError(f"{at}: kind {_shown(kind)} unknown; expected one of {', '.join(KINDS)}")
        hour = raw.get("at_hour")
        if not _number(hour) or not hour >= 0:
            raise UserError(f"{at}: at_hour {_shown(hour)}: expected a number of hours >= 0 from the start")
        args = {k: v for k, v in raw.items() if k not in ("at_hour", "kind")}
        if kind == "outcome":
            _check_outcome(at, args)
        elif not (_KEYS[kind] <= set(args) <= _KEYS[kind] | _OPTIONAL.get(kind, set())):
            raise UserError(f"{at}: a {kind} event takes {sorted(_KEYS[kind]) or 'no other keys'}, got {sorted(args)}")
        if kind == "reward_fn" and not (isinstance(args["version"], str) and re.fullmatch(r"v\w+", args["version"])):
            raise UserError(
                f"{at}: version {args['version']!r}: expected a reward function label such as v2 "
                "(reward_<label>.py of the pack, or of the event's module)"
            )
        if kind == "reward_fn" and "module" in args:
            module_problem(args["module"], at)
        if kind == "latency" and not (_number(args["factor"]) and args["factor"] > 0):
            raise UserError(f"{at}: factor {_shown(args['factor'])}: expected a finite number > 0")
        if kind == "error_rate" and not (_number(args["rate"]) and 0 <= args["rate"] <= 1):
            raise UserError(f"{at}: rate {_shown(args['rate'])}: expected a probability in [0, 1]")
        if kind == "population" and not (isinstance(args["init"], dict) and args["init"]):
            raise UserError(f"{at}: init: expected a mapping of field path → initial distribution")
        out.append(Event(float(hour), str(kind), args))
    return sorted(out, key=lambda e: e.at_hour)


def _check_outcome(at: str, args: dict[str, Any]) -> None:
    keys = set(args)
    if "field" not in keys or not keys <= _OPTIONAL["outcome"] | {"field"} or ("factor" in keys) == ("expr" in keys):
        raise UserError(
            f"{at}: an outcome event takes field and either factor (with an optional when) or expr, got {sorted(keys)}"
        )
    if not isinstance(args["field"], str) or "." not in args["field"]:
        raise UserError(f"{at}: field {_shown(args['field'])}: expected a state field path such as hidden.default_prob")
    if "factor" in args and not (_number(args["factor"]) and args["factor"] >= 0):
        raise UserError(f"{at}: factor {_shown(args['factor'])}: expected a finite number >= 0")
    if "expr" in args and "when" in args:
        raise UserError(
            f"{at}: 'when' goes with factor; an expr replaces the field's expression for everyone "
            "(write the condition into the expression)"
        )
    for k in ("when", "expr"):
        if k in args and not (isinstance(args[k], str) and args[k].strip()):
            raise UserError(f"{at}: {k} {_shown(args[k])}: expected an expression over the scenario's state")


def _number(value: Any) -> TypeGuard[float]:
    """A finite int or float (not a boolean, not NaN or infinity)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: Any) -> str:
    """A value as an error shows it: bounded (an events file's YAML aliases can make a list of billions)."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = 80
    r.maxlist = r.maxdict = 4
    r.maxlevel = 2
    return r.repr(value)


def load_events(path: str | Path) -> list[Event]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise UserError(f"events file {p}: not found; expected a YAML file with an 'events:' list")
    try:
        doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise UserError(f"events file {p}: not UTF-8 text (byte {exc.start}); expected a YAML file") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of over 4,300 digits
        raise UserError(f"events file {p}: not valid YAML: {' '.join(str(exc).split())}") from exc
    if expands_past(doc, MAX_EVENT_VALUES):
        raise UserError(
            f"events file {p}: the document expands to more than {MAX_EVENT_VALUES:,} values once its "
            "aliases (*name) are expanded; expected an 'events:' list of a few entries (alias expansion is capped)"
        )
    return parse_events(doc, str(p))


def check_world(pack_dir: Path, events: list[Event], where: str = "events") -> None:
    """Build the production world with every event in force, as the timeline does once its last
    event has happened, in a scratch copy of the pack, and load it (expressions compiled by the
    sandbox's whitelist compiler). An event naming a field, action or API the pack lacks, or an
    expression or value the pack's checks refuse, is refused here, before the timeline starts —
    so a dry run refuses what the real run would only fail on hours into its timeline."""
    import yaml

    world = [e for e in events if e.changes_world]
    if not world:
        return
    doc = yaml.safe_load((pack_dir / "scenario.yaml").read_text())
    with tempfile.TemporaryDirectory(prefix="rlops-events-") as tmp:
        folder = Path(tmp) / pack_dir.name
        shutil.copytree(pack_dir, folder, symlinks=True)
        for name, module in reward_modules(world).items():
            shutil.copyfile(reward_module_path(pack_dir, module, f"{where}: reward module {name}"), folder / name)
        try:
            (folder / "scenario.yaml").write_text(yaml.safe_dump(production_doc(doc, world), sort_keys=False))
            load_pack(folder, check_liveness=False)
        except UserError as exc:
            message = " ".join(str(exc).replace(str(folder), f"(production copy of {pack_dir.name})").split())
            raise UserError(
                f"{where}: with every event in force the production world is not a valid pack: {message}"
            ) from None


def in_force(events: list[Event], hour: float) -> list[Event]:
    return [e for e in events if e.at_hour <= hour]


def module_problem(module: Any, at: str) -> None:
    """Refuse a ``reward_fn`` event's ``module`` that is not, by its text alone, a relative path to
    a ``.py`` file: an events file is data (see docs/trust-model.md), and the module it names is
    copied into the production world's pack and imported, so it may name only a pack author's file."""
    expected = "expected a relative path to a .py file inside the pack folder"
    if not isinstance(module, str) or not module.strip():
        raise UserError(f"{at}: module {module!r}: not a path; {expected}")
    if Path(module).is_absolute() or module.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", module):
        raise UserError(f"{at}: module {module!r}: an absolute path; {expected}")
    if ".." in re.split(r"[/\\]", module):
        raise UserError(f"{at}: module {module!r}: leaves the pack folder (..); {expected}")
    if not module.endswith(".py"):
        raise UserError(f"{at}: module {module!r}: not a .py file; {expected}")


def reward_module_path(pack_dir: Path, module: Any, at: str) -> Path:
    """The file inside ``pack_dir`` a ``reward_fn`` event's ``module`` names, after
    :func:`module_problem`'s checks and two that need the pack: no symlink on the way may lead out
    of the pack folder, and the file must exist. Refused with a :class:`UserError` otherwise."""
    module_problem(module, at)
    path = pack_dir / str(module)
    root, real = pack_dir.resolve(), path.resolve()
    if not real.is_relative_to(root):
        raise UserError(
            f"{at}: module {module!r}: a symlink leading out of the pack folder {pack_dir} (to {real}); "
            "expected a .py file inside the pack folder"
        )
    if not real.is_file():
        raise UserError(
            f"{at}: module {module!r}: no such file in the pack folder {pack_dir}; expected a .py file there"
        )
    return path


def check_reward_modules(events: list[Event], pack_dir: Path, where: str = "events") -> None:
    """Refuse, before anything is copied or imported, every ``reward_fn`` event whose ``module`` is
    not a ``.py`` file inside ``pack_dir`` (:func:`reward_module_path`)."""
    for e in events:
        if e.kind == "reward_fn" and "module" in e.args:
            reward_module_path(pack_dir, e.args["module"], f"{where}: {e.label()}")


def reward_modules(events: list[Event]) -> dict[str, str]:
    """``{reward_<label>.py: module path inside the pack}`` the production world adds for ``events``."""
    return {
        f"reward_{e.args['version']}.py": str(e.args["module"])
        for e in events
        if e.kind == "reward_fn" and "module" in e.args
    }


def reward_fn_in_force(events: list[Event], default: str) -> str:
    """The reward function the business scores production with once ``events`` are in force."""
    versions = [e.args["version"] for e in sorted(events, key=lambda e: e.at_hour) if e.kind == "reward_fn"]
    return str(versions[-1]) if versions else default


def _apply_outcome(out: dict[str, Any], e: Event) -> None:

    def rewrite(source: Any, bounded: bool) -> str:
        if "expr" in e.args:
            return str(e.args["expr"])
        return scaled(source, float(e.args["factor"]), e.args.get("when"), bounded)

    try:
        rewrite_field(out, e.args["field"], rewrite)
    except OutcomeFieldError as exc:
        raise UserError(f"event {e.label()}: {exc}") from None


def production_doc(doc: dict[str, Any], events: list[Event], live: str = "live") -> dict[str, Any]:
    """The scenario document of the production world with the ``events`` applied: drift events to
    its ``live`` profile (field initial distributions, action latencies, API error rates), outcome
    events to the hidden dynamics (the field's expressions wherever the scenario computes it)."""
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
        elif e.kind == "outcome":
            _apply_outcome(out, e)
    return out


DEFAULT_EVENTS_48H: dict[str, Any] = {
    "events": [
        {"at_hour": 10, "kind": "population", "init": {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}},
        {"at_hour": 20, "kind": "latency", "action": "fetch_credit_report", "factor": 3},
        {
            "at_hour": 24,
            "kind": "outcome",
            "field": "hidden.default_prob",
            "factor": 2.5,
            "when": "user_profile.age >= 60",
        },
        {"at_hour": 30, "kind": "error_rate", "api": "credit_bureau", "rate": 0.25},
        {"at_hour": 34, "kind": "reward_fn", "version": "v2", "module": "changes/reward_v2.py"},
        {"at_hour": 40, "kind": "bad_candidate"},
    ]
}


def scaled_events(hours: float) -> list[Event]:
    """The six standard events spread over ``hours`` as over 48 (a 12-hour run: 2.5, 5, 6, 7.5, 8.5, 10).

    Three input drifts (an older population at 10 h, a slower credit bureau at 20 h, bureau errors at
    30 h), an outcome change (applicants aged 60 and over default 2.5 times as often from 24 h: the
    population event made them common), a rule change (the business scores with ``reward_v2`` from
    34 h) and a deliberately worse candidate (40 h)."""
    return [Event(e.at_hour * hours / 48.0, e.kind, e.args) for e in parse_events(DEFAULT_EVENTS_48H)]
