"""The typed params document: one pydantic model per block of ``params.yaml``.

:class:`Params` is the whole document (the project's ``params.yaml`` merged with a pack's
``scenarios/<name>/params.yaml`` and the environment overrides, see :mod:`rlops.common.config`).
Every block forbids unknown keys, so a typo anywhere fails validation instead of silently doing
nothing; every field carries the description that ``rlops config show``, the JSON Schema
(``params.schema.json``) and editors display.

The ``ppo:`` and ``reward_model:`` blocks are generated from the algorithms' own config records
(:class:`~rlops.model.ppo_config.PPOConfig`, :class:`~rlops.model.reward_model_config.RewardModelConfig`),
so their defaults and descriptions live there only. Adding a block: write its class here
(subclass :class:`~rlops.common.params_base.Block`) and name it as a field of :class:`Params`.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator

from rlops.common.params_base import Block, block_from_dataclass, checked_by
from rlops.common.params_operations import (
    DagsParams,
    ExplorationParams,
    OpeParams,
    OutcomesParams,
    RolloutParams,
    StackParams,
    TraceStoreParams,
)
from rlops.common.params_uris import queue_url_problem, storage_root_problem, tracking_uri_problem
from rlops.model.offpolicy_config import OffPolicyConfig
from rlops.model.ppo_config import PPOConfig
from rlops.model.reward_model_config import RewardModelConfig


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


# --------------------------------------------------------------------------- capture, drift, calibration
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


class DriftParams(Block):
    """Drift step (``rlops/pipeline_steps/drift/stats.py``): KS test per numeric field, chi-square per
    categorical field; a field is drifted when p < threshold and effect >= min_effect."""

    threshold: float = Field(0.01, gt=0, lt=1, description="p-value cut-off (after Benjamini–Hochberg when bh is true)")
    min_effect: float = Field(0.02, ge=0, description="effect-size floor (KS D / total-variation distance)")
    bh: bool = Field(True, description="adjust p-values for testing many fields at once")
    cluster: str | None = Field(
        "episode_id", description="rows of one episode are one draw: p-values count episodes (null: rows)"
    )
    plots: Literal["all", "drifted"] = Field(
        "all", description="histograms in the HTML report: all fields, or `drifted` ones only"
    )
    fields: list[str] | None = Field(None, description="null: every state.* column plus latency_ms and error")
    report_dir: str = Field("drift", description="default output folder under storage.root")
    workers: int | None = Field(
        None, ge=1, description="threads for the field tests (null: the CPUs this process may use)"
    )
    baseline_episodes: int = Field(
        2000, ge=1, description="`rlops drift check`: sandbox episodes of the calibrated baseline"
    )
    anomaly_drop: float = Field(
        0.15,
        ge=0,
        description="`rlops drift check`: a live mean return this share of the sandbox's return scale below the "
        "sandbox's (and `anomaly_z` standard errors), and `anomaly_z` standard errors below the level before (the "
        "same policy's last `anomaly_level_hours` checks pooled), makes the hour a suspect of the return anomaly",
    )
    scale_floor: float = Field(
        0.05,
        ge=0,
        description="the sandbox's return scale (what anomaly_drop is a share of): |its mean return|, at least this "
        "× its per-episode standard deviation",
    )
    anomaly_z: float = Field(
        2.5,
        gt=0,
        description="`rlops drift check`: standard errors a live return's fall must exceed against the sandbox and "
        "against the level before for the hour to be a suspect (rlops/pipeline_steps/drift/anomaly.py)",
    )
    anomaly_confirm: Literal["next_hour", "none"] = Field(
        "next_hour",
        description="the return anomaly's confirmation: next_hour = a suspect raises the alarm (and the retrain) "
        "only when the next check of the same policy is still below the level before the fall and the two hours "
        "together are `anomaly_confirm_z` standard errors below it (a chance hour reverts, a lasting change "
        "stays); none = the alarm fires at the suspect hour. With the defaults a stable pack raises about 0.3 "
        "false alarms per 2,000 hourly checks (simulated; `bench/anomaly_false_alarms.py` counts them per pack)",
    )
    anomaly_confirm_z: float = Field(
        3.5, gt=0, description="standard errors the suspect and the next hour together must stay below the level"
    )
    anomaly_level_hours: int = Field(
        6, ge=1, description="unremarkable checks of the same policy pooled into the level a fall is measured from"
    )
    window_hours: float | None = Field(
        None,
        gt=0,
        description="live traffic tested by the drift monitor: null = "
        "the run key's hour partition, N = the N hours ending "
        "with the run key",
    )
    slice_hours: float | None = Field(
        None,
        gt=0,
        description="with window_hours: the drift_monitor DAG summarises the window in one mapped task per "
        "slice of this many hours (on any Celery worker) and reduces their counts, with the verdicts of one "
        "task; null: one task reads the window whole",
    )
    outcome_enabled: bool = Field(
        True, description="outcome drift: live rewards against the calibrated sandbox's prediction for the same states"
    )
    outcome_alpha: float = Field(
        0.001,
        gt=0,
        lt=1,
        description="Bonferroni-adjusted p-value cut-off over the (action, segment) cells, per hourly check: "
        "over 48 checks at most ~5% chance of one false alarm",
    )
    outcome_min_effect: float = Field(0.1, ge=0, description="|Cohen's d| floor of an outcome drift")
    outcome_min_rows: int = Field(50, ge=2, description="a cell with fewer rows on either side is reported, not tested")
    outcome_max_rows: int = Field(
        100_000,
        ge=1,
        description="a drift.window_hours window past this many rows tests outcome drift on whole episodes "
        "drawn by a stable hash of their id, about this many rows",
    )
    outcome_ridge: float = Field(1.0, ge=0, description="L2 penalty of the sandbox's per-action reward regression")
    outcome_quantiles: int = Field(
        4, ge=1, description="automatic segments: each observed numeric field's quantiles, each enum value"
    )
    outcome_clear_hours: int = Field(
        12,
        ge=1,
        description="consecutive hourly checks without outcome drift that end an episode of it (until then "
        "new drifted cells are reported, not raised as a new onset)",
    )


class RecalConfig(Block):
    """Recalibration (``rlops/pipeline_steps/drift/calibrate.py``, ``rlops calibrate``)."""

    min_rows: int = Field(30, ge=1, description="fewer initial values (or rows per API) keep the declared value")
    source: str | None = Field("live", description="rows used (null: every source)")
    window_hours: float | None = Field(None, gt=0, description="null: every row under --traces / the trace store")
    check_samples: int = Field(20_000, ge=1, description="sandbox initial states sampled for the before/after check")
    seed: int = Field(7, description="seed of the fits and the check")
    worse_tolerance: float = Field(
        0.01, ge=0, description="a field fit farther from live than the current sandbox (by more) is refused"
    )
    max_components: int = Field(
        3, ge=1, description="population segments fitted to a mixed live population (Gaussian mixture, BIC)"
    )
    min_component_weight: float = Field(
        0.05, ge=0, le=1, description="a mixture component holding fewer episodes is not a segment"
    )
    fit_outcomes: bool = Field(
        True,
        description="fit the pack's fittable hidden probabilities (`fit:`) from live outcomes, and the "
        "scale live traffic scores their outcome component with",
    )


# --------------------------------------------------------------------------- training
#: The most environment steps a training budget may name: 10^10 is days of a large machine; beyond
#: it a budget is a typo (10^30 would run for ever, and overflows the counters it feeds).
MAX_TIMESTEPS = 10**10
_TRAIN_OWN = frozenset({"total_timesteps", "ewc_lambda", "checkpoint_every"})


if TYPE_CHECKING:

    class OffpolicyParams(Block):
        def __getattr__(self, name: str) -> Any: ...
else:
    OffpolicyParams = block_from_dataclass(
        "OffpolicyParams",
        OffPolicyConfig,
        bounds={"weight_clip": (0, None), "epochs": (1, None), "batch_size": (1, None)},
        doc="Learning from logged traffic (rlops/model/offpolicy_config.py: OffPolicyConfig), `train.source: logs`.",
    )


class _TrainStep(Block):
    source: Literal["sandbox", "logs"] = Field(
        "sandbox",
        description="what the policy learns from: sandbox (PPO in the calibrated sandbox) | logs (the logged "
        "traffic of the window, off-policy; one-step packs only, docs/training.md)",
    )
    logs_window_hours: float = Field(24, gt=0, description="logs: live traces of this many hours before the run key")
    logs_holdout_share: float = Field(
        0.2, ge=0, lt=1, description="logs: share of the logged episodes held out for the off-policy gate"
    )
    logs_split_seed: int = Field(0, description="logs: salt of the episode-id hash that picks the held-out episodes")
    offpolicy: OffpolicyParams = Field(default_factory=OffpolicyParams, description=OffpolicyParams.__doc__)
    total_timesteps: int = Field(
        1_500_000, ge=1, le=MAX_TIMESTEPS, description="budget of a full retrain (environment steps, all envs together)"
    )
    incremental_timesteps: int = Field(
        200_000, ge=1, le=MAX_TIMESTEPS, description="budget of an incremental retrain warm-started from the champion"
    )
    ewc_lambda: float = Field(2000.0, ge=0, description="EWC strength in incremental mode (0: plain fine-tuning)")
    num_envs: int | None = Field(None, ge=1, description="episodes stepped at once (null: derived from the pack)")
    profile: str | None = Field(
        None,
        description="simulation profile to train in (null: `calibrated` once a "
        "calibration exists, else the pack's default)",
    )
    checkpoint_every: int = Field(10, ge=1, description="iterations between resumable checkpoints")
    threads: Literal["auto"] | Annotated[int, Field(ge=1)] = Field(
        "auto",
        description="torch threads of the training and of every DAG task (wins over ppo.torch_threads): auto = "
        "the CPUs the process may use (affinity, cgroup quota) / the tasks its Airflow worker runs at once, at least 1",
    )
    eval_episodes: int = Field(
        1000, ge=1, description="greedy episodes scored after training (the result's mean_return)"
    )
    eval_seed: int = Field(2_000_000, description="their seeds (disjoint from evaluate.seed)")
    reward_source: Literal["scripted", "model", "blend"] = Field(
        "scripted",
        description="per-step reward: scripted (the reward function) | model (the reward model's score) "
        "| blend (scripted + reward_blend_lambda · model)",
    )
    reward_blend_lambda: float = Field(1.0, ge=0, description="weight of the reward model in `blend`")
    reward_model_centred: bool = Field(
        True, description="model/blend: the model's score minus its mean over the state's legal actions"
    )
    bc_warm_start: bool = Field(
        True, description="model/blend, full mode: behaviour-clone the top relabelled steps first"
    )
    bc_top_fraction: float = Field(
        0.5, gt=0, le=1, description="share of the scored choice steps imitated (highest reward-model score)"
    )
    bc_epochs: int = Field(10, ge=1, description="behaviour-cloning epochs")


class RelabelParams(Block):
    """Relabel step (``rlops/pipeline_steps/training/relabel.py``, ``rlops train relabel``)."""

    window_hours: float = Field(24, gt=0, description="captured traces of this many hours before the run key")


class _RewardModelStep(Block):
    pairs: int = Field(4000, ge=1, description="sandbox preference pairs per training run")


if TYPE_CHECKING:
    # Built at import by create_model from the algorithms' config records (PPOConfig,
    # RewardModelConfig): a type checker sees the step's own fields, the record's fields by name.
    class PpoParams(Block):
        def __getattr__(self, name: str) -> Any: ...

    class TrainParams(_TrainStep):
        def __getattr__(self, name: str) -> Any: ...

    class RewardModelParams(_RewardModelStep):
        def __getattr__(self, name: str) -> Any: ...
else:
    PpoParams = block_from_dataclass(
        "PpoParams",
        PPOConfig,
        exclude=frozenset({"mode", "checkpoint_dir"}),
        bounds={"total_timesteps": (1, MAX_TIMESTEPS)},
        derived={
            "num_steps": "derived from the pack's horizon (rlops/model/pack_defaults.py)",
            "gamma": "derived from the pack's horizon",
            "num_minibatches": "derived from the batch size",
        },
        doc="Masked PPO hyperparameters (rlops/model/ppo_config.py: PPOConfig); `train:` keys with the same "
        "names override them for the training step.",
    )

    TrainParams = block_from_dataclass(
        "TrainParams",
        PPOConfig,
        # torch_threads: `threads` is the step's own (auto or a count)
        exclude=frozenset({"mode", "checkpoint_dir", "torch_threads"}) | _TRAIN_OWN,
        optional=True,
        base=_TrainStep,
        doc="Policy training (rlops/pipeline_steps/training/policy.py, `rlops train policy`): the step's own "
        "keys, plus any PPOConfig field, which overrides the `ppo:` block for this step.",
    )

    RewardModelParams = block_from_dataclass(
        "RewardModelParams",
        RewardModelConfig,
        exclude=frozenset({"seed"}),
        base=_RewardModelStep,
        doc="Reward model (rlops/model/reward_model.py; pairs from rlops/model/reward_pairs.py); seeded by `seed`.",
    )


# --------------------------------------------------------------------------- promotion
class GateConfig(Block):
    """Thresholds of the promotion gates (``rlops/pipeline_steps/promotion/gates.py``)."""

    confidence: float = Field(0.95, gt=0.5, lt=1, description="paired bootstrap interval of the mean return difference")
    bootstrap_samples: int = Field(2000, ge=100, description="bootstrap resamples")
    min_improvement: float = Field(
        0.0,
        description="the mean return difference's CI low bound must exceed this share of the champion's return scale "
        "(0: better; slightly negative: non-inferior)",
    )
    scale_floor: float = Field(
        0.05,
        ge=0,
        description="the champion's return scale is |its mean return|, at least this × its per-episode standard "
        "deviation: every margin on returns (min_improvement, segment_tolerance, the roll-out's regression check) "
        "is a share of it",
    )
    completion_epsilon: float = Field(0.01, ge=0, description="completion rate may drop by at most this (absolute)")
    handling_epsilon: float = Field(0.05, ge=0, description="mean handling time may grow by at most this fraction")
    takeover_epsilon: float = Field(0.01, ge=0, description="human-takeover rate may rise by at most this (absolute)")
    completion_min: float | None = Field(
        None, ge=0, le=1, description="operational budget (null: none): a completion rate at or above this passes"
    )
    handling_max_ms: float | None = Field(
        None, gt=0, description="operational budget: a mean handling time at most this passes"
    )
    takeover_max: float | None = Field(
        None, ge=0, le=1, description="operational budget: a takeover rate at most this passes"
    )
    max_illegal_rate: float = Field(0.0, ge=0, description="illegal actions per step")
    latency_p99_ratio: float = Field(
        1.5, gt=0, description="candidate p99 decision time (batch 1) over the champion's, timed together"
    )
    segment_tolerance: float = Field(
        0.15,
        ge=0,
        description="a segment's mean return may drop by at most this share of the champion's return scale (the "
        "roll-out rolls a champion back when its live return falls by more than this share of its predecessor's)",
    )
    min_segment_episodes: int = Field(100, ge=1, description="smaller segments are reported, not judged")
    ab_alpha: float = Field(
        0.05, gt=0, lt=1, description="a live metric fails when the challenger is worse at p < ab_alpha"
    )
    ab_min_episodes: int = Field(200, ge=1, description="per group, else the live A/B gates are skipped")
    require_stress_test: bool = Field(True, description="the candidate needs the model version tag stress_test=pass")


class RolloutStage(Block):
    """One stage of a staged roll-out that names a segment of traffic."""

    segment: str | None = Field(
        None,
        description="expression over observable state fields, e.g. \"user_profile.region == 'guangdong'\" "
        "(null: everyone)",
    )
    share: float = Field(1.0, gt=0, le=1, description="share of the segment's request keys the challenger serves")

    @field_validator("segment")
    @classmethod
    def _segment_parses(cls, segment: str | None) -> str | None:
        # The scenario's fields are checked where the pack is known (rlops.common.config.check_rollout_segments).
        if segment is None:
            return None
        try:
            ast.parse(segment.strip(), mode="eval")
        except SyntaxError as exc:
            raise ValueError(f"segment {segment!r} is not an expression: {exc.msg}") from None
        return segment.strip()


class EvaluateParams(GateConfig):
    """Gated evaluation and promotion (``rlops/pipeline_steps/promotion/evaluate.py``,
    ``rlops model evaluate|promote``): the gate thresholds plus the evaluation's own settings."""

    episodes: int = Field(4000, ge=1, description="held-out seeded episodes, the same for candidate and champion")
    seed: int = Field(1_000_000, description="first held-out seed (training envs use seeds near `seed`)")
    profile: str | None = Field(
        None,
        description="null: the calibrated sandbox once recalibrated (the world as last observed), else the "
        "production stand-in (`live`, else the pack's default profile)",
    )
    reward_fn: str | None = Field(None, description="null: the candidate's reward function")
    latency_samples: int = Field(300, ge=1, description="decisions timed for the latency gate")
    segments: dict[str, str] = Field(
        default_factory=dict, description="expression segments over the initial state; packs define theirs"
    )
    ab_window_hours: float = Field(
        24, gt=0, description="live A/B: captured traces of this many hours before the run key"
    )
    rollout_stages: list[float | RolloutStage] = Field(
        [0.05, 0.15, 1.0],
        min_length=1,
        description="`promote --staged`: challenger traffic share per passing evaluation, or stages "
        "{segment, share} that serve one segment of traffic at a time, the last one everyone at 1.0",
    )
    lock_timeout_s: float = Field(
        900, gt=0, description="seconds a promotion waits for another one of the same scenario to finish"
    )

    @field_validator("rollout_stages", mode="before")
    @classmethod
    def _stage_items(cls, stages: Any) -> Any:
        """A mapping is a :class:`RolloutStage`, checked here so that a bad one is one line naming the stage."""
        if not isinstance(stages, list):
            return stages
        out = []
        for i, s in enumerate(stages):
            if isinstance(s, dict):
                try:
                    s = RolloutStage.model_validate(s)
                except ValidationError as exc:
                    why = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'stage'}: {e['msg']}" for e in exc.errors())
                    raise ValueError(f"stage {i} {s!r}: {why}") from None
            out.append(s)
        return out

    @field_validator("rollout_stages")
    @classmethod
    def _stages_rise_to_one(cls, stages: list[float | RolloutStage]) -> list[float | RolloutStage]:
        shares = [s for s in stages if isinstance(s, float)]
        if len(shares) == len(stages):
            if shares != sorted(shares) or not shares[0] > 0 or shares[-1] != 1.0:
                raise ValueError(f"must rise from above 0 to 1.0, got {shares}")
            return stages
        last = stages[-1]
        if not (isinstance(last, RolloutStage) and last.segment is None and last.share == 1.0) and last != 1.0:
            raise ValueError(
                "with segment stages, the last stage must serve everyone at 1.0 ({segment: null, share: 1.0})"
            )
        for i, s in enumerate(stages):
            if isinstance(s, float) and not 0 < s <= 1:
                raise ValueError(f"stage {i}: a share must be above 0 and at most 1, got {s}")
        return stages


