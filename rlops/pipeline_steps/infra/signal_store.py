"""Business signals: the values that move signal-driven reward weights, and their record.

A reward module declares which objective a signal drives and within which range
(:mod:`rlops.sandbox.reward_signals`). The business sets values — ``rlops signal set NAME VALUE``,
or an Airflow Variable ``<signals.variable_prefix><NAME>`` that the drift monitor reads each run —
and every value offered is kept, accepted or refused, in one small JSON document per signal in
storage (``<signals.dir>/<NAME>.json``)::

    {"name": "complaint_index",
     "history": [{"value": 0.4, "raw": "0.4", "at": "2026-12-05T01:50:00+00:00", "by": "cli",
                  "accepted": true, "reason": null}, ...]}

The value in force is the newest accepted one. A refused value (not a number, NaN, outside a
range some reward module declares, missing) is logged in one line, kept in the history with its
reason, and leaves the last good value in force; the reading then says so (``status:
last_good``), and that is what training runs and trace rows record. While no value was ever
accepted a signal is at its declared baseline (``status: baseline``): the module as written.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rlops.common.config import pack_names, scenarios_dir
from rlops.common.errors import UserError
from rlops.common.params_model import Params
from rlops.common.step_result import StepResult
from rlops.sandbox.reward_signals import SIGNAL_NAME, SignalWeight
from rlops.storage.backend import Storage

if TYPE_CHECKING:
    from rlops.common.params_model import SignalsParams
    from rlops.storage.backend import Storage


Status = Literal["set", "baseline", "last_good"]


@dataclass(frozen=True)
class Declaration:
    """Where a signal is declared: one ``SIGNAL_WEIGHTS`` entry of one reward module."""

    scenario: str
    reward_fn: str
    weight: SignalWeight

    def describe(self) -> str:
        w = self.weight
        return f"{self.scenario} reward_{self.reward_fn}.py SIGNAL_WEIGHTS[{w.objective!r}] [{w.low:g}, {w.high:g}]"


@dataclass(frozen=True)
class SignalReading:
    """A signal's value in force and how it came to be."""

    name: str
    value: float
    status: Status
    """``set`` (the newest value offered was accepted), ``last_good`` (the newest was refused: the
    last accepted one stays) or ``baseline`` (none accepted yet: the declared baseline)."""
    set_at: str | None
    """When the value in force was accepted (None: the baseline)."""
    note: str = ""
    """Why the status is not ``set``: the refused value and its reason."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "status": self.status, "set_at": self.set_at, "note": self.note}


@dataclass(frozen=True)
class Offer:
    """One value offered for a signal, as kept in its history."""

    value: float | None
    raw: str
    at: str
    by: str
    accepted: bool
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "raw": self.raw,
            "at": self.at,
            "by": self.by,
            "accepted": self.accepted,
            "reason": self.reason,
        }


class SignalStore:
    """The signals' documents under ``<root>/<signals.dir>/``."""

    def __init__(self, storage: Storage, config: SignalsParams) -> None:
        self.storage, self.config = storage, config

    def uri(self, name: str) -> str:
        check_name(name)
        return self.storage.join(self.config.dir, f"{name}.json")

    def history(self, name: str) -> list[Offer]:
        uri = self.uri(name)
        if not self.storage.exists(uri):
            return []
        return [Offer(**entry) for entry in (self.storage.read_json(uri) or {}).get("history", [])]

    def names(self) -> list[str]:
        """Signals with a document in storage."""
        uris = self.storage.list(self.storage.join(self.config.dir), suffix=".json")
        return sorted(u.rsplit("/", 1)[-1].removesuffix(".json") for u in uris)

    def offer(
        self, name: str, raw: Any, declarations: Sequence[Declaration], by: str, dry_run: bool = False
    ) -> tuple[Offer, SignalReading]:
        """Offer ``raw`` as the value of ``name``: checked against every declaration of the signal,
        recorded accepted or refused (not in a dry run). Returns the offer and the reading after it."""
        check_name(name)
        if not declarations:
            raise UserError(
                f"signal {name!r}: no reward module of the scenario packs declares it in SIGNAL_WEIGHTS; "
                "expected the name of a declared signal (rlops signal show lists them)"
            )
        value, reason = check_value(raw, declarations)
        entry = Offer(value, _text(raw), datetime.now(UTC).isoformat(timespec="seconds"), by, reason is None, reason)
        history = self.history(name) + [entry]
        if not dry_run:
            kept = history[-self.config.history :]
            self.storage.write_json(self.uri(name), {"name": name, "history": [h.as_dict() for h in kept]})
        return entry, reading_of(name, history, declarations)

    def reading(self, name: str, declarations: Sequence[Declaration]) -> SignalReading:
        return reading_of(name, self.history(name), declarations)


