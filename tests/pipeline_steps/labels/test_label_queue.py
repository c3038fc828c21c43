"""Label queue: one high-entropy cluster enqueues exactly its latest 100 states; a cluster that is
uncertain in only part of the window is not queued; re-running a run key does not duplicate;
Label Studio export/import round trip; labels as reward-model pairs and an imitation batch;
the same on PostgreSQL when it is reachable."""

from __future__ import annotations

import json
import math
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT, load_params
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.labels.request import LabelQueueRequest
from rlops.pipeline_steps.labels.select import kmeans, labels_as_imitation_batch, labels_as_pairs, select_uncertain
from rlops.pipeline_steps.labels.step import QueueConfig, label_queue_export, label_queue_import, label_queue_run
from rlops.pipeline_steps.labels.store import LabelStore
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import rule_policy
from rlops.sandbox.traces import rollout_traces

REPO = REPO_ROOT
T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)
PG_URL = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)


def _with_entropy(df: pd.DataFrame, share: float) -> pd.Series:
    n_legal = df["action_mask"].str.count("1").clip(lower=2)
    return share * np.log(n_legal)


def synthetic_traces(pack: Pack) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Rule-engine traces with low entropy, plus 250 copies of one decision state with high
    entropy (the uncertain cluster, the latest rows of the window) and a cluster that is
    uncertain in the first hour only. Returns (all rows, the uncertain cluster's rows)."""
    base = rollout_traces(pack, rule_policy, 300, seed=0, start_ts=T0 - timedelta(hours=3), policy_version="7")
    base["ts"] = [(T0 - timedelta(hours=3) + timedelta(seconds=i)).isoformat() for i in range(len(base))]
    base["entropy"] = _with_entropy(base, 0.1)
    decision = base[base["action_mask"].str.count("1") >= 4]
    # two unusual applicants, far from the rule-engine traffic in feature space
    template_a, template_b = decision.iloc[0].copy(), decision.iloc[7].copy()
    template_a[
        [
            "state.user_profile.age",
            "state.user_profile.income_monthly",
            "state.user_profile.employment",
            "state.application.loan_amount",
        ]
    ] = [89, 190_000.0, "retired", 990_000.0]
    template_b[
        [
            "state.user_profile.age",
            "state.user_profile.debt_ratio",
            "state.user_profile.employment",
            "state.application.purpose",
        ]
    ] = [19, 1.45, "unemployed", "education"]

    def copies(template: pd.Series, n: int, start: datetime, name: str, share: float) -> pd.DataFrame:
        rows = pd.DataFrame([template] * n).reset_index(drop=True)
        rows["episode_id"] = [f"{name}-{i}" for i in range(n)]
        rows["trace_id"] = [f"t-{name}-{i}" for i in range(n)]
        rows["ts"] = [(start + timedelta(seconds=5 * i)).isoformat() for i in range(n)]
        rows["entropy"] = share * math.log(template["action_mask"].count("1"))
        return rows

    hot = copies(template_a, 250, T0 - timedelta(minutes=50), "hot", 0.95)
    fading = pd.concat(
        [
            copies(template_b, 200, T0 - timedelta(hours=2), "fade1", 0.95),
            copies(template_b, 20, T0 - timedelta(minutes=40), "fade2", 0.5),
        ]
    )
    return pd.concat([base, hot, fading], ignore_index=True), hot


def test_kmeans_is_deterministic_and_groups_identical_points() -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    X = torch.cat([torch.randn(100, 3, generator=g), torch.zeros(50, 3) + 5.0])
    a, ca = kmeans(X, 4, seed=3)
    b, cb = kmeans(X, 4, seed=3)
    assert torch.equal(a, b) and torch.equal(ca, cb)
    assert a[100:].unique().numel() == 1
    small, _ = kmeans(torch.ones(10, 2), 5)
    assert small.unique().tolist() == [0]


def test_one_high_entropy_cluster_enqueues_exactly_its_latest_100(credit: Pack) -> None:
    df, hot = synthetic_traces(credit)
    cfg = QueueConfig(clusters=8, top_k=0)  # the threshold alone
    selected, stats = select_uncertain(credit, df, cfg)
    latest = hot.sort_values("ts", ascending=False).head(100)
    assert set(selected["episode_id"]) == set(latest["episode_id"])
    assert len(selected) == 100
    chosen = [s for s in stats if s.selected]
    assert len(chosen) == 1 and chosen[0].min_bucket_entropy > 0.8
    fading = [s for s in stats if s.mean_entropy > 0.8 and not s.selected]
    assert fading and fading[0].min_bucket_entropy < 0.8  # uncertain in one hour only
    assert selected["norm_entropy"].between(0.94, 0.96).all()


def _ctx(tmp_path: Path, db_url: str, schema: str | None = None) -> StepContext:
    params = load_params(
        overrides={
            "storage": {"root": f"file://{tmp_path / 'storage'}"},
            "label_queue": {"db_url": db_url, "db_schema": schema, "clusters": 8, "top_k": 0},
        }
    )
    return StepContext.create("credit_approval", "20261130T0500", params=params)


def _round_trip(ctx: StepContext, credit: Pack, df: pd.DataFrame) -> None:
    uri = ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", "part-0.parquet")
    ctx.storage.write_parquet(uri, df)
    first = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert first["items"] == 100 and first["inserted"] == 100
    again = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert again["inserted"] == 100 and again["replaced_pending"] == 100
    assert again["queue"] == {"pending": 100}

    exported = label_queue_export(ctx).as_dict()
    assert label_queue_export(ctx).as_dict()["tasks"] == 100  # a re-run writes the same tasks
    later = StepContext.create("credit_approval", "20261130T0600", params=ctx.params)
    assert label_queue_export(later).as_dict()["tasks"] == 0  # nothing is sent to Label Studio twice
    tasks = ctx.storage.read_json(exported["tasks_uri"])
    assert len(tasks) == 100 and "<Choices" in ctx.storage.read_text(exported["config_uri"])
    assert {"item_id", "state", "state_text", "candidate_actions"} <= set(tasks[0]["data"])
    # what an annotator does in Label Studio, as its JSON export
    for i, t in enumerate(tasks):
        legal = t["data"]["candidate_actions"]
        choice = "send_notification" if i == 0 else legal[i % len(legal)]  # task 0: not legal there
        t["annotations"] = [
            {
                "id": 1,
                "completed_by": {"id": 3, "email": "ana@example.com"},
                "was_cancelled": i == 1,
                "created_at": "2026-11-30T07:00:00Z",
                "result": [
                    {"from_name": "action", "to_name": "state", "type": "choices", "value": {"choices": [choice]}}
                ],
            }
        ]
    ls_export = ctx.uri("label_studio", "export.json")
    ctx.storage.write_json(ls_export, tasks)
    imp = label_queue_import(ctx, ls_export).as_dict()
    assert imp["tasks_in"] == 100 and imp["ingested"] == 98 and imp["not_annotated"] == 1
    assert len(imp["rejected"]) == 1 and "not a legal action" in imp["rejected"][0]["reason"]
    assert label_queue_import(ctx, ls_export).as_dict()["ingested"] == 98  # re-import replaces, never duplicates

    store = LabelStore(ctx.params["label_queue"]["db_url"], ctx.params["label_queue"].get("db_schema"))
    assert store.counts("credit_approval") == {"labelled": 98, "exported": 2}
    labels = store.labelled_frame("credit_approval")
    assert len(labels) == 98 and set(labels["annotator"]) == {"ana@example.com"}
    pairs = labels_as_pairs(credit, labels)
    n_legal = labels["action_mask"].str.count("1")
    assert len(pairs) == int((n_legal - 1).sum())
    assert pairs.states.shape[1] == credit.scenario.layout.n_features
    assert bool((pairs.chosen != pairs.rejected).all())
    batch = labels_as_imitation_batch(credit, labels)
    assert batch.obs.shape == (98, credit.scenario.layout.dim)
    assert bool(batch.masks[range(98), batch.actions].all())


def test_run_export_import_round_trip_sqlite(credit: Pack, tmp_path: Path) -> None:
    df, _ = synthetic_traces(credit)
    _round_trip(_ctx(tmp_path, f"sqlite:///{tmp_path / 'queue.db'}"), credit, df)


def test_round_trip_postgres(credit: Pack, tmp_path: Path) -> None:
    sa = pytest.importorskip("sqlalchemy")
    try:
        engine = sa.create_engine(PG_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("select 1"))
    except Exception as exc:  # noqa: BLE001 - any connection failure means: no Postgres here
        pytest.skip(f"PostgreSQL at {PG_URL} unreachable: {exc}")
    schema = f"rlops_test_{uuid.uuid4().hex[:8]}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'create schema "{schema}"'))
    try:
        df, _ = synthetic_traces(credit)
        _round_trip(_ctx(tmp_path, PG_URL, schema), credit, df)
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f'drop schema "{schema}" cascade'))


