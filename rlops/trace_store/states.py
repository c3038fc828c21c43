"""Trace rows back to sandbox tensors, and the small helpers the quality steps share.

The stress test, label queue, recalibration and audit steps all read trace rows (one row per agent
step, ``state.<field>`` columns, ``action``, ``action_mask`` …) and need them as the tensors the
sandbox and the policy work with:

* :func:`states_from_traces` — the state tensor ``S[N, C]`` of a compiled scenario (observed fields
  only; hidden fields read 0, a field that was not visible reads 0 as the encoder shows it);
* :func:`mask_matrix` — the ``'0101'`` mask strings as a bool matrix;
* :func:`history_from_traces` / :func:`observations_from_traces` — the policy's observation,
  rebuilt from the episode's earlier rows;
* :func:`error_flags` — the ``error`` column as booleans (sandbox rows hold a bool, live rows an
  error message or null);

The HTML helpers are in :mod:`rlops.pipeline_steps.infra.html`.

Everything is vectorised over rows; nothing loops per row in Python.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import torch

from rlops.agent_sdk.tracer import NO_ERROR_TEXTS
from rlops.data_contracts.schema import STATE_PREFIX as STATE_PREFIX  # re-exported: readers of trace states use it

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack

Tensor = torch.Tensor


# --------------------------------------------------------------------------- columns
def error_flags(col: pd.Series) -> np.ndarray:
    """``error`` as booleans: a bool column as is; text is an error unless empty/"false"/null."""
    if pd.api.types.is_bool_dtype(col.dtype):
        flags: np.ndarray = col.fillna(False).to_numpy(dtype=bool)
        return flags
    text = col.astype("string").fillna("").str.strip().str.lower()
    out: np.ndarray = (~text.isin(NO_ERROR_TEXTS)).to_numpy(dtype=bool)
    return out


def mask_matrix(col: pd.Series, n_actions: int) -> np.ndarray:
    """``'0110'`` mask strings → bool ``[N, n_actions]``; a wrong length is a clear error."""
    text = col.astype("string").fillna("")
    bad = text.str.len() != n_actions
    if bool(bad.any()):
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise ValueError(
            f"action_mask of row {i} is {text.iloc[i]!r}: expected {n_actions} '0'/'1' "
            "characters, one per action in scenario order"
        )
    if len(text) == 0:
        return np.zeros((0, n_actions), dtype=bool)
    raw = _ascii_bytes(text)
    if raw is None or raw.size != len(text) * n_actions:
        raw = np.frombuffer("".join(text.tolist()).encode("ascii"), dtype=np.uint8)
    out: np.ndarray = raw.reshape(len(text), n_actions) == ord("1")
    return out


def _ascii_bytes(text: pd.Series) -> np.ndarray | None:
    """The characters of Arrow-backed text, concatenated, read straight from its value buffer
    (no Python string per row); None for other storage or non-ASCII text."""
    import pyarrow as pa

    try:
        arr = pa.array(text, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)) or arr.null_count:
        return None
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32 if pa.types.is_string(arr.type) else np.int64)
    offsets = offsets[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)[int(offsets[0]) : int(offsets[-1])]
    return None if bool((data >= 128).any()) else data


def action_codes(pack: Pack, col: pd.Series) -> np.ndarray:
    """Action names → indices in scenario order; an unknown name is a clear error."""
    names = pack.scenario.action_names
    codes = pd.Categorical(col.astype("string"), categories=list(names)).codes.astype(np.int64)
    if (codes < 0).any():
        bad = col[codes < 0].iloc[0]
        raise ValueError(f"action {bad!r} is not an action of scenario {pack.name} (actions: {list(names)})")
    out: np.ndarray = codes
    return out


def field_values(pack: Pack, path: str, col: pd.Series) -> np.ndarray:
    """One ``state.<path>`` column as float codes (enum index, bool 0/1, number); missing → NaN."""
    spec = pack.scenario.fields[path]
    if spec.type == "enum":
        codes = pd.Categorical(col.astype("string"), categories=list(spec.values)).codes
        return np.where(codes < 0, np.nan, codes.astype(np.float64))
    if spec.type == "bool":
        missing = col.isna().to_numpy()
        if pd.api.types.is_bool_dtype(col.dtype):
            truth = col.fillna(False).to_numpy(dtype=bool)
        else:
            text = col.astype("string").str.strip().str.lower()
            truth = text.isin(["true", "1", "1.0"]).fillna(False).to_numpy(dtype=bool)
        return np.where(missing, np.nan, truth.astype(np.float64))
    out: np.ndarray = pd.to_numeric(col, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    return out


def states_from_traces(pack: Pack, df: pd.DataFrame, previous: EpisodeOrder | None = None) -> Tensor:
    """The state tensor ``S[N, C]`` of trace rows: observed fields from ``state.*`` columns
    (missing/not visible → 0), ``episode.step`` from ``step``, ``episode.last_action`` and
    ``episode.error`` from the previous row of the same episode. Hidden fields read 0.
    ``previous``: the rows' :class:`EpisodeOrder` when already known (or when ``df`` is a slice of
    a larger frame, whose order then gives the previous rows)."""
    scn = pack.scenario
    S = np.zeros((len(df), scn.n_cols), dtype=np.float32)
    for f in scn.spec.fields:
        name = STATE_PREFIX + f.path
        if f.observed and name in df.columns:
            S[:, scn.columns[f.path]] = np.nan_to_num(field_values(pack, f.path, df[name]), nan=0.0)
    if "step" in df.columns:
        S[:, scn.columns["episode.step"]] = pd.to_numeric(df["step"], errors="coerce").fillna(0).to_numpy()
    if "episode_id" in df.columns and "action" in df.columns:
        if previous is None:
            previous = EpisodeOrder.of(df)
        last, err = previous.last_action_and_error(pack)
        S[:, scn.columns["episode.last_action"]] = last
        if err is not None:
            S[:, scn.columns["episode.error"]] = err
    return torch.from_numpy(S)


class EpisodeOrder:
    """The rows of a frame in episode order (by episode id, then step; ties in row order), sorted
    once for every look-back at earlier rows of the same episode. :meth:`slice` narrows it to a
    range of the rows, whose look-backs still come from the whole frame."""

    def __init__(self, df: pd.DataFrame, order: np.ndarray, same: dict[int, np.ndarray]) -> None:
        self.df, self.order, self._same = df, order, same
        self.rows = slice(0, len(df))
        self._last: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}

    @classmethod
    def of(cls, df: pd.DataFrame) -> EpisodeOrder:
        order, same = _episode_sort(df)
        return cls(df, order, {1: same})

    def slice(self, start: int, stop: int) -> EpisodeOrder:
        part = EpisodeOrder(self.df, self.order, self._same)
        part.rows, part._last = slice(start, stop), self._last  # the whole frame's look-backs, shared
        return part

    def same(self, lag: int) -> np.ndarray:
        """Whether each row of the sorted order is in the episode of the row ``lag`` before it."""
        if lag not in self._same:
            e = _episode_keys(self.df)[self.order]
            self._same[lag] = e[lag:] == e[:-lag]
        return self._same[lag]

    def previous(self, values: np.ndarray, lag: int) -> np.ndarray:
        """``values`` (one per row of the whole frame) of the row ``lag`` steps earlier in the same
        episode (0 before its start), for the rows of :attr:`rows`."""
        v = values[self.order]
        out_sorted = np.zeros(len(v), dtype=np.float32)
        if 0 < lag < len(v):
            out_sorted[lag:] = np.where(self.same(lag), v[:-lag], 0)
        out = np.empty_like(out_sorted)
        out[self.order] = out_sorted
        return out[self.rows]

    def last_action_and_error(self, pack: Pack) -> tuple[np.ndarray, np.ndarray | None]:
        """``episode.last_action`` (code + 1) and ``episode.error`` (None without an ``error``
        column) of :attr:`rows`: the previous row's, computed once for the whole frame."""
        full = self._last.get(id(pack))
        if full is None:
            whole = EpisodeOrder(self.df, self.order, self._same)
            codes = (action_codes(pack, self.df["action"]) + 1).astype(np.float32)
            err = error_flags(self.df["error"]).astype(np.float32) if "error" in self.df.columns else None
            full = (whole.previous(codes, 1), None if err is None else whole.previous(err, 1))
            self._last[id(pack)] = full
        return full[0][self.rows], None if full[1] is None else full[1][self.rows]