class WebhookParams(Block):
    """The MLflow model-registry webhook receiver (``rlops model webhook serve``)."""

    mode: Literal["embedded", "airflow"] = Field(
        "embedded", description="embedded: promote in the receiver's process | airflow: trigger the DAG"
    )
    secret_env: str = Field(
        "RLOPS_WEBHOOK_SECRET", description="env var holding the HMAC secret shared with MLflow's webhook"
    )
    airflow_url: str = Field("http://localhost:8080", description="Airflow 3 API server (mode airflow)")
    airflow_token_env: str = Field(
        "RLOPS_AIRFLOW_TOKEN", description="env var holding a bearer token for Airflow's REST API"
    )
    dag_id: str = Field(
        "promote__{scenario}", description="DAG triggered in mode airflow ({scenario}: the policy's pack)"
    )
    max_body_bytes: int = Field(65_536, gt=0, description="larger bodies are refused (413) before they are read")
    tolerance_s: int = Field(300, gt=0, description="a delivery's timestamp may be this far from now")
    state_db: str = Field(
        "rlops-data/webhook.db", description="delivery ids seen (replays refused) and requests Airflow did not take yet"
    )
    retry_s: float = Field(30.0, gt=0, description="airflow mode: how often a kept request is tried again")
    read_timeout_s: float = Field(
        10.0, gt=0, description="a connection whose request has not arrived whole by then is closed"
    )


