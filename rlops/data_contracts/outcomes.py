"""The outcome contract: one late business outcome of an episode, as a landing-zone line or a row.

A line (what :meth:`rlops.agent_sdk.tracer.Tracer.outcome` writes, and what ``rlops outcome import``
reads from JSON lines)::

    {"episode_id": "app-8812", "ts": "2026-04-02T09:00:00Z", "scenario": "credit_approval",
     "values": {"default": 1.0, "recovered": 1200.0}, "components": {"collections_cost": -0.4}}

``values`` are named outcome values; the pack says which of them change the return and by how much
(``outcomes.rewards`` in its params.yaml). ``components`` are reward components the team computed
itself: each is added to the episode's return as it is. A CSV or parquet file spells the same record
flat, one column per key: ``values.default``, ``components.collections_cost`` (as trace rows spell
``state.<path>``). ``scenario`` is optional (the command's scenario when absent).

:func:`check_records` turns raw records into long rows, one per (episode, kind, name), and the
records that break the contract, each with its reason: records in = accepted + quarantined.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pandas as pd

from rlops.data_contracts.conversion import parse_timestamps
from rlops.data_contracts.json_schema import DRAFT, column_schema
from rlops.data_contracts.schema import ColumnSpec

#: The record's scalar keys, as contract columns (their JSON Schema comes from the trace contract's machinery).
OUTCOME_COLUMNS = (
    ColumnSpec("episode_id", "str", min_length=1, description="the episode the outcome belongs to (as traced)"),
    ColumnSpec("ts", "timestamp", description="when the outcome happened (UTC; ISO-8601 or epoch seconds)"),
    ColumnSpec("scenario", "str", required=False, min_length=1, description="the pack (default: the command's)"),
)
#: The two maps of named numbers, and how a flat (CSV, parquet) record prefixes their keys.
KINDS = ("values", "components")
MAX_NAME_CHARS = 200
#: The long form of accepted outcomes: one row per (episode, kind, name).
LONG_COLUMNS = ["scenario", "episode_id", "kind", "name", "value", "ts", "source_uri", "line_no", "record"]


@dataclass(frozen=True)
class OutcomeRecord:
    """One outcome of one episode: when it happened, its named values and explicit reward components."""

    episode_id: str
    ts: datetime
    values: Mapping[str, float] = field(default_factory=dict)
    components: Mapping[str, float] = field(default_factory=dict)
    scenario: str | None = None

    def as_line(self) -> dict[str, Any]:
        """The record as one JSON-lines object (``ts`` as ISO text; empty maps and scenario left out)."""
        out: dict[str, Any] = {"episode_id": self.episode_id, "ts": self.ts.isoformat()}
        if self.scenario is not None:
            out["scenario"] = self.scenario
        for kind in KINDS:
            named = dict(getattr(self, kind))
            if named:
                out[kind] = named
        return out


def outcome_json_schema() -> dict[str, Any]:
    """The JSON Schema of one outcome line (``rlops outcome schema`` prints it)."""
    number_map = {
        "type": "object",
        "propertyNames": {"minLength": 1, "maxLength": MAX_NAME_CHARS},
        "additionalProperties": {"type": ["number", "boolean"]},
    }
    return {
        "$schema": DRAFT,
        "title": "outcome: one late business outcome of an episode as a JSON object",
        "type": "object",
        "properties": {
            **{c.name: column_schema(c) for c in OUTCOME_COLUMNS},
            "values": {**number_map, "description": "named outcome values; the pack maps them to reward"},
            "components": {**number_map, "description": "reward components added to the return as they are"},
        },
        "required": [c.name for c in OUTCOME_COLUMNS if c.required],
        "anyOf": [{"required": ["values"]}, {"required": ["components"]}],
        "additionalProperties": False,
    }


@dataclass(frozen=True)
class CheckedOutcomes:
    """Records checked against the contract: the accepted ones in long form, the rest with reasons."""

    rows: pd.DataFrame
    """:data:`LONG_COLUMNS`, one row per value of each accepted record (``record``: its index in the input)."""
    quarantined: pd.DataFrame
    """``episode_id``, ``ts`` (as given), ``reason`` (``contract: …``), ``raw``, ``source_uri``, ``line_no``."""
    records: int
    accepted: int


def _number(value: Any) -> float | None:
    """A finite number (a bool counts as 0/1: a click is an outcome); None for anything else."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
        return number if math.isfinite(number) else None
    if hasattr(value, "item"):  # numpy scalars from a parquet or CSV file
        return _number(value.item())
    return None


