"""The params blocks of the running loop: how the trace store is read, the per-pack DAG schedules,
the staged roll-out and rollback, off-policy evaluation and late outcomes (see ``params.yaml`` for each key)."""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator

from rlops.agent_sdk.serving_defaults import DEFAULT_EXPLORATION
from rlops.common.params_base import Block

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B|%)\s*$", re.IGNORECASE)
_UNIT_BYTES = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNIT_BYTES |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
#: DuckDB fails its first read below about this much working memory ("Out of Memory Error").
MIN_MEMORY_LIMIT_MB = 64


def memory_limit_problem(value: str) -> str | None:
    """What is wrong with a DuckDB ``memory_limit`` (None: a size DuckDB can work in). "0GB" is
    accepted by DuckDB and then fails every query; a percentage is of the machine's memory."""
    expected = "expected a positive size such as 512MB or 2GB, or a share of the machine's memory such as 50%"
    found = _SIZE.match(str(value))
    if found is None:
        return f"{value!r} is no size; {expected}"
    number, unit = float(found[1]), found[2].lower()
    if unit == "%":
        return None if 1.0 <= number <= 100.0 else f"{value!r}: a share of the memory is from 1% to 100%; {expected}"
    if not math.isfinite(number) or number * _UNIT_BYTES[unit] < MIN_MEMORY_LIMIT_MB * 10**6:
        return f"{value!r} is too small for DuckDB to read a partition: at least {MIN_MEMORY_LIMIT_MB}MB; {expected}"
    return None


class TraceStoreParams(Block):
    """Trace-store reads (``rlops/trace_store/query.py``): DuckDB over the parquet partitions."""

    engine: Literal["duckdb", "pandas"] = Field(
        "duckdb", description="duckdb | pandas (every matching file read whole into memory: the reference path)"
    )
    threads: int = Field(0, ge=0, description="DuckDB worker threads (0: the CPUs this process may use)")
    memory_limit: str = Field(
        "1GB", description="DuckDB working memory per process (512MB, 2GB, 50%); beyond it, work spills"
    )
    temp_directory: str | None = Field(None, description="spill folder (null: <system temp>/rlops-duckdb)")

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _a_usable_size(cls, value: object) -> object:
        # before the type check: a bare 1000 is a size without its unit, not "a valid string"
        problem = memory_limit_problem(str(value)) if isinstance(value, (str, int, float)) else None
        if problem is not None:
            raise ValueError(problem)
        return value


