"""The params blocks of drift monitoring: the drift tests of live traffic against its reference, the
return anomaly and outcome drift checks, and the recalibration of the sandbox to live traffic (see
``params.yaml`` for each key)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlops.common.params_base import Block


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
    outcome_alpha: float = Field(
        0.01,
        gt=0,
        lt=1,
        description="an outcome factor or a reward scale is kept only when its test's Bonferroni-adjusted "
        "p-value is below this",
    )
    outcome_min_rows: int = Field(
        100, ge=1, description="settled outcomes a field (and each segment tested for a factor) needs to be fitted"
    )
    outcome_quantiles: int = Field(
        8, ge=2, description="numeric `by:` fields are cut into this many quantile segments for a factor"
    )
    outcome_max_factors: int = Field(3, ge=1, description="most outcome factors kept per fitted field")
    reward_scale_min_rows: int = Field(
        30, ge=2, description="scores of one sign, live and in the sandbox each, a reward scale needs"
    )
    reward_scale_min_change: float = Field(
        0.1, ge=0, description="a reward scale is kept only when it differs from 1 by at least this"
    )


__all__ = ["DriftParams", "RecalConfig"]
