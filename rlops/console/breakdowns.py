"""The reward breakdowns of many trace rows as component scores, parsed in one pass.

A decision map reads tens of thousands of rows; parsing each row's breakdown text with ``json`` and
shaping it item by item (``aggregates.breakdown_items``) was a third of the console's first load.
Rows kept in the trace store's own shape — ``{"total", "breakdown": [{component, score, reason,
rule_ref}]}``, one line of JSON — are parsed here together by Arrow's JSON reader, and every other
row (a list, ``{component: score}``, text with a line break, anything Arrow types differently) goes
through ``breakdown_items`` as before. The result is exactly what shaping each row, checking it
against the display limits (``shapes.displayable_items``) and tabulating it
(``rows.component_records``) gives; the tests compare the two on every shape.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from rlops.console.aggregates import breakdown_items
from rlops.data_contracts.shapes import MAX_COMPONENTS, MAX_TEXT, displayable_items
from rlops.pipeline_steps.audit.rows import component_records

_TEXT_FIELDS = ("component", "reason", "rule_ref")


def component_scores(index: pd.Index, raw: list[Any]) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """Per-row component scores (one column per component, in order of first appearance; 0 where a
    row has none; a row's repeated component keeps its last score) and each component's rule ref
    where it first appears, for the breakdowns ``raw`` of the rows ``index``."""
    fast = [i for i, v in enumerate(raw) if isinstance(v, str) and v[:1] == "{" and "\n" not in v and "\r" not in v]
    parsed = _arrow_items(raw, fast) if fast else None
    parts, read = [], np.zeros(0, dtype=np.int64)
    if parsed is not None:
        items, no_list = parsed
        parts.append(items)
        read = np.asarray(fast, dtype=np.int64)[~no_list]  # rows with no "breakdown" list: one by one
    slow = np.setdiff1d(np.arange(len(raw)), read)
    if slow.size:
        parts.append(_python_items(raw, slow))
    flat = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if flat.empty:
        return component_records(index, [[] for _ in raw])
    flat = flat.sort_values(["row", "pos"], kind="stable")
    order = list(dict.fromkeys(flat["component"].tolist()))
    first = flat.drop_duplicates("component", keep="first")
    refs = {c: (None if pd.isna(r) else str(r)) for c, r in zip(first["component"], first["rule_ref"], strict=True)}
    last = flat.drop_duplicates(["row", "component"], keep="last")
    table = last.pivot(index="row", columns="component", values="score")
    comp = table.reindex(index=np.arange(len(raw)), columns=order).fillna(0.0).astype(np.float64)
    comp.index, comp.columns = index, pd.Index(order)
    return comp, refs


def _python_items(raw: list[Any], rows: np.ndarray) -> pd.DataFrame:
    """The displayable items of ``rows``, read one by one as the console always has."""
    recs = [
        (int(r), pos, item["component"], float(item["score"]), item["rule_ref"])
        for r in rows
        for pos, item in enumerate(displayable_items(breakdown_items(raw[r])))
    ]
    return pd.DataFrame(recs, columns=["row", "pos", "component", "score", "rule_ref"])


def _arrow_items(raw: list[Any], fast: list[int]) -> tuple[pd.DataFrame, np.ndarray] | None:
    """``(row, pos, component, score, rule_ref)`` of the displayable items of the rows ``fast``,
    parsed together, and a mask of those rows whose breakdown is no list (to be read one by one).
    None when Arrow cannot read them all as the store's shape, or types a field
    otherwise than the console's reader would (then every row is read one by one)."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        data = "\n".join(raw[i] for i in fast).encode()
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
        )
    except (pa.ArrowException, UnicodeEncodeError, ValueError):
        return None
    if table.num_rows != len(fast) or "breakdown" not in table.column_names:
        return None
    lists = table.column("breakdown").combine_chunks()
    if not pa.types.is_list(lists.type):
        return None
    if pa.types.is_null(lists.type.value_type):  # only empty lists (or nulls)
        values, offsets = None, lists.offsets
    elif pa.types.is_struct(lists.type.value_type):
        values, offsets = lists.flatten(), lists.offsets
    else:
        return None
    no_list = lists.is_null().to_numpy(zero_copy_only=False)
    counts = np.diff(offsets.to_numpy())
    n = int(counts.sum())
    row = np.repeat(np.asarray(fast, dtype=np.int64), counts)
    pos = np.arange(n) - np.repeat(offsets.to_numpy()[:-1], counts)
    cols: dict[str, Any] = {}
    for name, kinds in (("component", "s"), ("score", "n"), ("reason", "s"), ("rule_ref", "s")):
        field = None if values is None or values.type.get_field_index(name) < 0 else values.field(name)
        if field is None or pa.types.is_null(field.type):
            cols[name] = pa.nulls(n, pa.string() if kinds == "s" else pa.float64())
        elif kinds == "s" and pa.types.is_string(field.type):
            cols[name] = field
        elif kinds == "n" and (pa.types.is_float64(field.type) or pa.types.is_int64(field.type)):
            cols[name] = pc.cast(field, pa.float64(), safe=False)  # as float() rounds a large int
        else:  # a number where text is read (or text where a score is): the reader's rules, row by row
            return None
    score = cols["score"].to_numpy(zero_copy_only=False)
    component = cols["component"]
    # an item counts when it is a named finite score (``breakdown_items``)
    valid = ~component.is_null().to_numpy(zero_copy_only=False) & np.isfinite(score)
    # a row is shown only when every item it counts passes the display limits (``displayable_items``)
    names = component.fill_null("").to_numpy(zero_copy_only=False)
    blank = np.array([not s.strip() for s in names], dtype=bool) if n else np.zeros(0, bool)
    too_long = np.zeros(n, dtype=bool)
    for name in _TEXT_FIELDS:
        too_long |= pc.fill_null(pc.utf8_length(cols[name]), 0).to_numpy(zero_copy_only=False) > MAX_TEXT
    bad = valid & (blank | too_long)
    rows_local = np.repeat(np.arange(len(fast)), counts)
    per_row = np.bincount(rows_local[valid], minlength=len(fast))
    rejected = (np.bincount(rows_local[bad], minlength=len(fast)) > 0) | (per_row > MAX_COMPONENTS)
    keep = valid & ~rejected[rows_local]  # a row with no list has no items here
    out = pd.DataFrame(
        {
            "row": row[keep],
            "pos": pos[keep],
            "component": names[keep],
            "score": score[keep],
            "rule_ref": cols["rule_ref"].to_numpy(zero_copy_only=False)[keep],
        }
    )
    return out, no_list