def check_name(name: str) -> None:
    if not isinstance(name, str) or not SIGNAL_NAME.match(name):
        raise UserError(f"signal name {name!r}: expected lower-case letters, digits and _ (e.g. complaint_index)")


def check_value(raw: Any, declarations: Sequence[Declaration]) -> tuple[float | None, str | None]:
    """``(value, None)`` when every declaration accepts ``raw``; else ``(None or the number, reason)``."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None, "no value (missing)"
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return None, f"{_text(raw)!r} is not a number"
    if not math.isfinite(value):
        return None, f"{_text(raw)!r} is not a finite number"
    for d in declarations:
        why = d.weight.refusal(value)
        if why is not None:
            return value, f"{why} ({d.describe()})"
    return value, None


def reading_of(name: str, history: Sequence[Offer], declarations: Sequence[Declaration]) -> SignalReading:
    """The value in force after ``history`` (see the module). An accepted value that a declaration
    now refuses (a module narrowed its range since) counts as refused."""
    newest = history[-1] if history else None
    for entry in reversed(history):
        if entry.accepted and check_value(entry.value, declarations)[1] is None:
            assert entry.value is not None
            if entry is newest:
                return SignalReading(name, entry.value, "set", entry.at)
            return SignalReading(
                name, entry.value, "last_good", entry.at, f"{_refusal(newest, declarations)}; kept {entry.value:g}"
            )
    baseline = declarations[0].weight.baseline if declarations else 0.0
    note = "" if newest is None else f"{_refusal(newest, declarations)}; at the baseline {baseline:g}"
    return SignalReading(name, baseline, "baseline", None, note)


def _refusal(entry: Offer | None, declarations: Sequence[Declaration]) -> str:
    if entry is None:
        return ""
    reason = entry.reason or check_value(entry.value, declarations)[1]
    return f"value {entry.raw} refused at {entry.at}: {reason}"


def _text(raw: Any) -> str:
    return raw if isinstance(raw, str) else repr(raw)


# --------------------------------------------------------------------------- declarations
def pack_declarations(scenario: str, reward_fns: Mapping[str, Any]) -> list[Declaration]:
    """The ``SIGNAL_WEIGHTS`` declarations of one pack's reward functions (label → RewardFunction)."""
    return [Declaration(scenario, label, sw) for label, fn in sorted(reward_fns.items()) for sw in fn.signal_weights]


def project_declarations(scenarios: Path, packs: Iterable[str]) -> dict[str, list[Declaration]]:
    """Every signal declared by the packs under ``scenarios``, by name."""
    from rlops.sandbox.pack import load_pack

    out: dict[str, list[Declaration]] = {}
    for name in packs:
        pack = load_pack(scenarios / name, check_liveness=False)
        for d in pack_declarations(pack.name, pack.reward_fns):
            out.setdefault(d.weight.signal, []).append(d)
    return out


def lineage(readings: Iterable[SignalReading]) -> dict[str, str]:
    """The readings as flat string fields for MLflow params and tags: ``signal.<name>`` (the value
    in force) and ``signal.<name>.status`` (``set``, ``last_good: …``, ``baseline``)."""
    out = {}
    for r in readings:
        out[f"signal.{r.name}"] = f"{r.value:g}"
        out[f"signal.{r.name}.status"] = r.status + (f": {r.note}" if r.note else "")
    return out