def test_dry_run_writes_nothing(credit: Pack, tmp_path: Path) -> None:
    df, _ = synthetic_traces(credit)
    ctx = _ctx(tmp_path, f"sqlite:///{tmp_path / 'queue.db'}")
    ctx.storage.write_parquet(ctx.uri("traces", "part.parquet"), df)
    ctx.dry_run = True
    out = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert out["items"] == out["inserted"] == 100 and out["already_queued"] == out["replaced_pending"] == 0
    assert not (tmp_path / "queue.db").exists()


def test_a_dry_run_counts_what_the_enqueue_would(credit: Pack, tmp_path: Path) -> None:
    """Over a queue that already holds this run key's items, the dry run's counts (replaced,
    inserted, already queued) are the real enqueue's."""
    df, _ = synthetic_traces(credit)
    ctx = _ctx(tmp_path, f"sqlite:///{tmp_path / 'queue.db'}")
    ctx.storage.write_parquet(ctx.uri("traces", "part.parquet"), df)
    label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces")))
    counts = ("items", "inserted", "replaced_pending", "already_queued")
    ctx.dry_run = True
    dry = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    ctx.dry_run = False
    real = label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces"))).as_dict()
    assert real["replaced_pending"] == 100
    assert {k: dry[k] for k in counts} == {k: real[k] for k in counts}


