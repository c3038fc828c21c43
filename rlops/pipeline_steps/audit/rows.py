"""Trace rows as the audit tools read them: the rows that fit the pack (a row that does not is
skipped with its reason), each row's reward components as columns, and the return-to-go of a
value (what is still to come in the episode after the step). ``rlops replay``, ``rlops audit``
and the console share them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlops.data_contracts.shapes import read_breakdown

if TYPE_CHECKING:  # numpy and pandas are imported where they run: registering the CLI stays light
    import pandas as pd

    from rlops.sandbox.pack import Pack


def screen_rows(pack: Pack, df: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``(usable rows, one reason per skipped row)``: a stored row whose action, action mask or step
    does not fit the pack (written by hand, by another version, around the contract) is skipped
    by the audit tools with its reason, never a reason to refuse the whole store. The usable rows'
    ``step`` is an integer column: one file of the store holding it as text makes the whole column
    text when the files are read together."""
    import numpy as np
    import pandas as pd

    names = pack.scenario.action_names
    n = len(names)
    mask = df["action_mask"].astype("string").fillna("") if "action_mask" in df else None
    action = df["action"].astype("string").fillna("") if "action" in df else None
    step = (
        pd.to_numeric(df["step"], errors="coerce").astype("Float64").to_numpy(dtype=float, na_value=np.nan)
        if "step" in df
        else None
    )
    bad = np.zeros(len(df), dtype=bool)
    reasons: list[str] = []
    if mask is not None:
        wrong = ~mask.str.fullmatch(r"[01]*1[01]*").fillna(False).to_numpy() | (mask.str.len() != n).to_numpy()
        bad |= wrong
    if action is not None:
        bad |= ~action.isin(list(names)).to_numpy()
    if step is not None:
        with np.errstate(invalid="ignore"):
            bad |= ~(np.isfinite(step) & (step % 1 == 0))
    for i in np.flatnonzero(bad)[:1000]:
        what = []
        if step is not None and not (np.isfinite(step[i]) and step[i] % 1 == 0):
            what.append(f"step {df['step'].iloc[i]!r} (not a whole number)")
        if mask is not None and (len(mask.iloc[i]) != n or "1" not in mask.iloc[i] or set(mask.iloc[i]) - {"0", "1"}):
            what.append(f"action_mask {mask.iloc[i]!r} (expected {n} '0'/'1' characters, one legal)")
        if action is not None and action.iloc[i] not in names:
            what.append(f"action {action.iloc[i]!r} (not an action of {pack.name})")
        reasons.append(f"trace {df['trace_id'].iloc[i] if 'trace_id' in df else i}: " + ", ".join(what))
    out = df.loc[~bad]
    if step is not None:
        out = out.assign(step=step[~bad].astype(np.int64))
    return out, reasons


def component_frame(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """Per-row component scores (one column per component) and each component's rule ref."""
    return component_records(df.index, [read_breakdown(text) for text in df["reward_breakdown"].tolist()])


def component_records(index: pd.Index, rows: list[list[dict[str, Any]]]) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """:func:`component_frame` of rows whose breakdowns are already read (one list of items each)."""
    import pandas as pd

    refs: dict[str, str | None] = {}
    recs = []
    for items in rows:
        recs.append({b["component"]: float(b["score"]) for b in items})
        for b in items:
            refs.setdefault(b["component"], b.get("rule_ref"))
    comp = pd.DataFrame.from_records(recs, index=index).fillna(0.0) if recs else pd.DataFrame(index=index)
    return comp, refs


def to_go(df: pd.DataFrame, values: pd.DataFrame) -> pd.DataFrame:
    """Per row, the sum of ``values`` from that step to the end of its episode."""
    order = df.sort_values(["episode_id", "step"], ascending=[True, False], kind="stable").index
    return values.loc[order].groupby(df.loc[order, "episode_id"].to_numpy()).cumsum().reindex(df.index)
