"""The typed params document: one pydantic model per block of ``params.yaml``.

:class:`Params` is the whole document (the project's ``params.yaml`` merged with a pack's
``scenarios/<name>/params.yaml`` and the environment overrides, see :mod:`rlops.common.config`).
Every block forbids unknown keys, so a typo anywhere fails validation instead of silently doing
nothing; every field carries the description that ``rlops config show``, the JSON Schema
(``params.schema.json``) and editors display.

This module holds the document and the blocks of locations, capture, labels, signals, audit and the
demo; the others live beside it by topic: :mod:`rlops.common.params_drift` (drift monitoring,
recalibration), :mod:`rlops.common.params_training` (the ``ppo:``, ``train:`` and ``reward_model:``
blocks generated from the algorithms' own config records), :mod:`rlops.common.params_promotion`
(gates, evaluation, promotion, stress) and :mod:`rlops.common.params_operations` (the running loop).
Adding a block: write its class (subclass :class:`~rlops.common.params_base.Block`) in the module of
its topic and name it as a field of :class:`Params`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from rlops.common.params_base import Block, checked_by
from rlops.common.params_drift import DriftParams, RecalConfig
from rlops.common.params_operations import (
    DagsParams,
    ExplorationParams,
    OpeParams,
    OutcomesParams,
    RolloutParams,
    StackParams,
    TraceStoreParams,
)
from rlops.common.params_promotion import EvaluateParams, PromotionParams, StressConfig
from rlops.common.params_training import MAX_TIMESTEPS, PpoParams, RelabelParams, RewardModelParams, TrainParams
from rlops.common.params_uris import queue_url_problem, storage_root_problem, tracking_uri_problem


# --------------------------------------------------------------------------- locations
class StorageParams(Block):
    """Where data lives (``rlops/storage/backend.py``)."""

    root: str = Field("file://rlops-data", description="file://<path> or s3://bucket/prefix (env RLOPS_STORAGE_ROOT)")
    s3_endpoint_url: str | None = Field(
        None, description="S3-compatible servers (MinIO, moto): http://host:port (env RLOPS_S3_ENDPOINT_URL)"
    )
    retries: int = Field(4, ge=1, description="attempts per object operation")
    backoff_s: float = Field(0.5, ge=0, description="first retry delay, doubled each attempt")
    connect_timeout_s: float = Field(5.0, gt=0, description="per S3 request")
    read_timeout_s: float = Field(60.0, gt=0, description="per S3 request")

    _root = field_validator("root")(checked_by(storage_root_problem))


class TrackingParams(Block):
    """The MLflow tracking server and artifact store (``rlops/registry/client.py``)."""

    uri: str = Field("sqlite:///rlops-data/mlflow.db", description="MLflow tracking URI (env MLFLOW_TRACKING_URI)")
    artifact_root: str | None = Field(
        "rlops-data/mlartifacts",
        description="artifact root for new experiments; ignored for a local path when uri "
        "is an MLflow server (env RLOPS_ARTIFACT_ROOT)",
    )
    http_max_retries: int = Field(2, ge=0, description="MLflow server calls: bounded so an outage fails within seconds")
    http_timeout_s: int = Field(10, ge=1, description="MLflow server call timeout")

    _uri = field_validator("uri")(checked_by(tracking_uri_problem))


# --------------------------------------------------------------------------- capture
class CaptureParams(Block):
    """Capture step (``rlops/pipeline_steps/capture/core.py``): landing-zone JSON lines → trace store."""

    landing_dir: str = Field("landing", description="under storage.root; where agent_sdk.Tracer writes (or any URI)")
    trace_dir: str = Field("traces", description="parquet partitions scenario=<s>/date=YYYY-MM-DD/hour=HH/")
    quarantine_dir: str = Field(
        "quarantine", description="rows that broke the contract, same partitioning, with reasons"
    )
    chunk_rows: int = Field(100_000, ge=1, description="lines parsed, validated and written at a time (bounds memory)")
    max_lateness_minutes: int = Field(
        60, ge=0, description="rows may be this much older than their interval (tracer buffering); older: quarantined"
    )
    simulate_when_empty: bool = Field(
        False,
        description="true: no landing-zone files → sample the champion in `profile` (source simulation:<profile>)",
    )
    profile: str | None = Field(
        None, description="simulated capture stands in for production: `live`, else the pack's default"
    )
    episodes: int = Field(2000, ge=1, description="simulated episodes per interval")
    sample_rate: float = Field(1.0, ge=0, le=1, description="fraction of simulated episodes recorded")
    mlflow_experiment: str | None = Field(
        None,
        description="`--from-mlflow`: experiment the agents' MlflowTraceExporter writes to (null: the scenario's name)",
    )
    track: bool = Field(True, description="log each capture run to MLflow (false: counts only)")
    fallback_alert_share: float = Field(
        0.05,
        ge=0,
        le=1,
        description="live decisions answered by the rule engine above this share in one interval are an incident",
    )
    fallback_alert_min_decisions: int = Field(
        20, ge=1, description="fewer live policy-client decisions in the interval: no alert"
    )
    max_quarantine_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="more of an interval's rows quarantined than this share: the capture fails (exit 2), its rows kept",
    )


# --------------------------------------------------------------------------- labels, audit, demo, dvc
class QueueConfig(Block):
    """Label queue (``rlops/pipeline_steps/labels/step.py``, ``rlops labels run|export|import``)."""

    db_url: str = Field("sqlite:///rlops-data/label_queue.db", description="SQLAlchemy URL (env RLOPS_QUEUE_DB)")
    _db_url = field_validator("db_url")(checked_by(queue_url_problem))
    db_schema: str | None = Field(None, description="Postgres schema for the tables (null: the default schema)")
    window_hours: float = Field(24.0, gt=0, description="trace window ending with the run key's interval")
    threshold: float = Field(0.8, description="mean entropy / log(number of legal actions)")
    top_k: int = Field(2, ge=0, description="also the k most uncertain clusters of each run, whatever their entropy")
    uncertainty_policy: str = Field(
        "auto",
        description="rule-engine-only windows: whose entropy (auto: champion, "
        "else the newest candidate; none; or a version number)",
    )
    clusters: int = Field(16, ge=1, description="k of the k-means over encoded states")
    states_per_cluster: int = Field(100, ge=1, description="latest states enqueued per uncertain cluster")
    min_cluster_states: int = Field(20, ge=1, description="smaller clusters are not judged")
    bucket_minutes: int = Field(60, ge=1, description="the threshold must hold in every bucket of the window…")
    min_bucket_states: int = Field(5, ge=1, description="…that has at least this many states of the cluster")
    kmeans_iters: int = Field(50, ge=1, description="k-means iterations")
    kmeans_fit_rows: int = Field(
        100_000,
        ge=0,
        description="past this many states, k-means is fitted on this many evenly spaced ones and every "
        "state takes its nearest centroid (0: fit on all)",
    )
    seed: int = Field(7, description="seed of the clustering and the sampling")
    export_dir: str = Field("label_queue", description="Label Studio tasks and config under storage.root")
    selection: Literal["auto", "entropy", "reward_ensemble"] = Field(
        "auto",
        description="entropy (policy entropy per cluster) | reward_ensemble (disagreement of reward models "
        "fitted on the finished labels) | auto (ensemble from ensemble_min_labels)",
    )
    max_items: int = Field(
        0, ge=0, description="items per run (0: states_per_cluster per selected cluster; ensemble: · top_k)"
    )
    sample_fraction: float = Field(
        0.5, ge=0, le=1, description="ensemble: share of a run drawn in proportion to disagreement (rest: the top)"
    )
    spread_clusters: int = Field(
        8, ge=1, description="ensemble: the top share spreads over at least this many state clusters"
    )
    ensemble_members: int = Field(8, ge=2, description="bootstrap reward models (more members: a sharper disagreement)")
    ensemble_epochs: int = Field(60, ge=1, description="training epochs of each member")
    ensemble_min_labels: int = Field(20, ge=0, description="finished labels from which `auto` uses the ensemble")


class SignalsParams(Block):
    """Business signals that drive reward weights (``rlops/pipeline_steps/infra/signal_store.py``, ``rlops signal``)."""

    dir: str = Field("signals", description="folder under storage.root: one <signal>.json (its values) per signal")
    history: int = Field(500, ge=1, description="values kept per signal (accepted and refused), newest last")
    retrain_delta: float = Field(
        0.1,
        gt=0,
        le=1,
        description="the drift monitor asks for a retrain when a signal in force moved this far from the "
        "champion's value, as a share of the signal's declared range",
    )
    airflow_variables: bool = Field(
        True, description="the drift monitor's task also reads an Airflow Variable per declared signal"
    )
    variable_prefix: str = Field("rlops_signal_", description="that Variable's name: prefix + signal name")


class AuditParams(Block):
    """Audit report (``rlops/pipeline_steps/audit/report.py``: ``rlops audit``; ``audit/replay.py``: replay)."""

    window_hours: float = Field(24, gt=0, description="trace window ending with the run key's interval")
    clusters: int = Field(8, ge=1, description="state clusters in the report")
    max_rows: int = Field(200_000, ge=1, description="larger windows are sampled by whole episodes")
    console_map_rows: int = Field(
        50_000,
        ge=1,
        description="rows `rlops console`'s decision map clusters; a version with more is sampled by whole episodes",
    )
    seed: int = Field(7, description="seed of the sampling and the clustering")


class DemoParams(Block):
    """``make demo`` (``rlops/demo.py``): budgets of the whole loop on one machine."""

    capture_episodes: int = Field(
        6000, ge=1, description="live-profile episodes captured (enough explored traffic for the off-policy gate)"
    )
    reward_model_pairs: int = Field(1000, ge=1, description="sandbox preference pairs for the reward model")
    timesteps: int = Field(
        100_000, ge=1, le=MAX_TIMESTEPS, description="PPO environment steps of the demo's full retrain"
    )
    evaluate_episodes: int = Field(
        16_000,
        ge=1,
        description="held-out episodes of the gated evaluation (enough to decide an improvement of ~2% of the return)",
    )
    torch_threads: int = Field(1, ge=1, description="torch threads (small networks train fastest on one)")


class DvcParams(Block):
    """DVC pipeline (``dvc.yaml``): the data interval it pins and its budgets."""

    run_key: str = Field("20260101T0000", description="every `dvc repro` captures and trains on this interval")
    capture_episodes: int = Field(2000, ge=1, description="episodes captured")
    timesteps: int = Field(300_000, ge=1, le=MAX_TIMESTEPS, description="PPO environment steps")


# --------------------------------------------------------------------------- the document
class Params(Block):
    """The whole params document: project params.yaml + a pack's params.yaml + environment overrides."""

    scenario: str = Field("credit_approval", description="default scenario pack under scenarios/")
    reward_fn: str | None = Field(
        None, description="reward_<label>.py of the pack (a pack's params.yaml may choose its own; null: the newest)"
    )
    seed: int = Field(7, description="seed of simulations, PPO sampling and the reward model")
    scenarios_dir: str | None = Field(
        None, description="folder of the scenario packs (null: scenarios/ of the project)"
    )
    local_dir: str = Field(
        "rlops-data", description="local working folder (checkpoints, exported models), relative to RLOPS_HOME"
    )
    storage: StorageParams = Field(default_factory=StorageParams, description=StorageParams.__doc__)
    tracking: TrackingParams = Field(default_factory=TrackingParams, description=TrackingParams.__doc__)
    drift: DriftParams = Field(default_factory=DriftParams, description=DriftParams.__doc__)
    capture: CaptureParams = Field(default_factory=CaptureParams, description=CaptureParams.__doc__)
    # ppo, train and reward_model are models built by create_model from the algorithms' config records
    # (their static view: the TYPE_CHECKING block of rlops.common.params_training).
    train: TrainParams = Field(default_factory=TrainParams, description=TrainParams.__doc__)
    relabel: RelabelParams = Field(default_factory=RelabelParams, description=RelabelParams.__doc__)
    evaluate: EvaluateParams = Field(default_factory=EvaluateParams, description=EvaluateParams.__doc__)
    promotion: PromotionParams = Field(default_factory=PromotionParams, description=PromotionParams.__doc__)
    stress: StressConfig = Field(default_factory=StressConfig, description=StressConfig.__doc__)
    label_queue: QueueConfig = Field(default_factory=QueueConfig, description=QueueConfig.__doc__)
    recalibrate: RecalConfig = Field(default_factory=RecalConfig, description=RecalConfig.__doc__)
    audit: AuditParams = Field(default_factory=AuditParams, description=AuditParams.__doc__)
    signals: SignalsParams = Field(default_factory=SignalsParams, description=SignalsParams.__doc__)
    demo: DemoParams = Field(default_factory=DemoParams, description=DemoParams.__doc__)
    ppo: PpoParams = Field(default_factory=PpoParams, description=PpoParams.__doc__)
    reward_model: RewardModelParams = Field(default_factory=RewardModelParams, description=RewardModelParams.__doc__)
    dvc: DvcParams = Field(default_factory=DvcParams, description=DvcParams.__doc__)
    trace_store: TraceStoreParams = Field(default_factory=TraceStoreParams, description=TraceStoreParams.__doc__)
    rollout: RolloutParams = Field(default_factory=RolloutParams, description=RolloutParams.__doc__)
    dags: DagsParams = Field(default_factory=DagsParams, description=DagsParams.__doc__)
    exploration: ExplorationParams = Field(default_factory=ExplorationParams, description=ExplorationParams.__doc__)
    ope: OpeParams = Field(default_factory=OpeParams, description=OpeParams.__doc__)
    stack: StackParams = Field(default_factory=StackParams, description=StackParams.__doc__)
    outcomes: OutcomesParams = Field(default_factory=OutcomesParams, description=OutcomesParams.__doc__)


__all__ = [
    "AuditParams",
    "CaptureParams",
    "DemoParams",
    "DvcParams",
    "Params",
    "QueueConfig",
    "SignalsParams",
    "StorageParams",
    "TrackingParams",
]