def test_export_and_import_dry_runs_count_what_the_real_runs_do(credit: Pack, tmp_path: Path) -> None:
    """The dry export names as many tasks as the real one; the dry import counts the labels it
    would ingest, reject and leave stale, as the real import then does — and stores none."""
    df, _ = synthetic_traces(credit)
    ctx = _ctx(tmp_path, f"sqlite:///{tmp_path / 'queue.db'}")
    ctx.storage.write_parquet(ctx.uri("traces", "part.parquet"), df)
    label_queue_run(ctx, LabelQueueRequest(traces=ctx.uri("traces")))
    ctx.dry_run = True
    dry_export = label_queue_export(ctx).as_dict()
    ctx.dry_run = False
    exported = label_queue_export(ctx).as_dict()
    assert dry_export["tasks"] == exported["tasks"] == 100
    tasks = ctx.storage.read_json(exported["tasks_uri"])
    for i, t in enumerate(tasks):
        choice = "send_notification" if i == 0 else t["data"]["candidate_actions"][0]  # task 0: not legal
        result = [{"from_name": "action", "to_name": "state", "type": "choices", "value": {"choices": [choice]}}]
        when = "2026-11-30T07:00:00Z"
        t["annotations"] = [{"id": 1, "completed_by": {"id": 3}, "created_at": when, "result": result}]
    ls_export = ctx.uri("label_studio", "export.json")
    ctx.storage.write_json(ls_export, tasks)
    counts = ("tasks_in", "labels", "ingested", "rejected", "not_annotated", "conflicts", "stale")
    ctx.dry_run = True
    dry = label_queue_import(ctx, ls_export).as_dict()
    store = LabelStore(ctx.params["label_queue"]["db_url"])
    assert store.counts("credit_approval") == {"exported": 100}  # the dry run stored no label
    ctx.dry_run = False
    real = label_queue_import(ctx, ls_export).as_dict()
    assert real["ingested"] == 99
    assert {k: dry[k] for k in counts} == {k: real[k] for k in counts}


def test_the_step_module_re_exports_nothing() -> None:
    import rlops.pipeline_steps.labels.step as lq

    with pytest.raises(AttributeError):
        lq.labels_as_pairs  # noqa: B018  (lives in rlops.pipeline_steps.labels.select)


def test_unknown_config_key_is_a_clear_error() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="treshold"):
        QueueConfig.model_validate({"treshold": 0.8})
    assert json.loads(QueueConfig().model_dump_json())["threshold"] == 0.8
