"""State fields inferred from trace columns: type, range, unit, enum values, the initial
distribution and when the field becomes visible.

* **type** — ``bool`` when every value is a boolean, ``int``/``float`` when every value is a number
  (``int`` when all are whole, unless the file stores the column as floats without a missing value:
  ``0.0`` written as a float stays a float), else ``enum`` with the values in the order they were first seen;
* **range** — the observed minimum and maximum, rounded outwards to two significant digits unless
  values pile up there (a clipped bound: at least 0.5% of the values sit on it, kept exact): every
  row of the source file passes the contract;
* **init** — fitted to each episode's initial value (its first row; for a field that never changes
  within an episode and is hidden at first, its first visible value): a constant, a categorical, a
  Bernoulli, or the best of normal, lognormal and uniform by likelihood (parameters by
  :func:`rlops.pipeline_steps.drift.field_fits.fit_field`, the calibration's maximum-likelihood fit);
* **visible_when** — a field that is null on some rows is hidden until a bool field holds: the bool
  field whose value matches the field's presence on at least 99.9% of the rows.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.data_contracts.schema import STATE_PREFIX
from rlops.pack_init.cart import Feature
from rlops.pipeline_steps.drift.field_fits import fit_field
from rlops.sandbox.spec_types import FieldSpec, InitSpec

if TYPE_CHECKING:
    import pandas as pd

MAX_ENUM_VALUES = 40
"""A text column with more distinct values is an identifier, not a state field."""
CLIPPED_SHARE = 0.005
"""Share of the values on the observed extreme that marks a clipped (declared) bound."""
VISIBILITY_AGREEMENT = 0.999
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

UNIT_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"(^|_)ms$|millis", "ms"),
    (r"(^|_)(s|sec|secs|seconds)$", "s"),
    (r"(^|_)(min|mins|minutes)$", "minutes"),
    (r"(^|_)(h|hours)$", "hours"),
    (r"days?$", "days"),
    (r"months?$", "months"),
    (r"(^|_)age$|years?$", "years"),
    (r"(^|_)(pct|percent)$", "percent"),
    (r"ratio|share|rate|prob|fraction", "fraction"),
    (r"amount|income|price|cost|balance|revenue|salary|value|fee|payment", "currency"),
    (r"(^|_)(count|num|n)_|_count$|(^|_)(count|offers|attempts|retries)$", "count"),
    (r"score", "points"),
)


@dataclass(frozen=True)
class FieldGuess:
    """One state field as inferred from its trace column."""

    path: str
    """The field path, as the trace's ``state.<path>`` column names it."""
    type: str
    """``int``, ``float``, ``enum`` or ``bool``."""
    init: Any
    """The ``init:`` value of scenario.yaml: a constant or a distribution mapping."""
    min: float | None = None
    max: float | None = None
    unit: str | None = None
    values: tuple[str, ...] = ()
    """Enum values in the order they were first seen."""
    visible_when: str | None = None
    nulls: int = 0
    """Rows on which the field was null (hidden from the agent)."""
    evidence: str = ""
    """How the field was inferred, for the pack's README."""
    data: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False, compare=False)
    """Per-row values as floats (enum codes, bools 0/1, NaN where null), in the table's row order."""
    source_column: str | None = None
    """The trace column it was read from, where its name is not a dotted path of identifiers
    (``state.item-17`` → field ``item_17``); None when the column is ``state.<path>``."""

    def feature(self) -> Feature:
        return Feature(self.path, self.type, self.data, self.values)

    def spec(self) -> FieldSpec:
        return FieldSpec(self.path, self.type, self.min, self.max, self.unit, self.values)


@dataclass(frozen=True)
class SkippedColumn:
    column: str
    reason: str


def guess_unit(path: str) -> str | None:
    name = path.rsplit(".", 1)[-1].lower()
    for pattern, unit in UNIT_PATTERNS:
        if re.search(pattern, name):
            return unit
    return None


