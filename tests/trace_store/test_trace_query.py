"""The trace store's reader: DuckDB and the pandas reference give the same frames (values, row order,
columns, dtypes) on the same store, local and on S3 (moto over HTTP), and the steps read through it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT
from rlops.storage.backend import Storage
from rlops.trace_store.engine import QueryEngineConfig, sample_buckets
from rlops.trace_store.query import TraceReader
from rlops.trace_store.store import (
    TraceStore,
    join_uri,
    write_trace_partitions,
)

SCENARIO = "credit_approval"
T0 = datetime(2026, 1, 5, 10, tzinfo=UTC)
CHAMPION = f"{SCENARIO}-policy/3"


def _rows() -> list[pd.DataFrame]:
    """Sandbox traffic of three run keys through the trace contract (rule engine, a learned policy,
    the rule engine again), 50 minutes apart so the rows span three hour partitions."""
    from rlops.data_contracts.contracts import contract_for  # noqa: F401 - imported with the pack
    from rlops.pipeline_steps.drift.check import comparable_rows
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import random_policy, rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO)
    out = []
    for i, (policy, version) in enumerate(
        [(rule_policy, "rules"), (random_policy(1), CHAMPION), (rule_policy, "rules")]
    ):
        df = rollout_traces(
            pack,
            policy,
            120,
            seed=1000 * i,
            policy_version=version,
            start_ts=T0 + timedelta(minutes=50 * i),
            episode_prefix=f"{SCENARIO}-rk{i}",
        )
        out.append(comparable_rows(pack, df))
    return out


@pytest.fixture(scope="module")
def parts() -> list[pd.DataFrame]:
    return _rows()


def _write(storage: Storage, root: str, parts: list[pd.DataFrame]) -> str:
    from rlops.data_contracts.contracts import contract_for
    from rlops.sandbox.pack import load_pack

    contract = contract_for(load_pack(REPO_ROOT / "scenarios" / SCENARIO))
    for i, df in enumerate(parts):
        write_trace_partitions(storage, df, root, f"rk{i}", contract=contract)
    return join_uri(root, f"scenario={SCENARIO}")


@pytest.fixture(scope="module")
def local_store(parts: list[pd.DataFrame], tmp_path_factory: pytest.TempPathFactory) -> tuple[Storage, str]:
    home = tmp_path_factory.mktemp("trace-query")
    storage = Storage(f"file://{home}")
    return storage, _write(storage, f"file://{home}/traces", parts)


def _engines(storage: Storage) -> tuple[TraceReader, TraceReader]:
    return (
        TraceReader(storage, QueryEngineConfig(threads=2, memory_limit="256MB")),
        TraceReader(storage, QueryEngineConfig(engine="pandas")),
    )


CASES: list[dict[str, Any]] = [
    {},
    {"window": (T0 + timedelta(minutes=30), T0 + timedelta(minutes=100))},
    {"columns": ["step", "trace_id", "ts", "state.user_profile.credit_score", "no_such_column"]},
    {"where": {"policy_version": "rules"}},
    {"where": {"policy_version": [CHAMPION, "nobody"]}, "columns": ["episode_id", "reward_total"]},
    {"where": {"no_such_column": 1}},
]


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert list(a.dtypes.astype(str)) == list(b.dtypes.astype(str))


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(c) or "all")
def test_duckdb_reads_what_pandas_reads(local_store: tuple[Storage, str], case: dict[str, Any]) -> None:
    storage, uri = local_store
    duck, ref = _engines(storage)
    a, b = duck.read(uri, **case), ref.read(uri, **case)
    _same(a, b)
    if "where" not in case or "no_such_column" not in case["where"]:
        assert len(a) > 0


def test_rows_come_in_file_order_with_every_type(local_store: tuple[Storage, str], parts: list[pd.DataFrame]) -> None:
    storage, uri = local_store
    duck, _ = _engines(storage)
    df = duck.read(uri)
    assert len(df) == sum(len(p) for p in parts)
    assert str(df["ts"].dtype) == "datetime64[us, UTC]"
    files = duck.files(uri)
    assert files == sorted(files) and len(files) == 3
    assert df["trace_id"].iloc[0] == pd.read_parquet(files[0][len("file://") :])["trace_id"].iloc[0]
    window = (T0 + timedelta(hours=1), T0 + timedelta(hours=2))
    assert duck.files(uri, window) == files[2:]  # hour partitions outside the window are never opened


def test_episode_replay_counts_samples_and_sql(local_store: tuple[Storage, str]) -> None:
    storage, uri = local_store
    duck, ref = _engines(storage)
    every = ref.read(uri)
    trace_id = str(every["trace_id"].iloc[len(every) // 2])
    episode = duck.episode_rows(uri, trace_id)
    _same(episode, ref.episode_rows(uri, trace_id))
    ep = every.loc[every["trace_id"] == trace_id, "episode_id"].iloc[0]
    assert set(episode["episode_id"]) == {ep} and episode["step"].is_monotonic_increasing
    assert len(episode) == int((every["episode_id"] == ep).sum())
    with pytest.raises(LookupError, match="nope"):
        duck.episode_rows(uri, "nope")

    counts = duck.count_by(uri, "policy_version")
    assert counts == ref.count_by(uri, "policy_version")
    assert counts == every["policy_version"].value_counts().to_dict() and next(iter(counts)) == "rules"

    rows, total = duck.sample_episodes(uri, 400)
    rows_ref, _ = ref.sample_episodes(uri, 400)
    _same(rows, rows_ref)
    assert total == len(every) and 0 < len(rows) < len(every)
    kept = set(rows["episode_id"])  # whole episodes, chosen by the stable hash
    assert all((every.loc[every["episode_id"] == e].shape[0] == (rows["episode_id"] == e).sum()) for e in kept)
    eps = every["episode_id"].unique()
    assert kept == set(eps[sample_buckets(eps) < int(1e6 * 400 / len(every))])
    spread, n_all = duck.sample_episodes(uri, 100, spread=1)  # past the cap: a few files first, then episodes
    _same(spread, ref.sample_episodes(uri, 100, spread=1)[0])
    first_file = ref.read(duck.files(uri)[0])
    assert n_all == len(every) and 0 < len(spread) < len(first_file)
    assert set(spread["episode_id"]) <= set(first_file["episode_id"])
    small, n = duck.sample_episodes(uri, 10**9, where={"policy_version": CHAMPION})
    assert n == counts[CHAMPION] and len(small) == n

    by_sql = duck.query(uri, "SELECT policy_version, count(*) AS n FROM traces GROUP BY 1 ORDER BY n DESC")
    assert dict(zip(by_sql["policy_version"], by_sql["n"])) == counts
    window = (T0 + timedelta(minutes=30), T0 + timedelta(minutes=100))
    windowed = duck.query(uri, "SELECT count(*) AS n FROM traces WHERE step >= ?", [0], window=window)
    assert int(windowed["n"].iloc[0]) == len(ref.read(uri, window))
    streamed = pd.concat(list(duck.batches(uri, columns=["trace_id"], batch_rows=100)), ignore_index=True)
    assert streamed["trace_id"].tolist() == every["trace_id"].tolist()
    assert duck.columns(uri) == ref.columns(uri) == list(every.columns)


@pytest.mark.parametrize("folder", ["st?re", "s*", "[s]tore", "st[!x]re"])
def test_a_store_whose_path_holds_glob_characters_reads_only_its_own_files(
    parts: list[pd.DataFrame], tmp_path: Path, folder: str
) -> None:
    """DuckDB reads ``*``, ``?`` and ``[`` in a path as a pattern: a store under such a folder beside
    one its pattern matches reads its own rows only, as the pandas reference does, and a rewritten
    file is bound again (the schema cache finds the file under its escaped path)."""
    storage = Storage(f"file://{tmp_path}")
    mine = _write(storage, f"file://{tmp_path}/{folder}", parts[:1])
    _write(storage, f"file://{tmp_path}/store", parts)
    duck, ref = _engines(storage)
    got = duck.read(mine)
    assert len(got) == len(parts[0])
    _same(got, ref.read(mine))
    assert duck.count(mine) == len(parts[0])
    assert duck.count_by(mine, "policy_version") == {"rules": len(parts[0])}

    (file,) = duck.files(mine)
    path = Path(file.removeprefix("file://"))
    frame = pd.read_parquet(path).assign(extra_column=1)
    frame.to_parquet(path, index=False)
    assert "extra_column" in duck.read(mine, columns=["trace_id", "extra_column"]).columns


def test_trace_files_carry_bloom_filters_on_ids(local_store: tuple[Storage, str]) -> None:
    import pyarrow.parquet as pq

    storage, uri = local_store
    f = TraceReader(storage).files(uri)[0][len("file://") :]
    meta = pq.ParquetFile(f).metadata.row_group(0)
    names = [meta.column(i).path_in_schema for i in range(meta.num_columns)]
    with_bloom = {n for i, n in enumerate(names) if meta.column(i).to_dict().get("bloom_filter_offset")}
    assert {"trace_id", "episode_id"} <= with_bloom


def test_engine_settings_come_from_params() -> None:
    cfg = QueryEngineConfig.from_params(
        {"trace_store": {"threads": 1, "memory_limit": "300MB", "temp_directory": "/tmp/x"}}
    )
    assert (cfg.engine, cfg.threads, cfg.memory_limit, cfg.temp_directory) == ("duckdb", 1, "300MB", "/tmp/x")
    assert QueryEngineConfig.from_params({}).engine == "duckdb"
    for bad, match in [
        ({"engine": "spark"}, "engine"),
        ({"threads": -1}, "threads"),
        ({"memory_limit": "lots"}, "memory_limit"),
        ({"thread": 2}, "unknown key"),
    ]:
        with pytest.raises(ValueError, match=match):
            QueryEngineConfig.from_params({"trace_store": bad})
    store = TraceStore.from_params({"storage": {"root": "file:///tmp/rlops-x"}, "trace_store": {"engine": "pandas"}})
    assert store.reader.engine == "pandas"
    from rlops.trace_store.engine import database

    db = database(QueryEngineConfig(threads=1, memory_limit="300MB"))
    got = dict(
        db.execute("SELECT name, value FROM duckdb_settings() WHERE name IN ('threads', 'memory_limit')").fetchall()
    )
    assert got["threads"] == "1" and got["memory_limit"].startswith("286")  # 300 MB in MiB


def test_s3_store_reads_like_the_local_one(
    parts: list[pd.DataFrame], moto_bucket: str, moto_s3: str, local_store: tuple[Storage, str]
) -> None:
    s3 = Storage(moto_bucket, endpoint_url=moto_s3)
    uri = _write(s3, f"{moto_bucket}/traces", parts)
    duck, ref = _engines(s3)
    local_duck, _ = _engines(local_store[0])
    for case in CASES[:5]:
        got = duck.read(uri, **case)
        _same(got, ref.read(uri, **case))
        _same(got, local_duck.read(local_store[1], **case))
    trace_id = str(ref.read(uri)["trace_id"].iloc[7])
    _same(duck.episode_rows(uri, trace_id), ref.episode_rows(uri, trace_id))
    assert duck.count_by(uri, "policy_version") == ref.count_by(uri, "policy_version")


def test_steps_read_through_the_configured_engine(
    local_store: tuple[Storage, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay, the label queue's window, calibration inputs and the drift target all go through
    the store's reader, and what they get does not depend on the engine."""
    from rlops.pipeline_steps.audit.replay import find_episode
    from rlops.pipeline_steps.drift.check import drift_columns
    from rlops.pipeline_steps.labels.step import LABEL_COLUMNS, label_columns

    storage, uri = local_store
    duck, ref = _engines(storage)
    trace_id = str(ref.read(uri)["trace_id"].iloc[3])
    _same(find_episode(duck, uri, trace_id), find_episode(ref, uri, trace_id))
    with pytest.raises(ValueError, match="not found"):
        find_episode(duck, uri, "missing-id")
    cols = duck.columns(uri)
    assert set(label_columns(cols)) == {c for c in cols if c in LABEL_COLUMNS or c.startswith("state.")}
    assert "entropy" in label_columns(cols) and "reward_breakdown" not in label_columns(cols)
    drift_cols = drift_columns(cols, {"cluster": "episode_id"})
    assert "reward_breakdown" not in drift_cols and {"episode_id", "latency_ms", "error"} <= set(drift_cols)
    assert drift_columns(cols, {"fields": ["state.user_profile.credit_score"]}) == [
        "episode_id",
        "state.user_profile.credit_score",
        "reward_total",
    ]
    seen: list[str] = []
    real = TraceReader._frame

    def spy(self: TraceReader, *a: Any, **kw: Any) -> pd.DataFrame:
        seen.append(self.engine)
        return real(self, *a, **kw)

    monkeypatch.setattr(TraceReader, "_frame", spy)
    from rlops.pipeline_steps.infra.context import StepContext

    for engine in ("duckdb", "pandas"):
        ctx = StepContext.create(
            SCENARIO,
            "20260105T1100",
            params={"storage": {"root": str(storage.root)}, "trace_store": {"engine": engine}},
        )
        from rlops.pipeline_steps.training.relabel import window_traces

        got = window_traces(ctx, 2, uri)
        assert seen[-1] == engine and len(got) == len(ref.read(uri, (T0, T0 + timedelta(hours=2))))


def test_categorical_reads_test_the_same_drift(local_store: tuple[Storage, str]) -> None:
    """The drift monitor reads a long window with text as categoricals: same frame values in both
    engines, and the same field tests as on the plain frame."""
    from rlops.pipeline_steps.drift.stats import detect_drift

    storage, uri = local_store
    duck, ref = _engines(storage)
    cat = duck.read(uri, categorical=True)
    _same(cat, ref.read(uri, categorical=True))
    assert isinstance(cat["episode_id"].dtype, pd.CategoricalDtype)
    plain = duck.read(uri)
    pd.testing.assert_frame_equal(cat.astype(plain.dtypes.to_dict()), plain)
    half = len(plain) // 2
    units = ("episode_id",)

    def report(frame: pd.DataFrame) -> list[dict[str, Any]]:
        b, t = plain.iloc[:half], frame.iloc[half:].reset_index(drop=True)
        rep = detect_drift(b, t, clusters=(b[units[0]], t[units[0]]), workers=1)
        return [{k: v for k, v in f.__dict__.items()} for f in rep.fields]

    assert report(cat) == report(plain)


@pytest.mark.parametrize("cluster", ["episode_id", "policy_version", None])
def test_a_summarised_drift_window_is_the_same_on_both_engines(
    local_store: tuple[Storage, str], parts: list[pd.DataFrame], cluster: str | None
) -> None:
    """The drift monitor's streamed window: DuckDB's group-by counts (units, returns) and the pandas
    engine's per-row codes give the report detect_drift gives on the window's rows."""
    import numpy as np

    from rlops.pipeline_steps.drift.stats import default_fields, detect_drift
    from rlops.pipeline_steps.drift.window import sql_counts, summarise_window, units_in_sql
    from rlops.pipeline_steps.drift.window_detect import detect_drift_window

    storage, uri = local_store
    duck, ref = _engines(storage)
    window = (T0 + timedelta(minutes=30), T0 + timedelta(hours=3))
    base = parts[0].iloc[::2].reset_index(drop=True)
    rows = ref.read(uri, window)
    fields = default_fields(base, rows)
    clusters = (base[cluster], rows[cluster]) if cluster else None
    expected = detect_drift(base, rows, bh=True, clusters=clusters, workers=1).fields
    returns = np.sort(rows.groupby("episode_id")["reward_total"].sum().to_numpy())
    columns = duck.columns(uri)
    assert sql_counts(duck, columns) and not sql_counts(ref, columns)

    def counted(gaps: list[str]) -> Any:
        assert set(gaps) <= set(fields)
        return units_in_sql(duck, uri, window, cluster, gaps, columns)

    for reader, count_units in ((duck, counted), (ref, None)):
        frames = reader.batches(uri, window, columns, batch_rows=97)
        summary = summarise_window(frames, base, fields, len(rows), cluster, count_units=count_units)
        report = detect_drift_window(base, summary, bh=True, cluster=cluster)
        assert [f.__dict__ for f in report.fields] == [f.__dict__ for f in expected]
        np.testing.assert_allclose(np.sort(summary.episode_returns), returns, rtol=1e-12)