# --------------------------------------------------------------------------- the commands' library
@dataclass(frozen=True)
class SignalSet(StepResult):
    """What ``rlops signal set`` did: the value offered, as recorded, and the value in force after it."""

    signal: str
    offer: Offer
    in_force: SignalReading
    dry_run: bool
    """Checked only: nothing was recorded."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "offer": self.offer.as_dict(),
            "in_force": self.in_force.as_dict(),
            "dry_run": self.dry_run,
        }


@dataclass(frozen=True)
class DeclaredWeight:
    """One declaration of a signal, with the weight the value in force gives its objective."""

    declaration: Declaration
    weight_in_force: float

    def as_dict(self) -> dict[str, Any]:
        d, w = self.declaration, self.declaration.weight
        return {
            "scenario": d.scenario,
            "reward_fn": d.reward_fn,
            "objective": w.objective,
            "range": [w.low, w.high],
            "baseline": w.baseline,
            "weight_in_force": self.weight_in_force,
        }


@dataclass(frozen=True)
class SignalView:
    """One signal as ``rlops signal show`` lists it."""

    reading: SignalReading
    declared_by: tuple[DeclaredWeight, ...]
    history: tuple[Offer, ...]
    """The last offers, oldest first."""

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.reading.as_dict(),
            "declared_by": [d.as_dict() for d in self.declared_by],
            "history": [h.as_dict() for h in self.history],
        }


@dataclass(frozen=True)
class SignalsShown(StepResult):
    """What ``rlops signal show`` lists: every declared signal (or the one asked for)."""

    signals: tuple[SignalView, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"signals": [s.as_dict() for s in self.signals]}


def set_signal(params: dict[str, Any], name: str, raw: str, by: str = "cli", dry_run: bool = False) -> SignalSet:
    """``rlops signal set``: offer ``raw`` for ``name``, checked against every pack that declares it.
    A refused value is recorded as such and raises a :class:`UserError` (the last good value stays)."""
    check_name(name)
    config = Params.model_validate(params)
    root = scenarios_dir(params)
    decls = project_declarations(root, pack_names(root)).get(name, [])
    store = SignalStore(_storage(config), config.signals)
    entry, reading = store.offer(name, raw, decls, by, dry_run=dry_run)
    if not entry.accepted:
        raise UserError(
            f"signal {name}: value {entry.raw} refused: {entry.reason}; "
            f"{reading.value:g} stays in force ({reading.status})" + ("" if dry_run else ", the refusal is recorded")
        )
    return SignalSet(signal=name, offer=entry, in_force=reading, dry_run=dry_run)


def show_signals(params: dict[str, Any], name: str | None = None, last: int = 10) -> SignalsShown:
    """``rlops signal show``: every declared signal (or ``name``), its value in force, where it is
    declared with the weight that value gives, and its ``last`` offers."""
    config = Params.model_validate(params)
    root = scenarios_dir(params)
    declared = project_declarations(root, pack_names(root))
    store = SignalStore(_storage(config), config.signals)
    names = sorted(set(declared) | set(store.names())) if name is None else [name]
    out = []
    for n in names:
        decls = declared.get(n, [])
        if name is not None and not decls:
            check_name(n)
            raise UserError(f"signal {n!r}: no reward module of the scenario packs declares it in SIGNAL_WEIGHTS")
        history = store.history(n)
        reading = reading_of(n, history, decls)
        weights = tuple(DeclaredWeight(d, round(d.weight.weight(reading.value), 6)) for d in decls)
        out.append(SignalView(reading, weights, tuple(history[-last:])))
    return SignalsShown(tuple(out))


def _storage(config: Any) -> Storage:

    return Storage.from_params(config.storage)


def feed_airflow_variables(storage: Storage, config: SignalsParams, declarations: Sequence[Declaration]) -> list[str]:
    """Offer each declared signal's Airflow Variable (``<variable_prefix><name>``), when it is set
    and has changed since that Variable was last offered, to the store; called from an Airflow task (the
    drift monitor's), where the Task SDK reads Variables. Returns one line per value offered."""
    if not config.airflow_variables or not declarations:
        return []
    from airflow.sdk import Variable

    store = SignalStore(storage, config)
    by_name: dict[str, list[Declaration]] = {}
    for d in declarations:
        by_name.setdefault(d.weight.signal, []).append(d)
    lines = []
    for name, decls in sorted(by_name.items()):
        key = config.variable_prefix + name
        raw = Variable.get(key, default=None)
        if raw is None:
            continue
        mine = [h for h in store.history(name) if h.by == f"airflow:{key}"]
        if mine and mine[-1].raw == str(raw):
            continue  # offered before: the Variable has not changed since (a value set since stays)
        entry, reading = store.offer(name, str(raw), decls, by=f"airflow:{key}")
        lines.append(
            f"signal {name}: Airflow Variable {key}={entry.raw} "
            + ("accepted" if entry.accepted else f"refused ({entry.reason}); {reading.value:g} stays in force")
        )
    return lines