def _episode_keys(df: pd.DataFrame) -> np.ndarray:
    out: np.ndarray = df["episode_id"].astype(str).to_numpy()
    return out


def _episode_sort(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """The rows' order by (episode id as text, step), stable, and whether each sorted row shares
    the episode of the one before. In Arrow when the ids are text without nulls (a stable sort by
    the same keys: UTF-8 bytes order as the code points do), else with numpy."""
    import pyarrow as pa
    import pyarrow.compute as pc

    step = pd.to_numeric(df["step"], errors="coerce").fillna(0).to_numpy()
    col = df["episode_id"]
    ids = _text_ids(col) if len(df) and not bool(col.isna().any()) else None
    if ids is not None:
        table = pa.table({"e": ids, "s": pa.array(step)})
        order = pc.sort_indices(table, sort_keys=[("e", "ascending"), ("s", "ascending")]).to_numpy()
        e = ids.take(pa.array(order))
        same = pc.equal(e.slice(1), e.slice(0, len(e) - 1)).to_numpy(zero_copy_only=False).astype(bool)
        return order.astype(np.int64), same
    ep = _episode_keys(df)
    order = np.lexsort((step, ep))
    e = ep[order]
    return order, e[1:] == e[:-1]


def _text_ids(col: pd.Series) -> Any:
    """The ids as one Arrow text array (None unless every value is text already)."""
    import pyarrow as pa

    if isinstance(col.dtype, pd.CategoricalDtype):
        if not pd.api.types.is_string_dtype(col.cat.categories.dtype):
            return None
    elif not (pd.api.types.is_string_dtype(col.dtype) and col.dtype != np.dtype(object)):
        return None  # object columns may hold anything; str() of it is what the order is by
    try:
        ids = pa.array(col, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks()
    if pa.types.is_dictionary(ids.type):
        ids = ids.dictionary_decode()
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) or pa.types.is_string_view(ids.type)):
        return None
    return ids