class PromotionParams(Block):
    """Promotion requested from the MLflow UI (``rlops/pipeline_steps/promotion/webhook.py`` + ``guard.py``)."""

    manual_champion: Literal["regate", "revert"] = Field(
        "regate", description="a `champion` alias set by hand: re-gated like any candidate, or only reverted"
    )
    staged: bool = Field(False, description="true: a UI-requested promotion rolls out as challenger 5% → 15% → 100%")
    webhook: WebhookParams = Field(default_factory=WebhookParams, description="the webhook receiver")


class Perturbation(Block):
    """One perturbed simulation of the policy stress test."""

    latency: float = Field(1.0, gt=0, description="latency ×k")
    errors: float = Field(
        1.0, ge=0, description="error rates k times as bad: each call fails as one of k calls in a row, 1 - (1 - p)^k"
    )
    segment: str | None = Field(None, description="every episode in this population segment of the pack")
    return_floor: float | None = Field(None, ge=0, description="null: stress.return_floor")
    completion_floor: float | None = Field(None, ge=0, le=1, description="null: stress.completion_floor")


class StressConfig(Block):
    """Stress test (``rlops/pipeline_steps/stress/step.py``, ``rlops stress``)."""

    edge_states: int = Field(
        2048, ge=1000, description="edge states per action (>= 1000), stepped in a nominal and a harsh simulation"
    )
    seed: int = Field(7, description="seed of the edge states")
    reward_bound: float = Field(10.0, gt=0, description="|reward| bound when the reward module sets no CLIP")
    sum_tolerance: float = Field(1e-4, ge=0, description='relative tolerance of "breakdown sums to the total"')
    gaming_episodes: int = Field(2000, ge=1, description="seeded episodes per gaming probe and baseline (paired)")
    gaming_seed: int = Field(1_000_000, description="first seed of those episodes")
    gaming_margin: float = Field(
        0.0, description="a probe fails when the low end of its 95% advantage interval exceeds this"
    )
    baselines: list[Literal["rules", "oracle"]] = Field(
        ["rules", "oracle"],
        min_length=1,
        description="honest policies; the best one is the bar (oracle: the pack's oracle.py, if any)",
    )
    policy_episodes: int = Field(2000, ge=1, description="episodes of the policy run, nominal and per perturbation")
    policy_profile: str | None = Field(
        None, description="nominal profile (null: the calibrated sandbox, else the pack's default)"
    )
    return_floor: float = Field(
        0.5,
        ge=0,
        description="perturbed mean return >= min(nominal - return_floor · "
        "|nominal|, the rule engine's under the same perturbation)",
    )
    completion_floor: float = Field(
        0.9, ge=0, le=1, description="perturbed completion rate >= completion_floor · nominal"
    )
    perturbations: dict[str, Perturbation] = Field(
        default_factory=lambda: {"latency_x3": Perturbation(latency=3.0), "errors_x5": Perturbation(errors=5.0)},
        description="name: {latency, errors, segment[, return_floor, completion_floor]}; packs add their "
        "population segments",
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
    """Audit report (``rlops/pipeline_steps/audit/replay.py``, ``rlops audit``, ``rlops replay``)."""

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
    # (their static view: the TYPE_CHECKING block above).
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
    "DriftParams",
    "DvcParams",
    "EvaluateParams",
    "GateConfig",
    "Params",
    "Perturbation",
    "PpoParams",
    "PromotionParams",
    "QueueConfig",
    "RecalConfig",
    "RelabelParams",
    "RewardModelParams",
    "RolloutStage",
    "SignalsParams",
    "StorageParams",
    "StressConfig",
    "TrackingParams",
    "TrainParams",
    "WebhookParams",
]
