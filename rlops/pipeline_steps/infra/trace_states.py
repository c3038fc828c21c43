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

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from rlops.data_contracts.schema import STATE_PREFIX as STATE_PREFIX  # re-exported: readers of trace states use it

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack

Tensor = torch.Tensor
_NO_ERROR = frozenset({"", "false", "0", "none", "nan", "null", "<na>"})


# --------------------------------------------------------------------------- columns
def error_flags(col: pd.Series) -> np.ndarray:
    """``error`` as booleans: a bool column as is; text is an error unless empty/"false"/null."""
    if pd.api.types.is_bool_dtype(col.dtype):
        flags: np.ndarray = col.fillna(False).to_numpy(dtype=bool)
        return flags
    text = col.astype("string").fillna("").str.strip().str.lower()
    out: np.ndarray = (~text.isin(_NO_ERROR)).to_numpy(dtype=bool)
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
    raw = np.frombuffer("".join(text.tolist()).encode("ascii"), dtype=np.uint8)
    out: np.ndarray = raw.reshape(len(text), n_actions) == ord("1")
    return out


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


def states_from_traces(pack: Pack, df: pd.DataFrame) -> Tensor:
    """The state tensor ``S[N, C]`` of trace rows: observed fields from ``state.*`` columns
    (missing/not visible → 0), ``episode.step`` from ``step``, ``episode.last_action`` and
    ``episode.error`` from the previous row of the same episode. Hidden fields read 0."""
    scn = pack.scenario
    S = np.zeros((len(df), scn.n_cols), dtype=np.float32)
    for f in scn.spec.fields:
        name = STATE_PREFIX + f.path
        if f.observed and name in df.columns:
            S[:, scn.columns[f.path]] = np.nan_to_num(field_values(pack, f.path, df[name]), nan=0.0)
    if "step" in df.columns:
        S[:, scn.columns["episode.step"]] = pd.to_numeric(df["step"], errors="coerce").fillna(0).to_numpy()
    if "episode_id" in df.columns and "action" in df.columns:
        codes = (action_codes(pack, df["action"]) + 1).astype(np.float32)
        S[:, scn.columns["episode.last_action"]] = _previous_in_episode(df, codes, 1)
        if "error" in df.columns:
            err = error_flags(df["error"]).astype(np.float32)
            S[:, scn.columns["episode.error"]] = _previous_in_episode(df, err, 1)
    return torch.from_numpy(S)


def _previous_in_episode(df: pd.DataFrame, values: np.ndarray, lag: int) -> np.ndarray:
    """``values`` of the row ``lag`` steps earlier in the same episode (0 before its start);
    rows may come in any order."""
    ep = df["episode_id"].astype(str).to_numpy()
    step = pd.to_numeric(df["step"], errors="coerce").fillna(0).to_numpy()
    order = np.lexsort((step, ep))
    v, e = values[order], ep[order]
    out_sorted = np.zeros(len(v), dtype=np.float32)
    if 0 < lag < len(v):
        out_sorted[lag:] = np.where(e[lag:] == e[:-lag], v[:-lag], 0)
    out = np.empty_like(out_sorted)
    out[order] = out_sorted
    return out


def history_from_traces(pack: Pack, df: pd.DataFrame) -> Tensor:
    """The last ``history_len`` action codes (``a + 1``, 0 = none) before each row."""
    k = pack.scenario.layout.history_len
    codes = (action_codes(pack, df["action"]) + 1).astype(np.float32)
    hist = np.zeros((len(df), k), dtype=np.int64)
    for lag in range(1, k + 1):
        hist[:, k - lag] = _previous_in_episode(df, codes, lag).astype(np.int64)
    return torch.from_numpy(hist)


def observations_from_traces(pack: Pack, df: pd.DataFrame) -> tuple[Tensor, Tensor]:
    """``(obs[N, D], masks[N, A])``: the observation the policy saw at each trace row."""
    masks = torch.from_numpy(mask_matrix(df["action_mask"], pack.scenario.n_actions))
    S = states_from_traces(pack, df)
    return pack.scenario.encode(S, masks, history_from_traces(pack, df)), masks


def state_features(pack: Pack, df: pd.DataFrame) -> Tensor:
    """Encoded state features plus the mask (no history): what clustering compares."""
    masks = torch.from_numpy(mask_matrix(df["action_mask"], pack.scenario.n_actions))
    S = states_from_traces(pack, df)
    obs = pack.scenario.encode(S, masks, torch.zeros((len(df), pack.scenario.layout.history_len), dtype=torch.long))
    return obs[:, : pack.scenario.layout.n_features + pack.scenario.n_actions]


def normalized_entropy(entropy: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Entropy over legal actions divided by ``log(n_legal)``, in [0, 1]; 0 with one legal action."""
    n_legal = masks.sum(axis=1)
    denom = np.log(np.maximum(n_legal, 2))
    out = np.where(n_legal > 1, np.nan_to_num(entropy, nan=0.0) / denom, 0.0)
    return np.clip(out, 0.0, 1.0)


# --------------------------------------------------------------------------- reading