def infer_fields(df: pd.DataFrame, paths: tuple[str, ...]) -> tuple[list[FieldGuess], list[SkippedColumn]]:
    """A :class:`FieldGuess` per usable ``state.`` column of ``df`` (sorted by episode and step);
    the others with the reason they were left out."""
    guesses: list[FieldGuess] = []
    skipped: list[SkippedColumn] = []
    taken = {p for p in paths if all(IDENTIFIER.match(x) for x in p.split("."))}
    episode_start = _episode_starts(df)
    for path in paths:
        col = df[STATE_PREFIX + path]
        source = path
        if not all(IDENTIFIER.match(p) for p in path.split(".")):
            path = identifier_path(path)
            if path in taken:
                skipped.append(SkippedColumn(STATE_PREFIX + source, f"its field name {path} is another column's"))
                continue
        taken.add(path)
        if path.split(".")[0] == "episode":
            skipped.append(SkippedColumn(STATE_PREFIX + source, "'episode' is reserved"))
            continue
        typed = _typed(col)
        if typed is None:
            skipped.append(SkippedColumn(STATE_PREFIX + source, "every value is null"))
            continue
        kind, data, labels = typed
        if kind == "enum" and len(labels) > MAX_ENUM_VALUES:
            skipped.append(
                SkippedColumn(STATE_PREFIX + source, f"{len(labels)} distinct texts: an identifier, not a state")
            )
            continue
        guess = _guess(df, path, kind, data, labels, episode_start)
        guesses.append(guess if source == path else replace(guess, source_column=STATE_PREFIX + source))
    with_visibility = [_visibility(g, guesses) for g in guesses]
    return with_visibility, skipped


def identifier_path(path: str) -> str:
    """``path`` as a dotted path of identifiers: each character outside ``[A-Za-z0-9_]`` becomes
    ``_``, and a part that starts with a digit (or is empty) gets an ``f`` in front."""
    parts = [re.sub(r"[^A-Za-z0-9_]", "_", p) for p in path.split(".")]
    return ".".join(p if p and not p[0].isdigit() else f"f{p}" for p in parts)


def _episode_starts(df: pd.DataFrame) -> np.ndarray:
    ep = df["episode_id"].to_numpy()
    starts = np.ones(len(ep), dtype=bool)
    starts[1:] = ep[1:] != ep[:-1]
    return starts


def _typed(col: pd.Series) -> tuple[str, np.ndarray, tuple[str, ...]] | None:
    import pandas as pd

    present = col.notna().to_numpy()
    values = col[present]
    if values.empty:
        return None
    data = np.full(len(col), np.nan)
    if pd.api.types.is_bool_dtype(col.dtype) or all(isinstance(v, (bool, np.bool_)) for v in values):
        data[present] = values.astype(bool).to_numpy(dtype=np.float64)
        return "bool", data, ()
    numbers = pd.to_numeric(values, errors="coerce")
    if numbers.notna().all() and not any(isinstance(v, str) for v in values):
        x = numbers.to_numpy(dtype=np.float64)
        if not np.isfinite(x).all():
            return None
        data[present] = x
        # a float column with nulls may be integers a missing value widened; one without was written as floats
        stored_float = pd.api.types.is_float_dtype(col.dtype) and bool(present.all())
        whole = bool(np.all(x == np.round(x)))
        return ("int" if whole and not stored_float else "float"), data, ()
    text = values.astype(str)
    labels = tuple(pd.unique(text))
    codes = {v: i for i, v in enumerate(labels)}
    data[present] = text.map(codes).to_numpy(dtype=np.float64)
    return "enum", data, labels


def _guess(
    df: pd.DataFrame, path: str, kind: str, data: np.ndarray, labels: tuple[str, ...], starts: np.ndarray
) -> FieldGuess:
    present = ~np.isnan(data)
    initial = _initial_values(df, data, starts)
    unit = guess_unit(path) if kind in ("int", "float") else None
    lo = hi = None
    if kind in ("int", "float"):
        lo, hi = value_range(data[present], integer=kind == "int")
    init, how = fit_init(path, kind, initial, labels, lo, hi)
    if isinstance(init, (int, float)) and not isinstance(init, bool) and lo is not None and hi is not None:
        lo, hi = min(lo, float(init)), max(hi, float(init))
    seen = f"{int(present.sum())} values" + (f", {len(labels)} distinct" if kind == "enum" else "")
    rng = f", range [{_num(lo)}, {_num(hi)}]" if lo is not None else ""
    return FieldGuess(
        path,
        kind,
        init,
        lo,
        hi,
        unit,
        labels,
        nulls=int((~present).sum()),
        evidence=f"{kind} from {seen}{rng}; init {how} on {len(initial)} episodes",
        data=data,
    )


