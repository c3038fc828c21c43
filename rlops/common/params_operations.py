"""The params blocks of the running loop: how the trace store is read, the per-pack DAG schedules,
the staged roll-out and rollback, and off-policy evaluation (see ``params.yaml`` for each key)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlops.common.params_base import Block


class TraceStoreParams(Block):
    """Trace-store reads (``rlops/pipeline_steps/infra/trace_query.py``): DuckDB over the parquet partitions."""

    engine: Literal["duckdb", "pandas"] = Field(
        "duckdb", description="duckdb | pandas (every matching file read whole into memory: the reference path)"
    )
    threads: int = Field(0, ge=0, description="DuckDB worker threads (0: the CPUs this process may use)")
    memory_limit: str = Field(
        "1GB", description="DuckDB working memory per process (512MB, 2GB, 50%); beyond it, work spills"
    )
    temp_directory: str | None = Field(None, description="spill folder (null: <system temp>/rlops-duckdb)")


class RolloutParams(Block):
    """Staged roll-out and rollback (``rlops/pipeline_steps/promotion/rollout.py``, the rollout__<pack> DAG)."""

    staged: bool = Field(True, description="retrains stage a passing candidate as challenger (false: champion at once)")
    staged_emergency: bool = Field(
        False, description="a retrain triggered by drift replaces the stale champion at once"
    )
    min_stage_minutes: float = Field(
        60, ge=0, description="a stage serves at least this long before its live A/B gates may move it"
    )
    regression_window_hours: float = Field(
        2, gt=0, description="live rows of this many hours judge the champion against the previous one"
    )
    regression_min_episodes: int = Field(
        200, ge=1, description="episodes per policy in that window, else no rollback judgement"
    )


class DagsParams(Block):
    """The per-pack DAGs (``dags/``, ids ``<dag>__<pack>``): schedules as cron or Airflow presets, null =
    only when triggered."""

    scheduled: bool = Field(True, description="false: every DAG of the pack runs only when triggered")
    trace_capture: str | None = Field("*/15 * * * *", description="schedule of trace_capture")
    drift_monitor: str | None = Field("@hourly", description="schedule of drift_monitor")
    label_queue: str | None = Field("@hourly", description="schedule of label_queue")
    retrain_incremental: str | None = Field("*/15 * * * *", description="schedule of retrain_incremental")
    retrain_full: str | None = Field("@hourly", description="schedule of retrain_full")
    rollout: str | None = Field("*/15 * * * *", description="schedule of rollout")
    skip_unchanged: bool = Field(
        True,
        description="a retrain whose inputs (traces, calibration, champion, reward "
        "fn, budget) equal the last one's is skipped",
    )


class OpeParams(Block):
    """Off-policy evaluation (``rlops/pipeline_steps/promotion/ope.py``, ``ope_gate.py``): the gate ``ope:dr``."""

    enabled: bool = Field(True, description="judge candidates on logged live traffic beside the sandbox gates")
    window_hours: float = Field(24, gt=0, description="live traces of this many hours before the run key")
    min_episodes: int = Field(200, ge=1, description="fewer complete live episodes: the gate is skipped")
    min_ess: float = Field(50, ge=0, description="effective sample size of the importance weights below this: skipped")
    confidence: float = Field(0.95, gt=0.5, lt=1, description="interval level")
    ci: Literal["normal", "bootstrap"] = Field(
        "normal", description="PDIS/DR interval: normal (mean ± z·se) | bootstrap; WIS: always bootstrap"
    )
    bootstrap_samples: int = Field(1000, ge=100, description="bootstrap resamples")
    direct_method: Literal["sandbox", "reward_model", "none"] = Field(
        "sandbox", description="DR's Q̂: sandbox (fitted on calibrated-sandbox rollouts) | reward_model | none"
    )
    dm_episodes: int = Field(2000, ge=1, description="sandbox episodes rolled to fit the direct method")
    dm_explore: float = Field(0.3, ge=0, le=1, description="share of random legal actions in them")
    ridge: float = Field(1.0, ge=0, description="L2 penalty of the direct method's per-action least squares")
    tolerance: float = Field(
        0.05, ge=0, description="fail: DR upper bound < the logged policy's live return − tolerance"
    )
    gap_threshold: float = Field(
        0.1, ge=0, description="|sandbox − DR| above this (outside DR's interval): a sim-to-real gap"
    )
    target: Literal["greedy", "stochastic"] = Field("greedy", description="the candidate as it would serve")
    seed: int = Field(0, description="seed of the bootstrap and the direct method's rollouts")


__all__ = ["DagsParams", "OpeParams", "RolloutParams", "TraceStoreParams"]
