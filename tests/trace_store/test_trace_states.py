"""Trace rows back to tensors: the same features whatever the ids' storage and however many rows
are encoded at a time; masks read from Arrow text as from Python strings."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import random_policy
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store import states as T


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)


@pytest.fixture(scope="module")
def shuffled(credit: Pack) -> pd.DataFrame:
    df = rollout_traces(credit, random_policy(0), 200, seed=1)
    return df.sample(frac=1, random_state=0).reset_index(drop=True)  # episodes interleaved


def _reference_previous(df: pd.DataFrame, values: np.ndarray, lag: int) -> np.ndarray:
    ep = df["episode_id"].astype(str).to_numpy()
    order = np.lexsort((pd.to_numeric(df["step"]).to_numpy(), ep))
    v, e = values[order], ep[order]
    out_sorted = np.zeros(len(v), dtype=np.float32)
    out_sorted[lag:] = np.where(e[lag:] == e[:-lag], v[:-lag], 0)
    out = np.empty_like(out_sorted)
    out[order] = out_sorted
    return out


@pytest.mark.parametrize("storage", ["str", "object", "category"])
def test_features_do_not_depend_on_id_storage_or_chunks(credit: Pack, shuffled: pd.DataFrame, storage: str) -> None:
    frame = shuffled.astype({"episode_id": storage})
    whole = T.state_features(credit, shuffled)
    assert torch.equal(T.state_features(credit, frame, chunk_rows=97), whole)
    codes = np.arange(len(frame), dtype=np.float32)
    for lag in (1, 2, 3):
        np.testing.assert_array_equal(
            T._previous_in_episode(frame, codes, lag), _reference_previous(shuffled, codes, lag)
        )
    assert torch.equal(T.history_from_traces(credit, frame), T.history_from_traces(credit, shuffled))


def test_masks_from_arrow_text_match_python_strings(credit: Pack, shuffled: pd.DataFrame) -> None:
    n = credit.scenario.n_actions
    col = shuffled["action_mask"]
    expected = np.array([[c == "1" for c in m] for m in col.astype(str)], dtype=bool)
    for variant in (col, col.astype(object), col.iloc[7:91], col.astype("string")):
        got = T.mask_matrix(variant, n)
        np.testing.assert_array_equal(got, expected[variant.index])
