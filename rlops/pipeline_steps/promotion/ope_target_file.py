"""A file of per-row action probabilities as an off-policy target (``rlops model evaluate --target FILE``).

The file is a table — parquet, CSV or JSON lines, by its suffix — with a ``trace_id`` column, an
optional ``step`` column and one column per action of the pack: the target's probability of each
action at that logged row. Agent SDK traces carry one trace id per episode, so where the window's
trace ids repeat across an episode's steps the file needs its ``step`` column to tell the rows apart.

:func:`read_probabilities` checks what the file alone can show (its columns, keys and numbers:
finite, at least 0, each row summing to 1 within :data:`TOLERANCE`); :func:`probabilities_for_rows`
lines it up with the logged rows of the window's complete live episodes: every one of them needs
its row, and a masked (illegal) action may carry no mass. Each problem is one :class:`UserError`
naming the file, the first offending trace id and action.
"""

from __future__ import annotations

import stat
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rlops.common.errors import UserError

TOLERANCE = 1e-6
"""How far a row's probabilities may sum from 1, and the most mass a masked action may carry."""
SUFFIXES = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "JSON lines", ".ndjson": "JSON lines"}
KEY, STEP = "trace_id", "step"
MAX_STEP = 10**9


def is_file_spec(spec: str) -> bool:
    """Whether a ``--target`` names a file (rather than rules, uniform or a policy): an existing
    path, or a name with a table's suffix."""
    if Path(spec).suffix.lower() in SUFFIXES:
        return True
    try:
        return Path(spec).exists()
    except (OSError, ValueError):  # a name too long for the file system, a NUL byte
        return False


def read_probabilities(path: Path, actions: Sequence[str]) -> pd.DataFrame:
    """The file's rows: ``trace_id`` (text), ``step`` when given (integer) and one float column per
    action, every problem the file alone shows refused."""
    table = _read(path)
    columns = [str(c) for c in table.columns]
    table.columns = pd.Index(columns)
    unknown = [c for c in columns if c not in (KEY, STEP, *actions)]
    if unknown:
        raise UserError(
            f"--target {path}: column {unknown[0]!r} is neither {KEY}, {STEP} nor an action of the pack "
            f"(actions: {', '.join(actions)})"
        )
    if KEY not in columns:
        raise UserError(
            f"--target {path}: no {KEY} column: each row names the logged trace row it gives probabilities for"
        )
    missing = [a for a in actions if a not in columns]
    if missing:
        raise UserError(
            f"--target {path}: no column for action {', '.join(missing)}: one column per action of the pack"
        )
    key = table[KEY]
    blank = (key.isna() | key.astype(str).str.strip().eq("")).to_numpy()
    if blank.any():
        raise UserError(f"--target {path}: row {int(np.flatnonzero(blank)[0]) + 1} has no {KEY}")
    out = pd.DataFrame({KEY: key.astype(str)})
    if STEP in columns:
        step = pd.to_numeric(table[STEP], errors="coerce")
        bad = step.isna() | (step < 0) | (step > MAX_STEP) | (step != step.round())
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            shown = _shown(table[STEP].iloc[i])
            raise UserError(f"--target {path}: {KEY} {out[KEY].iloc[i]}: step {shown} is not a step index (0, 1, …)")
        out[STEP] = step.astype(np.int64)
    keys = [KEY, STEP] if STEP in out else [KEY]
    twice = out.duplicated(keys)
    if twice.any():
        row = out[twice].iloc[0]
        where = " ".join(f"{k} {row[k]}" for k in keys)
        raise UserError(f"--target {path}: {where} appears twice: one row per logged trace row")
    for a in actions:
        col = table[a]
        flags = (
            col.map(lambda v: isinstance(v, (bool, np.bool_))).to_numpy(dtype=bool)
            if col.dtype in (bool, object)  # a numeric column holds no flag: no pass over its values
            else np.zeros(len(col), dtype=bool)
        )
        if flags.any():  # pandas would read true as 1: a flag is no probability
            i = int(np.flatnonzero(flags)[0])
            raise UserError(
                f"--target {path}: {KEY} {out[KEY].iloc[i]}: the probability of {a} is {table[a].iloc[i]!r}, "
                "true/false, not a number in [0, 1]"
            )
        out[a] = pd.to_numeric(table[a], errors="coerce").astype(np.float64)
    _check_numbers(path, table, out, actions)
    return out


