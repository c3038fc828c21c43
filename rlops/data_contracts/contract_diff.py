"""What a pack change does to data of the old shape: ``rlops env diff NEW --scenario OLD``.

A pack's trace contract (:func:`rlops.data_contracts.contracts.contract_for`) says which decision rows
capture accepts and which states the policy client can encode. Changing the pack changes it, and the
agents already deployed keep sending the old shape while the trace store keeps the old rows.
:func:`contract_changes` lists each column that changed with what it means for those: a new field
with a ``default:`` is filled in (old agents keep working, rows counted as defaulted), a new
required field without one makes every old row and state invalid, a narrower range or a dropped
value refuses what falls outside it. :func:`stored_rows_under` then validates stored rows against
the new contract, through the same validation capture runs, so the figures are the rows a
re-capture or a replay would lose.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from rlops.data_contracts.validation import REASON_COLUMN, validate_frame

if TYPE_CHECKING:
    import pandas as pd

    from rlops.data_contracts.schema import ColumnSpec, Contract


@dataclass(frozen=True)
class ColumnChange:
    """One column of the contract that a pack change adds, removes or redefines."""

    column: str
    change: str
    """``added``, ``removed``, ``kind``, ``required``, ``default``, ``range`` or ``values``."""
    before: str
    after: str
    breaks: bool
    """Whether rows or states of the old shape can be refused because of it."""
    effect: str
    """What it does to agents that send the old shape and to rows already stored, in words."""


@dataclass(frozen=True)
class StoredImpact:
    """Stored rows validated against the new contract."""

    rows: int
    accepted: int
    quarantined: int
    reasons: dict[str, int] = field(default_factory=dict)
    """The most frequent quarantine reasons, with their row counts."""
    defaulted: dict[str, int] = field(default_factory=dict)
    """Rows per column that lacked it and would take its declared default."""


def _bounds(spec: ColumnSpec) -> str:
    return f"[{'' if spec.min is None else f'{spec.min:g}'}, {'' if spec.max is None else f'{spec.max:g}'}]"


def _narrower(old: float | None, new: float | None, lower: bool) -> bool:
    if new is None:
        return False
    if old is None:
        return True
    return new > old if lower else new < old


def _column_changes(name: str, old: ColumnSpec, new: ColumnSpec) -> list[ColumnChange]:
    out: list[ColumnChange] = []
    if old.kind != new.kind:
        effect = f"values stored or sent as {old.kind} must convert to {new.kind}; those that do not are refused"
        out.append(ColumnChange(name, "kind", old.kind, new.kind, True, effect))
    if old.required != new.required:
        breaks = new.required and new.default is None
        effect = (
            "rows and states without it are now refused"
            if breaks
            else ("rows without it now take its default" if new.required else "it may now be left out")
        )
        out.append(ColumnChange(name, "required", str(old.required), str(new.required), breaks, effect))
    if old.default != new.default:
        effect = (
            "rows and states that lack it take the new default"
            if new.default is not None
            else "rows and states that lack it no longer take a default"
            + (": they are refused" if new.required else "")
        )
        breaks = new.default is None and new.required
        out.append(ColumnChange(name, "default", repr(old.default), repr(new.default), breaks, effect))
    if (old.min, old.max) != (new.min, new.max):
        narrower = _narrower(old.min, new.min, True) or _narrower(old.max, new.max, False)
        effect = (
            f"values inside {_bounds(old)} but outside {_bounds(new)} are now refused"
            if narrower
            else "a wider range: every old value still fits"
        )
        out.append(ColumnChange(name, "range", _bounds(old), _bounds(new), narrower, effect))
    if old.values != new.values:
        dropped = sorted(set(old.values or ()) - set(new.values or ()), key=str) if new.values is not None else []
        effect = (
            f"rows and states with {', '.join(map(repr, dropped))} are now refused"
            if dropped
            else "new values only: every old value still fits"
        )
        before = "any" if old.values is None else ", ".join(map(str, old.values))
        after = "any" if new.values is None else ", ".join(map(str, new.values))
        out.append(ColumnChange(name, "values", before, after, bool(dropped), effect))
    return out


def contract_changes(old: Contract, new: Contract) -> list[ColumnChange]:
    """Every column the change from ``old`` to ``new`` adds, removes or redefines, in the new order
    (removed ones last), with its effect on data of the old shape."""
    out: list[ColumnChange] = []
    for spec in new.columns:
        if spec.name in old:
            out += _column_changes(spec.name, old[spec.name], spec)
        elif spec.required and spec.default is None:
            effect = "old agents do not send it: their states and rows are refused until they do (or it gets a default)"
            out.append(ColumnChange(spec.name, "added", "-", spec.kind, True, effect))
        else:
            effect = (
                f"old agents keep working: rows and states without it take {spec.default!r} (counted, one warning)"
                if spec.default is not None
                else "optional: old rows simply lack it"
            )
            out.append(ColumnChange(spec.name, "added", "-", spec.kind, False, effect))
    for spec in old.columns:
        if spec.name not in new:
            effect = "no longer stored: old agents may keep sending it, it is left out of the rows"
            out.append(ColumnChange(spec.name, "removed", spec.kind, "-", False, effect))
    return out


def stored_rows_under(rows: pd.DataFrame, new: Contract, top: int = 5) -> StoredImpact:
    """``rows`` (as the trace store returns them) validated against ``new``: how many it would accept,
    quarantine (with the ``top`` reasons) and fill with a default."""
    result = validate_frame(rows, new)
    reasons = Counter(str(r).split(";")[0] for r in result.quarantined.get(REASON_COLUMN, []))
    return StoredImpact(
        rows=len(rows),
        accepted=len(result.accepted),
        quarantined=len(result.quarantined),
        reasons=dict(reasons.most_common(top)),
        defaulted=dict(result.defaulted),
    )


def as_dict(changes: list[ColumnChange], stored: StoredImpact | None) -> dict[str, Any]:
    """The report ``rlops env diff --json`` prints."""
    return {
        "breaking": any(c.breaks for c in changes) or bool(stored and stored.quarantined),
        "changes": [asdict(c) for c in changes],
        "stored": None if stored is None else asdict(stored),
    }


__all__ = ["ColumnChange", "StoredImpact", "as_dict", "contract_changes", "stored_rows_under"]
