"""The params blocks of promotion: the gate thresholds and the gated evaluation, the staged roll-out's
stages, promotion requested from the MLflow UI (its webhook receiver) and the stress test a candidate
passes first (see ``params.yaml`` for each key)."""

from __future__ import annotations

import ast
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator

from rlops.common.params_base import Block


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


__all__ = [
    "EvaluateParams",
    "GateConfig",
    "Perturbation",
    "PromotionParams",
    "RolloutStage",
    "StressConfig",
    "WebhookParams",
]