def _initial_values(df: pd.DataFrame, data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Each episode's initial value: its first row's, unless the field is hidden there and never
    changes within an episode (a fact revealed later, e.g. a fetched score): its first visible one."""
    import pandas as pd

    frame = pd.DataFrame({"e": df["episode_id"].to_numpy(), "v": data})
    varies = frame.dropna().groupby("e")["v"].nunique().gt(1).any()
    if varies or not np.isnan(data[starts]).any():
        first = data[starts]
    else:
        first = frame.dropna().drop_duplicates("e")["v"].to_numpy()
    out: np.ndarray = first[~np.isnan(first)]
    return out


def value_range(x: np.ndarray, integer: bool) -> tuple[float, float]:
    """``[min, max]`` of a numeric field from its values (see the module docstring)."""
    x_min, x_max = float(x.min()), float(x.max())
    # Every value of the source passes: a range that quarantines rows of the very file it was
    # learned from (a quantile range did, 0.1% of them) loses evidence at the first capture.
    lo = x_min if np.mean(x == x_min) >= CLIPPED_SHARE else _round_out(x_min, down=True)
    hi = x_max if np.mean(x == x_max) >= CLIPPED_SHARE else _round_out(x_max, down=False)
    if integer:
        lo, hi = float(math.floor(lo)), float(math.ceil(hi))
    return lo, hi


def _round_out(x: float, down: bool) -> float:
    if x == 0:
        return 0.0
    step = 10.0 ** (math.floor(math.log10(abs(x))) - 1)
    return float(f"{(math.floor if down else math.ceil)(x / step) * step:.12g}")


def _num(x: float | None) -> str:
    return "-" if x is None else (str(int(x)) if float(x).is_integer() else f"{x:.4g}")


def _sig(x: float, digits: int = 4) -> float:
    return float(f"{x:.{digits}g}")


def fit_init(
    path: str, kind: str, x: np.ndarray, labels: tuple[str, ...], lo: float | None, hi: float | None
) -> tuple[Any, str]:
    """The ``init:`` of a field from its initial values ``x``, and how it was chosen."""
    distinct = np.unique(x)
    if len(distinct) <= 1:
        v = float(distinct[0]) if len(distinct) else (lo if lo is not None else 0.0)
        return _constant(kind, v, labels), "constant"
    if kind == "bool":
        return {"dist": "bernoulli", "p": _sig(float(x.mean()))}, "Bernoulli"
    if kind == "enum":
        counts = np.bincount(x.astype(np.int64), minlength=len(labels))
        return {
            "dist": "categorical",
            "probs": {v: _sig(c / counts.sum()) for v, c in zip(labels, counts)},
        }, "categorical"
    best: tuple[float, dict[str, Any]] | None = None
    for dist in ("normal", "lognormal", "uniform"):
        if dist == "lognormal" and x.min() <= 0:
            continue
        params = fit_field(FieldSpec(path, kind, init=InitSpec(dist=dist)), x)
        ll = _loglik(params, x, kind == "int")
        if best is None or ll > best[0]:
            best = (ll, params)
    assert best is not None
    params = {k: (_sig(v) if isinstance(v, float) else v) for k, v in best[1].items()}
    if params["dist"] == "uniform" and kind == "int":
        params = {"dist": "uniform", "low": int(x.min()), "high": int(x.max())}
    return params, f"{params['dist']} (highest likelihood of normal, lognormal, uniform)"


def _constant(kind: str, v: float, labels: tuple[str, ...]) -> Any:
    if kind == "bool":
        return bool(v)
    if kind == "enum":
        return labels[int(v)]
    return int(v) if kind == "int" else _sig(v, 6)


def _loglik(p: dict[str, Any], x: np.ndarray, integer: bool) -> float:
    if p["dist"] == "uniform":
        width = p["high"] - p["low"] + (1.0 if integer else 0.0)
        return -len(x) * math.log(max(width, 1e-12))
    if p["dist"] == "normal":
        z, s = (x - p["mean"]) / p["std"], p["std"]
        return float(np.sum(-0.5 * z**2 - math.log(s * math.sqrt(2 * math.pi))))
    lx = np.log(x)
    z, s = (lx - p["mean"]) / p["sigma"], p["sigma"]
    return float(np.sum(-0.5 * z**2 - math.log(s * math.sqrt(2 * math.pi)) - lx))


def _visibility(g: FieldGuess, fields: list[FieldGuess]) -> FieldGuess:
    """``g`` with its ``visible_when`` when its presence follows a bool field (module docstring)."""
    if not g.nulls:
        return g
    present = ~np.isnan(g.data)
    best: tuple[float, str] | None = None
    for b in fields:
        if b.type != "bool" or b.path == g.path or b.nulls:
            continue
        on = b.data > 0.5
        for expr, holds in ((b.path, on), (f"not {b.path}", ~on)):
            agree = float(np.mean(holds == present))
            if agree >= VISIBILITY_AGREEMENT and (best is None or agree > best[0]):
                best = (agree, expr)
    if best is None:
        return g
    from dataclasses import replace

    return replace(
        g, visible_when=best[1], evidence=g.evidence + f"; visible when {best[1]} ({best[0]:.2%} of rows agree)"
    )


__all__ = ["FieldGuess", "SkippedColumn", "fit_init", "guess_unit", "infer_fields", "value_range"]