def _read(path: Path) -> pd.DataFrame:
    """The table in ``path``; a path that is no regular file, or a file that does not parse as what
    its suffix says, is a :class:`UserError` (a FIFO or a device is never opened: it could block)."""
    kind = SUFFIXES.get(path.suffix.lower())
    try:
        info = path.stat()
    except FileNotFoundError:
        raise UserError(f"--target {path}: no such file") from None
    except (OSError, ValueError) as exc:  # a name too long, a NUL byte, a folder on the way that is a file
        why = (exc.strerror if isinstance(exc, OSError) else None) or str(exc) or type(exc).__name__
        raise UserError(f"--target {_named(path)}: cannot read it ({why})") from None
    if stat.S_ISDIR(info.st_mode):
        raise UserError(f"--target {path}: a folder; expected a file of per-row action probabilities")
    if not stat.S_ISREG(info.st_mode):
        raise UserError(f"--target {path}: not a regular file (a pipe or a device); expected a table file")
    if kind is None:
        raise UserError(f"--target {path}: expected a {', '.join(SUFFIXES)} file of per-row action probabilities")
    try:
        if kind == "parquet":
            return pd.read_parquet(path)
        if kind == "csv":
            return pd.read_csv(path, dtype={KEY: str})
        return pd.read_json(path, lines=True, dtype={KEY: str})
    except Exception as exc:  # noqa: BLE001 - whatever the parser says of the user's file is bad input
        detail = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise UserError(f"--target {path}: not a readable {kind} file ({detail})") from None


def _check_numbers(path: Path, raw: pd.DataFrame, table: pd.DataFrame, actions: Sequence[str]) -> None:
    """Every probability finite and at least 0, every row summing to 1 (the first problem, by row)."""
    p = table[list(actions)].to_numpy(dtype=np.float64)
    not_finite = ~np.isfinite(p)
    negative = np.isfinite(p) & (p < 0)
    with np.errstate(invalid="ignore", over="ignore"):
        sums = p.sum(axis=1)
    off = ~(np.abs(sums - 1.0) <= TOLERANCE) & ~(not_finite | negative).any(axis=1)  # an overflowing sum too
    bad_rows = np.flatnonzero((not_finite | negative).any(axis=1) | off)
    if not len(bad_rows):
        return
    i = int(bad_rows[0])
    trace = table[KEY].iloc[i] + (f" step {table[STEP].iloc[i]}" if STEP in table else "")
    if off[i]:
        raise UserError(
            f"--target {path}: {KEY} {trace}: the probabilities sum to {sums[i]:.9g}, expected 1 (± {TOLERANCE:g})"
        )
    j = int(np.flatnonzero(not_finite[i] | negative[i])[0])
    what = "below 0" if negative[i, j] else "not a finite number"
    raise UserError(
        f"--target {path}: {KEY} {trace}: the probability of {actions[j]} is {_shown(raw[actions[j]].iloc[i])}, {what}"
    )


def probabilities_for_rows(
    path: Path, table: pd.DataFrame, rows: pd.DataFrame, actions: Sequence[str], mask: np.ndarray
) -> tuple[np.ndarray, int]:
    """``P[N, A]`` for the logged ``rows`` (in their order; ``mask[N, A]`` their legal actions) and
    the number of the file's rows that are no row of them (left aside)."""
    if rows.empty:
        return np.zeros((0, len(actions))), len(table)
    if KEY not in rows:
        raise UserError("the window's trace rows carry no trace_id: a file target cannot be lined up with them")
    logged = pd.DataFrame({KEY: rows[KEY].astype(str).to_numpy()})
    keys = [KEY]
    if STEP in table:
        logged[STEP] = pd.to_numeric(rows[STEP], errors="coerce").fillna(-1).astype(np.int64).to_numpy()
        keys.append(STEP)
    if logged.duplicated(keys).any():
        shared = logged[logged.duplicated(keys)][KEY].iloc[0]
        hint = "" if STEP in table else ": add a step column to the file"
        raise UserError(
            f"--target {path}: the window's rows are not told apart by {' and '.join(keys)} (trace id {shared} names "
            f"several logged rows, as one per episode does){hint}"
        )
    index = pd.MultiIndex.from_frame(table[keys]) if len(keys) > 1 else pd.Index(table[KEY])
    wanted = pd.MultiIndex.from_frame(logged) if len(keys) > 1 else pd.Index(logged[KEY])
    at = index.get_indexer(wanted)
    if (at < 0).any():
        first = logged.iloc[int(np.flatnonzero(at < 0)[0])]
        where = " ".join(f"{k} {first[k]}" for k in keys)
        raise UserError(
            f"--target {path}: no probabilities for {int((at < 0).sum()):,} of the {len(rows):,} logged rows of the "
            f"window's complete live episodes (first: {where}); the file needs a row for each"
        )
    p = table[list(actions)].to_numpy(dtype=np.float64)[at]
    masked = ~mask.astype(bool) & (p > TOLERANCE)
    if masked.any():
        i, j = (int(x[0]) for x in np.nonzero(masked))
        where = " ".join(f"{k} {logged[k].iloc[i]}" for k in keys)
        raise UserError(
            f"--target {path}: {where}: {p[i, j]:.6g} on {actions[j]}, which is masked (not legal) at that logged row; "
            "a masked action has probability 0"
        )
    extra = len(table) - len(np.unique(at))
    return np.where(mask, p, 0.0), extra


def _named(path: Path) -> str:
    """The path as an error shows it: control characters escaped, at most 200 characters."""
    text = str(path) if str(path).isprintable() else repr(str(path))
    return text if len(text) <= 200 else text[:200] + "…"


def _shown(value: object) -> str:
    """A value of the user's file as the error shows it: a number plainly, text quoted and cut."""
    if isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
        return f"{float(value):g}"
    return repr(str(value)[:40])
