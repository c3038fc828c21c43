"""Drift step: KS statistics/p-values equal to scipy's ks_2samp, chi-square, BH, the effect
floor, field handling, the HTML report and the storage/MLflow wrapper."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import scipy.stats
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlops.cli import main as rlops_main
from rlops.pipeline_steps.drift.ks import _kstwo_sf, ks_pvalue, ks_statistic, ks_statistic_unsorted
from rlops.pipeline_steps.drift.ks_kernels import bucket_counts, compile_kernels
from rlops.pipeline_steps.drift.report import render_html, run_drift
from rlops.pipeline_steps.drift.stats import (
    MISSING,
    DriftReport,
    benjamini_hochberg,
    default_fields,
    detect_drift,
)


def same_p(ours: float, ref: float) -> bool:
    """Equal to float precision: a few ulps (the extended-precision Smirnov sum), or both
    below the normal range."""
    return ours == ref or abs(ours - ref) <= 8 * np.spacing(ref) or max(ours, ref) < 1e-300


def rlops_ks(a: np.ndarray, b: np.ndarray) -> tuple[float, float, str]:
    a, b = np.sort(np.asarray(a)), np.sort(np.asarray(b))
    return ks_pvalue(ks_statistic(a, b), a.size, b.size)


def assert_like_scipy(a: np.ndarray, b: np.ndarray) -> str:
    d, p, method = rlops_ks(a, b)
    ref = scipy.stats.ks_2samp(a, b)
    assert d == float(ref.statistic), (d, ref.statistic)
    assert same_p(p, float(ref.pvalue)), (p, ref.pvalue)
    return method


# --------------------------------------------------------------------------- KS vs scipy
samples = st.one_of(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False, width=64), min_size=1, max_size=60),
    st.lists(st.integers(0, 4).map(float), min_size=1, max_size=60),  # heavy ties
    st.lists(st.sampled_from([-np.inf, -1.0, 0.0, 0.5, np.inf]), min_size=1, max_size=30),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(samples, samples)
def test_ks_equals_scipy_on_generated_pairs(a: list[float], b: list[float]) -> None:
    # small samples: scipy's exact method, or its asymptotic fallback when the exact count
    # fails (it does for some tie patterns, e.g. [0]*5 vs [0]*4+[1]); we must follow both
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert_like_scipy(np.array(a), np.array(b))


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 3000), st.floats(-0.5, 0.5), st.integers(0, 2**31))
def test_ks_equals_scipy_on_generated_normal_samples(n1: int, n2: int, shift: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    assert_like_scipy(rng.normal(size=n1), rng.normal(shift, 1.0, size=n2))


@pytest.mark.parametrize(
    ("n1", "n2", "shift", "ties", "method"),
    [
        (3, 4, 0.0, False, "exact"),
        (100, 100, 0.3, False, "exact"),
        (10_000, 10_000, 0.05, False, "exact"),  # scipy's largest 'auto' exact size
        (10_000, 7_001, 0.0, True, "exact"),
        (10_001, 500, 0.1, False, "asymp"),
        (50_000, 50_000, 0.0, True, "asymp"),  # integer data: ties across samples
        (200_000, 150_000, 0.01, False, "asymp"),  # p from the Smirnov series (n d^2 in [2.2, 370))
        (200_000, 200_000, 0.3, False, "asymp"),  # p underflows to 0
    ],
)
def test_ks_equals_scipy_by_size(n1: int, n2: int, shift: float, ties: bool, method: str) -> None:
    rng = np.random.default_rng(n1 + n2)
    a, b = rng.normal(size=n1), rng.normal(shift, 1.0, size=n2)
    if ties:
        a, b = np.round(a * 3), np.round(b * 3)
    assert assert_like_scipy(a, b) == method


def _unsorted_sample(kind: str, n: int, shift: float, rng: np.random.Generator) -> np.ndarray:
    if kind == "normal":
        return rng.normal(shift, 1.0, n)
    if kind == "outliers":  # a few huge values: the grid comes from inner quantiles
        x = rng.normal(shift, 1.0, n)
        x[rng.integers(0, n, 5)] = rng.choice([-1e300, 1e12, np.inf, -np.inf], 5)
        return x
    if kind == "heavy":  # lognormal: most values in a few buckets of a linear grid
        return rng.lognormal(shift, 3.0, n)
    if kind == "ties":  # few distinct values: whole buckets of one value
        return np.round(rng.normal(shift, 1.0, n) * 2)
    if kind == "ints":
        return rng.integers(0, 40, n) + int(shift * 10)
    return np.full(n, 3.0) + (rng.random(n) < 0.5) * shift  # "two": one or two values


@pytest.mark.parametrize("kind", ["normal", "outliers", "heavy", "ties", "ints", "two"])
@pytest.mark.parametrize(
    ("n1", "n2", "shift"),
    [
        (20_000, 30_000, 0.0),
        (50_000, 17_000, 0.05),
        (40_000, 40_000, 1.0),
        (300_001, 140_000, 0.01),  # several chunks of the counting pass, the last one short
    ],
)
def test_unsorted_statistic_is_scipys(kind: str, n1: int, n2: int, shift: float) -> None:
    # sizes above the sort-below threshold: the counting pass, its refinement and fallbacks
    rng = np.random.default_rng(n1 + n2 + len(kind))
    a, b = _unsorted_sample(kind, n1, 0.0, rng), _unsorted_sample(kind, n2, shift, rng)
    ref = scipy.stats.ks_2samp(a, b, method="asymp")
    assert ks_statistic_unsorted(a, b) == (float(ref.statistic), n1, n2)
    assert ks_statistic_unsorted(b, a) == (float(scipy.stats.ks_2samp(b, a, method="asymp").statistic), n2, n1)


@pytest.mark.parametrize(
    ("n1", "n2", "shift"), [(30_000, 20_000, 0.0), (300_001, 140_000, 0.01), (40_000, 40_000, 1.0)]
)
def test_unsorted_statistic_leaves_nan_out(n1: int, n2: int, shift: float) -> None:
    # missing values among the counted ones (NaN joins the lowest bucket, which is often refined)
    rng = np.random.default_rng(n1 - n2)
    a, b = rng.normal(0.0, 1.0, n1), rng.normal(shift, 1.0, n2)
    a[rng.random(n1) < 0.02], b[rng.random(n2) < 0.3] = np.nan, np.nan
    a[:50] = -np.inf  # the low tail bucket holds both NaN and values
    ka, kb = a[~np.isnan(a)], b[~np.isnan(b)]
    ref = scipy.stats.ks_2samp(ka, kb, method="asymp")
    assert ks_statistic_unsorted(a, b) == (float(ref.statistic), ka.size, kb.size)


@pytest.mark.parametrize("small", [True, False])
def test_unsorted_statistic_of_an_all_nan_sample_is_nan(small: bool) -> None:
    n = 100 if small else 50_000
    d, n_a, n_b = ks_statistic_unsorted(np.full(n, np.nan), np.random.default_rng(0).normal(size=n))
    assert math.isnan(d) and (n_a, n_b) == (0, n)


@pytest.mark.parametrize(
    ("n", "nd2"),
    [
        *[(n, nd2) for n in (4096, 20_000, 150_000) for nd2 in (2.2, 2.5, 7.9, 60.0, 369.0)],
        *[(n, nd2) for n in (4099, 77_777, 500_000) for nd2 in (2.3, 20.0, 200.0)],  # blocks of 16 cut short
        (1_000_000, 3.1),
        (1_000_000, 369.0),
    ],
)  # SMIRNOV_MAX_COMPUTE_N: the last n summed exactly
def test_kstwo_sf_fast_path_matches_scipy(n: int, nd2: float) -> None:
    d = math.sqrt(nd2 / n) * 1.0001
    ref = float(scipy.stats.kstwo.sf(d, float(n)))
    assert same_p(_kstwo_sf(d, float(n)), ref)


def test_int_and_nullable_columns_match_scipy() -> None:
    rng = np.random.default_rng(3)
    b = pd.DataFrame(
        {"state.k": rng.integers(0, 50, 3000), "state.m": pd.array(rng.integers(0, 9, 3000), dtype="Int64")}
    )
    t = pd.DataFrame(
        {
            "state.k": rng.integers(2, 52, 2000).astype(float),
            "state.m": pd.array([None] * 100 + list(rng.integers(0, 9, 1900)), dtype="Int64"),
        }
    )
    rep = detect_drift(b, t)
    for f in rep.fields:
        xb = b[f.field].to_numpy(dtype=float, na_value=np.nan)
        xt = t[f.field].to_numpy(dtype=float, na_value=np.nan)
        ref = scipy.stats.ks_2samp(xb[~np.isnan(xb)], xt[~np.isnan(xt)])
        assert f.test == "ks" and f.statistic == ref.statistic and f.p_value == ref.pvalue
    assert rep.fields[1].n_target == 1900


def test_nans_are_dropped_per_field() -> None:
    rng = np.random.default_rng(4)
    a, b = rng.normal(size=20_000), rng.normal(0.05, 1, size=15_000)
    a[::7], b[::5] = np.nan, np.nan
    rep = detect_drift(pd.DataFrame({"state.x": a}), pd.DataFrame({"state.x": b}))
    f = rep.fields[0]
    ref = scipy.stats.ks_2samp(a[~np.isnan(a)], b[~np.isnan(b)])
    assert (f.n_baseline, f.n_target) == (int((~np.isnan(a)).sum()), int((~np.isnan(b)).sum()))
    assert f.statistic == ref.statistic and same_p(f.p_value, float(ref.pvalue))


def test_threads_do_not_change_results() -> None:
    rng = np.random.default_rng(5)
    b = pd.DataFrame({f"state.f{i}": rng.normal(size=30_000) for i in range(6)})
    t = pd.DataFrame({f"state.f{i}": rng.normal(0.02 * i, 1, size=30_000) for i in range(6)})
    assert detect_drift(b, t, workers=1).fields == detect_drift(b, t, workers=4).fields


# --------------------------------------------------------------------------- BH, chi2, effect
def test_benjamini_hochberg_hand_computed() -> None:
    # sorted 0.005, 0.01, 0.03, 0.04 (m=4) -> p*m/rank 0.02, 0.02, 0.04, 0.04, already monotone
    adj = benjamini_hochberg([0.01, 0.04, 0.03, 0.005])
    np.testing.assert_allclose(adj, [0.02, 0.04, 0.04, 0.02])
    p = np.random.default_rng(0).uniform(size=50) ** 3
    np.testing.assert_allclose(benjamini_hochberg(p), scipy.stats.false_discovery_control(p))
    assert benjamini_hochberg([]).size == 0


def test_bh_changes_the_decision() -> None:
    rng = np.random.default_rng(11)
    n = 3000
    base = {f"state.f{i}": rng.normal(size=n) for i in range(20)}
    targ = {f"state.f{i}": rng.normal(size=n) for i in range(20)}
    targ["state.f0"] = rng.normal(0.13, 1, size=n)  # raw p a little under 0.01
    b, t = pd.DataFrame(base), pd.DataFrame(targ)
    plain = detect_drift(b, t, threshold=0.01, min_effect=0.0, bh=False)
    adjusted = detect_drift(b, t, threshold=0.01, min_effect=0.0, bh=True)
    f0 = plain.fields[0]
    assert f0.p_value < 0.01 and f0.p_adjusted == f0.p_value and f0.drifted
    a0 = adjusted.fields[0]
    assert a0.p_value == f0.p_value and a0.p_adjusted == pytest.approx(min(1, f0.p_value * 20))
    assert not a0.drifted and "after BH" in adjusted.summary


def test_chi_square_on_shifted_categorical() -> None:
    rng = np.random.default_rng(6)
    cats = np.array(["low", "mid", "high"])
    b = pd.DataFrame({"state.band": rng.choice(cats, 5000, p=[0.5, 0.3, 0.2])})
    t = pd.DataFrame({"state.band": rng.choice(cats, 4000, p=[0.38, 0.3, 0.32])})
    same = pd.DataFrame({"state.band": rng.choice(cats, 4000, p=[0.5, 0.3, 0.2])})
    f = detect_drift(b, t).fields[0]
    table = pd.crosstab(np.r_[np.zeros(5000), np.ones(4000)], np.r_[b["state.band"], t["state.band"]]).to_numpy()
    ref = scipy.stats.chi2_contingency(table)
    assert f.test == "chi2" and f.drifted and f.statistic == pytest.approx(ref.statistic)
    assert f.p_value == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-300)
    assert f.effect == pytest.approx(0.12, abs=0.03) and f.effect_name == "total_variation"
    assert not detect_drift(b, same).fields[0].drifted


def test_missing_error_values_are_a_category() -> None:
    b = pd.DataFrame({"error": [None] * 980 + ["timeout"] * 20, "latency_ms": np.arange(1000.0)})
    t = pd.DataFrame({"error": [None] * 850 + ["timeout"] * 150, "latency_ms": np.arange(1000.0) * 1.6})
    rep = detect_drift(b, t)
    assert default_fields(b, t) == ["error", "latency_ms"]
    err, lat = rep.fields
    assert err.field == "error" and err.test == "chi2" and err.n_baseline == 1000
    assert err.drifted and err.effect == pytest.approx(0.13)
    assert lat.test == "ks" and lat.drifted and set(rep.drifted_fields) == {"error", "latency_ms"}
    assert MISSING == "(no value)"


def test_effect_floor_keeps_tiny_shift_on_large_sample_undrifted() -> None:
    rng = np.random.default_rng(8)
    n = 200_000
    b = pd.DataFrame({"state.x": rng.normal(size=n)})
    t = pd.DataFrame({"state.x": rng.normal(0.025, 1.0, size=n)})
    f = detect_drift(b, t, threshold=0.01, min_effect=0.05).fields[0]
    assert f.p_value < 0.01 and f.effect < 0.05 and not f.drifted
    assert detect_drift(b, t, threshold=0.01, min_effect=0.0).fields[0].drifted


# --------------------------------------------------------------------------- fields
def test_default_fields_pick_state_and_operational_columns() -> None:
    b = pd.DataFrame({"trace_id": ["a"], "state.x": [1.0], "latency_ms": [3.0], "logp": [-1.0]})
    t = pd.DataFrame({"state.y": [1.0], "error": ["x"], "state.x": [2.0]})
    assert default_fields(b, t) == ["state.x", "latency_ms", "state.y", "error"]


def test_one_sided_and_mismatched_fields_are_reported_not_raised() -> None:
    rng = np.random.default_rng(9)
    b = pd.DataFrame(
        {
            "state.x": rng.normal(size=500),
            "state.only_b": 1.0,
            "state.kind": rng.normal(size=500),
            "state.empty": np.nan,
        }
    )
    t = pd.DataFrame(
        {
            "state.x": rng.normal(size=400),
            "state.only_t": "a",
            "state.kind": ["a"] * 400,
            "state.empty": rng.normal(size=400),
        }
    )
    rep = detect_drift(b, t)
    by = {f.field: f for f in rep.fields}
    assert by["state.x"].test == "ks"
    assert by["state.only_b"].test == "error" and "only in the baseline" in by["state.only_b"].error
    assert by["state.only_t"].test == "error" and "only in the target" in by["state.only_t"].error
    assert "numeric" in by["state.kind"].error and "categorical" in by["state.kind"].error
    assert "no non-missing values in the baseline" in by["state.empty"].error
    assert len(rep.errors) == 4 and "4 field(s) could not be compared" in rep.summary
    data = json.loads(rep.to_json())
    assert data["fields"][1]["p_value"] is None and data["summary"] == rep.summary
    assert DriftReport.from_dict(data).to_dict() == rep.to_dict()


def test_bad_arguments_raise_clear_errors() -> None:
    b = pd.DataFrame({"state.x": [1.0, 2.0]})
    with pytest.raises(ValueError, match="neither the baseline nor the target"):
        detect_drift(b, b, fields=["state.typo"])
    with pytest.raises(ValueError, match="threshold"):
        detect_drift(b, b, threshold=0.0)
    with pytest.raises(ValueError, match="min_effect"):
        detect_drift(b, b, min_effect=-1)


# --------------------------------------------------------------------------- report
def _frames() -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(10)
    n = 4000
    b = pd.DataFrame(
        {
            "state.income": rng.lognormal(10, 0.5, n),
            "state.age": rng.normal(45, 12, n),
            "state.<tag>": rng.choice(["a", "b"], n),
            "latency_ms": rng.gamma(2, 50, n),
            "error": [None] * (n - 40) + ["timeout"] * 40,
            "done": rng.random(n) < 0.3,
        }
    )
    t = b.copy()
    t["state.age"] = rng.normal(52, 12, n)
    t["latency_ms"] = rng.gamma(2, 80, n)
    return b, t


def test_html_report_lists_every_field_with_a_plot() -> None:
    b, t = _frames()
    rep = detect_drift(b, t)
    page = render_html(rep, b, t)
    assert page.startswith("<!DOCTYPE html>") and rep.summary.split(" (")[0] in page
    for f in rep.fields:
        assert (f.field.replace("<", "&lt;").replace(">", "&gt;")) in page
    assert "<tag>" not in page  # escaped
    assert page.count("data:image/png;base64,") == len(rep.tested)
    assert set(rep.drifted_fields) == {"state.age", "latency_ms"}


def test_run_drift_writes_reports_and_logs_to_mlflow(tmp_storage_root: str, tmp_tracking: str) -> None:
    from mlflow import MlflowClient

    from rlops.common.config import load_params
    from rlops.storage.backend import Storage

    params = load_params()
    storage = Storage.from_params(params)
    b, t = _frames()
    b_uri, t_uri = storage.join("w", "base.parquet"), storage.join("w", "target.parquet")
    storage.write_parquet(b_uri, b)
    storage.write_parquet(t_uri, t)
    out = storage.join("reports", "2026-01-01T10")

    dry = run_drift(params, b_uri, t_uri, out, dry_run=True)
    assert dry.dry_run and not storage.exists(dry.report_uri)

    result = run_drift(params, b_uri, t_uri, out)
    rep = result.report
    assert rep is not None and "report" not in result.to_dict()
    assert set(result.drifted_fields) == {"state.age", "latency_ms"}
    saved = storage.read_json(result.report_uri)
    assert saved["drifted_fields"] == result.drifted_fields
    assert "<!DOCTYPE html>" in storage.read_text(result.html_uri)
    client = MlflowClient(tracking_uri=tmp_tracking)
    run = client.get_run(result.run_id)
    assert run.data.metrics["drift.n_drifted"] == 2.0
    assert run.data.metrics["drift_effect/state.age"] == pytest.approx(
        next(f.effect for f in rep.fields if f.field == "state.age")
    )
    arts = {a.path for a in client.list_artifacts(result.run_id, "drift")}
    assert arts == {"drift/report.json", "drift/report.html"}


def test_run_drift_reads_and_writes_s3(moto_bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from rlops.common.config import load_params
    from rlops.storage.backend import Storage

    monkeypatch.setenv("RLOPS_STORAGE_ROOT", f"{moto_bucket}/root")
    params = load_params()
    storage = Storage.from_params(params)
    b, t = _frames()
    storage.write_parquet(storage.join("traces", "b", "part-0.parquet"), b)
    storage.write_parquet(storage.join("traces", "t", "part-0.parquet"), t)
    result = run_drift(params, storage.join("traces", "b"), storage.join("traces", "t"), track=False)
    assert result.report_uri.startswith(f"{moto_bucket}/root/drift/")
    assert storage.read_json(result.report_uri)["summary"] == result.summary
    assert result.run_id is None and len(result.drifted_fields) == 2


def test_cli_exit_codes(tmp_storage_root: str, capsys: pytest.CaptureFixture[str]) -> None:
    from rlops.common.config import load_params
    from rlops.storage.backend import Storage

    storage = Storage.from_params(load_params())
    b, t = _frames()
    storage.write_parquet(storage.join("b.parquet"), b)
    storage.write_parquet(storage.join("t.parquet"), t)
    args = [
        "drift",
        "detect",
        "--baseline",
        storage.join("b.parquet"),
        "--target",
        storage.join("t.parquet"),
        "--no-track",
    ]
    assert rlops_main(args) == 0
    assert "2 of 5 fields drifted" in capsys.readouterr().out
    assert rlops_main([*args, "--fail-on-drift", "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["drifted_fields"] == ["state.age", "latency_ms"]
    assert rlops_main([*args, "--fail-on-drift", "--fields", "state.income"]) == 0
    assert (
        rlops_main(
            [
                "drift",
                "detect",
                "--baseline",
                storage.join("nope.parquet"),
                "--target",
                storage.join("t.parquet"),
                "--no-track",
            ]
        )
        == 2
    )
    assert "nope.parquet" in capsys.readouterr().err


def test_rows_of_one_episode_count_once_with_clusters() -> None:
    """Each episode repeats its applicant's fields on every step row: tested as rows, noise
    between two samples of the same population looked like drift (p ≈ 1e-5 at 1 000 episodes)."""
    rng = np.random.default_rng(4)
    b_eps, t_eps = rng.normal(40, 11, 2000), rng.normal(40, 11, 1000)
    t_eps[:60] += 30  # a little real difference, so the p-value is not near 1
    rows = lambda x: pd.DataFrame({"state.age": np.repeat(x, 5), "ep": np.repeat(np.arange(x.size), 5)})  # noqa: E731
    b, t = rows(b_eps), rows(t_eps)
    per_episode = detect_drift(
        pd.DataFrame({"state.age": b_eps}), pd.DataFrame({"state.age": t_eps}), min_effect=0.0
    ).fields[0]
    as_rows = detect_drift(b, t, min_effect=0.0).fields[0]
    clustered = detect_drift(b, t, min_effect=0.0, clusters=(b["ep"], t["ep"])).fields[0]
    assert clustered.effect == pytest.approx(per_episode.effect)
    assert clustered.p_value == pytest.approx(per_episode.p_value, rel=0.2)
    assert as_rows.p_value < per_episode.p_value / 100
    fitted = detect_drift(b, t, min_effect=0.0, clusters=(b["ep"], t["ep"]), baseline_fit_n=1000).fields[0]
    assert fitted.p_value > clustered.p_value  # a fitted baseline's own error widens the test


def test_compile_kernels_covers_the_column_types_drift_compares() -> None:
    # what the install compiles ahead: read-only column views and owned arrays, float64 and int64
    compile_kernels()
    seen = {(sig[0].dtype.name, not sig[0].mutable) for sig in bucket_counts.signatures}
    assert {(d, ro) for d in ("float64", "int64") for ro in (True, False)} <= seen
    x = np.array([3, 1, 2, 2], dtype=np.int64)
    x.flags.writeable = False
    counts, n_nan = bucket_counts(x, 0.0, 1.0, 4, np.empty(x.size, np.uint16))
    assert n_nan == 0 and counts.tolist() == [0, 1, 2, 1, 0, 0]