def _previous_in_episode(df: pd.DataFrame, values: np.ndarray, lag: int) -> np.ndarray:
    """``values`` of the row ``lag`` steps earlier in the same episode (0 before its start);
    rows may come in any order."""
    return EpisodeOrder.of(df).previous(values, lag)


def history_from_traces(pack: Pack, df: pd.DataFrame) -> Tensor:
    """The last ``history_len`` action codes (``a + 1``, 0 = none) before each row."""
    k = pack.scenario.layout.history_len
    codes = (action_codes(pack, df["action"]) + 1).astype(np.float32)
    hist = np.zeros((len(df), k), dtype=np.int64)
    order = EpisodeOrder.of(df) if len(df) else None
    for lag in range(1, k + 1):
        if order is not None:
            hist[:, k - lag] = order.previous(codes, lag).astype(np.int64)
    return torch.from_numpy(hist)


def observations_from_traces(pack: Pack, df: pd.DataFrame) -> tuple[Tensor, Tensor]:
    """``(obs[N, D], masks[N, A])``: the observation the policy saw at each trace row."""
    masks = torch.from_numpy(mask_matrix(df["action_mask"], pack.scenario.n_actions))
    S = states_from_traces(pack, df)
    return pack.scenario.encode(S, masks, history_from_traces(pack, df)), masks


def state_features(pack: Pack, df: pd.DataFrame, chunk_rows: int = 262_144) -> Tensor:
    """Encoded state features plus the mask (no history): what clustering compares. Encoded
    ``chunk_rows`` rows at a time (the look-back at earlier rows over the whole frame), so a day's
    states cost their features' memory, not the encoder's intermediates for every row at once."""
    n_out = pack.scenario.layout.n_features + pack.scenario.n_actions
    if len(df) <= chunk_rows:
        return _features(pack, df, None)
    order = EpisodeOrder.of(df) if "episode_id" in df.columns and "action" in df.columns else None
    out = torch.empty((len(df), n_out), dtype=torch.float32)
    for i in range(0, len(df), chunk_rows):
        part = df.iloc[i : i + chunk_rows]
        out[i : i + len(part)] = _features(pack, part, order.slice(i, i + len(part)) if order is not None else None)
    return out


def _features(pack: Pack, df: pd.DataFrame, previous: EpisodeOrder | None) -> Tensor:
    masks = torch.from_numpy(mask_matrix(df["action_mask"], pack.scenario.n_actions))
    S = states_from_traces(pack, df, previous)
    obs = pack.scenario.encode(S, masks, torch.zeros((len(df), pack.scenario.layout.history_len), dtype=torch.long))
    return obs[:, : pack.scenario.layout.n_features + pack.scenario.n_actions].float()


def normalized_entropy(entropy: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Entropy over legal actions divided by ``log(n_legal)``, in [0, 1]; 0 with one legal action."""
    n_legal = masks.sum(axis=1)
    denom = np.log(np.maximum(n_legal, 2))
    out = np.where(n_legal > 1, np.nan_to_num(entropy, nan=0.0) / denom, 0.0)
    return np.clip(out, 0.0, 1.0)


# --------------------------------------------------------------------------- reading