def _missing(value: Any) -> bool:
    """None, NaN, NaT or pandas' NA: what a flat file holds where a record has no such key."""
    if value is None or isinstance(value, (str, Mapping, list)):
        return value is None
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _named(record: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """``{kind: {name: raw value}}`` from nested maps or flat ``<kind>.<name>`` keys (a flat key with
    no value is absent: a CSV row has every column), and the keys that are neither."""
    named: dict[str, dict[str, Any]] = {kind: {} for kind in KINDS}
    unknown = []
    for key, value in record.items():
        if key in KINDS and isinstance(value, Mapping):
            named[key].update(value)
        elif "." in key and key.split(".", 1)[0] in KINDS:
            if not _missing(value):
                kind, name = key.split(".", 1)
                named[kind][name] = value
        elif key not in {c.name for c in OUTCOME_COLUMNS}:
            unknown.append(key)
    return named, unknown


def _problem(record: Mapping[str, Any], scenario: str, named: dict[str, dict[str, Any]], unknown: list[str]) -> str:
    """Why a record breaks the contract ("" when it does not); ``ts`` is checked by the caller."""
    episode = record.get("episode_id")
    if not isinstance(episode, str) or not episode.strip():
        return f"episode_id {episode!r}: expected the episode's id as non-empty text"
    given = record.get("scenario")
    if not _missing(given) and given != scenario:
        return f"scenario {given!r}: this capture is of {scenario!r}"
    if unknown:
        return (
            f"unknown key(s) {sorted(unknown)[:5]}: expected episode_id, ts, scenario, values, components "
            "(or flat values.<name> / components.<name>)"
        )
    if not any(named.values()):
        return "no outcome: expected at least one number in values or components"
    for kind, names in named.items():
        for name, value in names.items():
            if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS or not name.isprintable():
                return f"{kind} name {str(name)[:80]!r}: expected printable text of 1 to {MAX_NAME_CHARS} characters"
            if _number(value) is None:
                return f"{kind}.{name} {str(value)[:80]!r}: expected a finite number (or true/false)"
    return ""


def check_records(
    records: list[dict[str, Any]], scenario: str, sources: list[str], line_nos: list[int]
) -> CheckedOutcomes:
    """Check raw records (one dict each, as read from a file or the landing zone; ``sources`` and
    ``line_nos`` say where each came from) against the contract of ``scenario``."""
    times = parse_timestamps(pd.Series([r.get("ts") for r in records], dtype=object))
    long: list[tuple[Any, ...]] = []
    bad: list[tuple[Any, ...]] = []
    for i, given in enumerate(records):
        record = {k: v for k, v in given.items() if not _missing(v)}  # an absent column of a flat row is no key
        named, unknown = _named(record)
        reason = _problem(record, scenario, named, unknown)
        if not reason and pd.isna(times.iloc[i]):
            reason = f"ts {str(record.get('ts'))[:80]!r}: expected the outcome's time (ISO-8601 or epoch seconds)"
        if reason:
            raw = json.dumps(record, default=str)[:4096]
            row = (_text(record.get("episode_id")), _text(record.get("ts")), f"contract: {reason}", raw)
            bad.append((*row, sources[i], line_nos[i]))
            continue
        for kind, names in named.items():
            for name, value in names.items():
                where = (sources[i], line_nos[i], i)
                long.append((scenario, record["episode_id"], kind, name, _number(value), times.iloc[i], *where))
    rows = pd.DataFrame(long, columns=LONG_COLUMNS)
    rows["value"] = rows["value"].astype("float64")
    rows["ts"] = pd.to_datetime(rows["ts"], utc=True).dt.as_unit("us")
    rows[["line_no", "record"]] = rows[["line_no", "record"]].astype("int64")
    quarantined = pd.DataFrame(bad, columns=["episode_id", "ts", "reason", "raw", "source_uri", "line_no"])
    return CheckedOutcomes(rows, quarantined, len(records), len(records) - len(bad))


def _text(value: Any) -> str | None:
    return None if _missing(value) else str(value)[:200]


__all__ = ["KINDS", "LONG_COLUMNS", "CheckedOutcomes", "OutcomeRecord", "check_records", "outcome_json_schema"]