class RolloutParams(Block):
    """Staged roll-out and rollback (``rlops/pipeline_steps/promotion/rollout.py``, the rollout__<pack> DAG)."""

    staged: bool = Field(True, description="retrains stage a passing candidate as challenger (false: champion at once)")
    staged_emergency: bool = Field(
        False, description="a retrain triggered by drift replaces the stale champion at once"
    )
    staged_first_champion: bool = Field(
        True,
        description="true: a pack's first champion rolls out staged too, its live A/B against the rule engine "
        "the last word (false: a candidate that beat the rule engine in the gates becomes champion at once)",
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
    unpaused: list[str] | None = Field(
        None,
        description="DAG ids (fnmatch patterns, e.g. '*__credit_approval', 'promote__*') `rlops stack up` unpauses; "
        "null: every DAG of the params' scenario pack and promote of every pack",
    )


class StackParams(Block):
    """The one-machine deployment started by ``rlops stack up`` (``rlops/stack/``): where it lives, its ports."""

    home: str = Field(
        "rlops-data/stack", description="the stack's folder: secrets, AIRFLOW_HOME, process logs and state"
    )
    host: str = Field("127.0.0.1", description="address every listener binds (127.0.0.1: this machine only)")
    airflow_port: int = Field(8080, ge=1, le=65535, description="Airflow API server and UI")
    mlflow_port: int = Field(5000, ge=1, le=65535, description="MLflow tracking server and UI")
    console_port: int = Field(8765, ge=1, le=65535, description="rlops console")
    webhook_port: int = Field(8766, ge=1, le=65535, description="webhook receiver (MLflow UI promotion)")
    database: Literal["auto", "postgresql", "sqlite"] = Field(
        "auto", description="Airflow's metadata DB: auto = PostgreSQL when postgres_url answers, else SQLite"
    )
    postgres_url: str = Field(
        "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres",
        description="a PostgreSQL server the stack may create its database on (the database part is replaced)",
    )
    parallelism: int = Field(
        4, ge=1, description="task processes Airflow's LocalExecutor runs at once (training takes its threads from it)"
    )
    pools: dict[str, int] = Field(
        default_factory=lambda: {"gpu": 1}, description="Airflow pools created at start: name -> slots"
    )
    start_timeout_s: float = Field(240, gt=0, description="how long `up` waits for every part to answer")
    log_max_mb: float = Field(
        20, gt=0, le=10_000, description="a process log under logs/ larger than this is rotated (copied to .1, emptied)"
    )
    log_keep: int = Field(3, ge=1, le=100, description="rotated copies kept per process log (<part>.log.1 … .N)")


class ExplorationParams(Block):
    """Exploration under any incumbent (``rlops/agent_sdk/serving.py``): the share of decisions drawn
    from a declared distribution over the legal actions, whoever serves — the champion, the rule
    engine, an agent's router served through an integration — with the true propensity on each
    row, so that every candidate can be judged on logged traffic (``ope:``)."""

    share: float = Field(
        DEFAULT_EXPLORATION,
        ge=0,
        le=0.5,
        description="share of decisions explored (0: none; a pack turns it off with 0). Its cost on the live "
        "return is measured from the logs (explored vs. chosen decisions)",
    )
    distribution: Literal["uniform", "policy"] = Field(
        "policy",
        description="policy: the serving policy's own distribution over the legal actions (the rule engine, which "
        "has none, explores uniformly) | uniform over the legal actions. Measured on the credit pack at share "
        "0.05: a champion exploring its own distribution gives up 0.3% of the live return, uniformly 12%",
    )
    off_segment: str | None = Field(
        None,
        description="expression over observable state fields whose requests never explore "
        '(e.g. "user_profile.age >= 75"; null: all may)',
    )


class OpeParams(Block):
    """Off-policy evaluation (``rlops/pipeline_steps/promotion/ope.py``, ``ope_gate.py``): the gate ``ope:dr``."""

    enabled: bool = Field(True, description="judge candidates on logged live traffic beside the sandbox gates")
    required: bool = Field(
        True,
        description="true: a candidate without off-policy evidence (insufficient, or ope.enabled false) goes at most "
        "to the canary stage | false: the sandbox's gates may decide alone (a world with no live traffic to "
        "judge by, e.g. a simulation; the gate table still says the evidence was insufficient)",
    )
    window_hours: float = Field(24, gt=0, description="live traces of this many hours before the run key")
    min_episodes: int = Field(200, ge=1, description="fewer complete live episodes: the gate is skipped")
    min_ess: float = Field(50, ge=0, description="effective sample size of the importance weights below this: skipped")
    max_censored: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of the window's complete live episodes still awaiting a late outcome (outcomes:) above "
        "which the evidence is insufficient; below it they are left out, their returns not being final",
    )
    max_unsupported: float = Field(
        0.05,
        ge=0,
        le=1,
        description="share of live episodes with a decision served with near certainty (see min_support) where "
        "the candidate would act otherwise, above which the evidence is insufficient: its choices there were "
        "never tried",
    )
    min_support: float = Field(
        0.01,
        ge=0,
        lt=1,
        description="a decision served with a propensity above 1 − min_support left the other actions less than "
        "this chance: unsupported for a candidate that acts otherwise there",
    )
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
        0.25,
        ge=0,
        description="share of the logged value's scale (|logged value|, see scale_floor): pass when DR's lower "
        "bound ≥ logged − tolerance × scale, fail when its upper bound is below; between: insufficient (canary)",
    )
    scale_floor: float = Field(
        0.05,
        ge=0,
        description="the logged value's scale, of which every margin is a share, is |logged value| but at least "
        "this share of the per-episode return's standard deviation (a value near 0 keeps a margin)",
    )
    gap_threshold: float = Field(
        0.25,
        ge=0,
        description="sandbox vs. logged evidence, as a share of the logged value's scale: a sandbox whose value of the "
        "incumbent is further than this outside the logged interval is untrusted; a candidate whose sandbox "
        "value exceeds DR's upper bound by more is flagged as exploiting the sandbox",
    )
    target: Literal["serving", "greedy", "stochastic"] = Field(
        "serving",
        description="the candidate as it will serve: serving = its greedy choice plus the exploration it serves "
        "with (exploration.share over exploration.distribution) | greedy | stochastic (its softmax)",
    )
    max_weight_share: float = Field(
        0.3,
        gt=0,
        le=1,
        description="share of the importance-weight mass the ten largest-weighted episodes may carry; "
        "more: the estimate rests on a handful of rows (insufficient)",
    )
    mean_weight_band: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="the mean importance weight (1 with the true propensities) must lie within 1 ± this, beyond "
        "its own sampling error: else the weights carry no information (insufficient)",
    )
    switch_tau: float = Field(
        50.0,
        gt=1,
        description="switch DR: decisions whose cumulative importance weight exceeds this use the direct method only",
    )
    seed: int = Field(0, description="seed of the bootstrap and the direct method's rollouts")


class OutcomeReward(Block):
    """How one named outcome value becomes reward: ``weight × value`` on the episode's last step."""

    component: str = Field(description="the reward component it is reported as (column outcome_reward, docs)")
    weight: float = Field(1.0, description="reward per unit of the outcome's value (negative: a cost)")


class OutcomesParams(Block):
    """Late business outcomes (``rlops/trace_store/outcomes.py``, ``rlops outcome``, docs/outcomes.md)."""

    max_delay_days: int = Field(
        180,
        ge=1,
        description="an outcome later than this after its episode's last decision is quarantined; an awaited "
        "episode younger than this without its outcome is censored (its return is not final)",
    )
    dir: str = Field("outcomes", description="outcome store under storage.root: scenario=<s>/date=<decision date>/")
    quarantine_dir: str = Field("outcome_quarantine", description="quarantined outcome records under storage.root")
    rewards: dict[str, OutcomeReward] = Field(
        default_factory=dict,
        description="outcome name → {component, weight}: the reward its value adds to the episode's last step "
        "(a pack declares them in its params.yaml; none: outcomes are stored but no return changes)",
    )
    awaited_actions: list[str] | None = Field(
        None,
        description="episodes whose last action is one of these await an outcome (null: every episode, once "
        "`rewards` names one); only awaited episodes can be censored",
    )


__all__ = [
    "DagsParams",
    "ExplorationParams",
    "OpeParams",
    "OutcomeReward",
    "OutcomesParams",
    "RolloutParams",
    "TraceStoreParams",
]
