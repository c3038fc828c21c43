"""A summarised window (streamed in frames) tests exactly as detect_drift does on its rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest

from rlops.pipeline_steps.drift.stats import default_fields, detect_drift
from rlops.pipeline_steps.drift.window import summarise_window
from rlops.pipeline_steps.drift.window_detect import ks_from_counts
from rlops.pipeline_steps.infra.prefetch import prefetched


def _frame(rng: np.random.Generator, n: int, shift: float, episodes: int, tag: str) -> pd.DataFrame:
    ep = np.sort(rng.integers(0, episodes, n))
    age = rng.normal(40 + shift, 10, n).round(0)  # many ties
    income = rng.lognormal(8 + shift / 20, 0.5, n)
    income[rng.random(n) < 0.2] = np.nan  # not yet visible on some rows
    score = rng.integers(300, 850, n)  # integers on both sides
    return pd.DataFrame(
        {
            "episode_id": [f"{tag}-{e}" for e in ep],
            "reward_total": rng.normal(0.5, 1, n),
            "state.age": age,
            "state.income": income,
            "state.score": score,
            "state.segment": pd.Series(
                rng.choice(["a", "b", "c", None], n, p=[0.5 - shift / 100, 0.3 + shift / 100, 0.1, 0.1])
            ),
            "state.flag": rng.random(n) < 0.3 + shift / 50,
            "latency_ms": rng.exponential(120, n),
            "error": pd.Series(np.where(rng.random(n) < 0.02, "timeout", None), dtype=object),
        }
    )


def _fields(rep: Any) -> list[dict[str, Any]]:
    out = []
    for f in rep.fields:
        out.append({k: ("nan" if isinstance(v, float) and math.isnan(v) else v) for k, v in f.__dict__.items()})
    return out


def _chunks(df: pd.DataFrame, size: int, categorical: bool) -> list[pd.DataFrame]:
    parts = [df.iloc[i : i + size].reset_index(drop=True) for i in range(0, len(df), size)]
    if categorical:  # as TraceReader.batches(categorical=True) hands them over: text as categoricals
        parts = [p.astype({c: "category" for c in p.columns if p[c].dtype == object}) for p in parts]
    return parts


@pytest.mark.parametrize("n_target", [3_000, 40_000])
@pytest.mark.parametrize("cluster", ["episode_id", None])
@pytest.mark.parametrize("categorical", [False, True])
def test_summarised_window_reports_what_the_rows_report(n_target: int, cluster: str | None, categorical: bool) -> None:
    rng = np.random.default_rng(3)
    base = _frame(rng, 4_000, 0.0, 800, "b")
    target = _frame(rng, n_target, 2.0, n_target // 5, "t").drop(columns=["state.flag"])  # a field of one side
    target["state.only_live"] = rng.normal(size=n_target)
    clusters = (base[cluster], target[cluster]) if cluster else None
    for fit_n in (None, 1500.0):
        ref = detect_drift(base, target, bh=True, clusters=clusters, baseline_fit_n=fit_n, workers=1)
        fields = default_fields(base, target)
        summary = summarise_window(_chunks(target, 7_001, categorical), base, fields, len(target), cluster)
        from rlops.pipeline_steps.drift.window_detect import detect_drift_window

        got = detect_drift_window(base, summary, bh=True, cluster=cluster, baseline_fit_n=fit_n)
        assert _fields(got) == _fields(ref)
        assert (got.n_baseline_rows, got.n_target_rows) == (ref.n_baseline_rows, ref.n_target_rows)
    returns = target.groupby("episode_id")["reward_total"].sum().to_numpy()
    np.testing.assert_allclose(np.sort(summary.episode_returns), np.sort(returns), rtol=1e-12)
    assert len(summary.plot_rows) <= 200_000 and set(summary.plot_rows.columns) <= set(fields)
    small = summarise_window(prefetched(_chunks(target, 7_001, False)), base, fields, len(target), cluster, 1_000)
    every = small.plot_every
    assert every == -(-len(target) // 1_000)
    pd.testing.assert_frame_equal(
        small.plot_rows, target[list(small.plot_rows.columns)].iloc[::every].reset_index(drop=True)
    )


def test_prefetched_frames_come_in_order_and_errors_surface() -> None:
    frames = [pd.DataFrame({"a": [i]}) for i in range(5)]
    assert [int(f["a"].iloc[0]) for f in prefetched(iter(frames))] == list(range(5))

    def broken() -> Any:
        yield frames[0]
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        list(prefetched(broken()))
    first = next(prefetched(iter(frames)))  # a consumer that stops early lets the reader go
    assert int(first["a"].iloc[0]) == 0


def test_ks_from_counts_is_the_statistic_of_the_rows() -> None:
    from rlops.pipeline_steps.drift.ks import ks_statistic

    rng = np.random.default_rng(0)
    for _ in range(200):
        b = np.sort(rng.integers(0, 30, rng.integers(1, 60)).astype(float))
        t = np.sort(rng.integers(-5, 35, rng.integers(1, 80)).astype(float))
        cuts = np.unique(b)
        k = np.searchsorted(cuts, t, side="right")
        below = np.bincount(k, minlength=cuts.size + 1)
        on = (k > 0) & (t == cuts[np.maximum(k - 1, 0)])
        equal = np.bincount(k[on] - 1, minlength=cuts.size)
        assert ks_from_counts(b, cuts, below, equal, t.size) == ks_statistic(b, t)
