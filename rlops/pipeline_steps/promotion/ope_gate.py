"""The off-policy gate: a candidate judged on logged live traffic before it serves any of it.

:func:`ope_gates` is what ``evaluate_candidate`` calls: it reads the last ``ope.window_hours`` of
live traces, fits the direct method in the calibrated sandbox (or takes the newest reward model),
estimates the candidate's value there (:func:`~rlops.pipeline_steps.promotion.ope_value.off_policy_value`,
the pure core: PDIS, WIS and DR with intervals, the logged policy's own live return, the effective
sample size and the agreement with the served decisions) and returns the gate rows, the MLflow
metrics and a note; :func:`ope_run_fields` gives the params (interval kind and level, direct
method, …) and the tags (``rlops.ope.state``, ``rlops.ope.reason``) the evaluation run records
beside those metrics.

Gate ``ope:dr`` (states ``pass | fail | skipped``; ``skipped`` here always means *insufficient
evidence*, which holds the candidate at the canary stage — :mod:`rlops.pipeline_steps.promotion.evidence`):

* insufficient — fewer than ``ope.min_episodes`` complete live episodes in the window, rows
  without a usable propensity or a finite ``reward_total`` (an agent that reports no reward has
  nothing to judge with), more than ``ope.max_unsupported`` of the episodes with a decision served
  with certainty where the candidate would act otherwise, weights that carry no information (an
  effective sample size under ``ope.min_ess``, the ten largest-weighted episodes holding more
  than ``ope.max_weight_share`` of the weight mass, a mean weight outside ``1 ± ope.mean_weight_band``
  beyond its sampling error), estimates that are not finite, or DR's interval straddling the
  logged value less the margin (neither shown non-inferior nor shown worse); the reason is in the
  row (:mod:`rlops.pipeline_steps.promotion.ope_sufficiency`).
* ``fail`` — DR's upper bound is below the logged value minus the margin ``ope.tolerance`` × the
  logged value's scale (:func:`~rlops.pipeline_steps.promotion.ope_value.value_scale`): on real
  traffic the candidate is confidently worse than what serves now.
* ``pass`` — DR's lower bound is at or above that line: the candidate is shown non-inferior.

Every margin is a share of the logged value's scale (``|value|``, at least ``ope.scale_floor`` of
the per-episode return's standard deviation), so the same defaults judge a click rate of 0.005 and
a credit return of 0.5. The target is the candidate *as it will serve* (``ope.target: serving``):
its greedy choice plus the exploration it serves with (``exploration:``).

A sandbox estimate of the candidate above DR's upper bound by more than ``ope.gap_threshold`` ×
|logged value| flags the candidate as *exploiting the sandbox* (gate ``ope:sandbox_gap``, which
fails): the sandbox promises what the logged traffic does not show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.pipeline_steps.promotion.gates import Gate
from rlops.pipeline_steps.promotion.ope import OPEConfig
from rlops.pipeline_steps.promotion.ope_direct import LinearQ, TargetProbs, reward_model_q, sandbox_q
from rlops.pipeline_steps.promotion.ope_sufficiency import traffic_problem
from rlops.pipeline_steps.promotion.ope_value import (
    OPEResult,
    complete_live_episodes,
    off_policy_value,
    serving_target,
    value_scale,
)
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.pipeline_steps.training.relabel import latest_reward_model_version, load_reward_model_version
from rlops.registry import tags as T

if TYPE_CHECKING:
    import pandas as pd

    from rlops.common.params_operations import ExplorationParams
    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.sandbox.pack import Pack


def sim_to_real_gap(res: OPEResult, sandbox_value: float | None, cfg: OPEConfig) -> float | None:
    """``sandbox − DR`` when the sandbox value of the candidate lies outside DR's interval by more
    than ``ope.gap_threshold × |logged value|``, else None (also without an estimate to compare)."""
    dr = res.estimates.get("dr")
    if dr is None or sandbox_value is None or not math.isfinite(sandbox_value) or res.skipped:
        return None
    slack = cfg.gap_threshold * value_scale(res.logged_return, res.logged_return_sd, cfg)
    outside = sandbox_value > dr.high + slack or sandbox_value < dr.low - slack
    return sandbox_value - dr.value if outside else None


#: How an ``ope:dr`` row's detail says the evidence could not decide (``skipped: <this><reason>``).
INSUFFICIENT = "insufficient evidence (at most the canary stage): "


def tolerance_text(cfg: OPEConfig) -> str:
    return f"DR {cfg.confidence:.0%} lower ≥ logged − {cfg.tolerance:.0%} of its scale (fail: upper below it)"


def ope_gate_row(res: OPEResult, cfg: OPEConfig) -> Gate:
    """The ``ope:dr`` row: ``pass`` / ``fail`` on DR's upper bound against the logged value less
    the margin; ``skipped`` with the reason when the evidence is insufficient (held at canary)."""
    threshold = tolerance_text(cfg)
    if res.skipped:
        return Gate(
            "ope:dr",
            None,
            None if math.isnan(res.logged_return) else res.logged_return,
            threshold,
            True,
            f"skipped: {INSUFFICIENT}{res.skipped}",
            skipped=True,
        )
    dr = res.estimates["dr"]
    margin = cfg.tolerance * value_scale(res.logged_return, res.logged_return_sd, cfg)
    passed = dr.low >= res.logged_return - margin
    others = "; ".join(
        f"{name.upper()} {e.value:.4g} [{e.low:.4g}, {e.high:.4g}]" for name, e in res.estimates.items() if name != "dr"
    )
    w = res.weights
    weights = f", max weight {w.max:.3g}, top-1% mass {w.top_share:.0%}" if w is not None else ""
    detail = (
        f"DR {dr.value:.4g} [{dr.low:.4g}, {dr.high:.4g}] ({dr.ci}) vs logged {res.logged_return:.4g} − margin "
        f"{margin:.3g}; {others}; {res.episodes} live episodes, ESS {res.ess:.0f}{weights}, "
        f"unsupported {res.unsupported_share:.0%}, agreement {res.agreement:.0%}"
    )
    return Gate("ope:dr", dr.value, res.logged_return, threshold, bool(passed), detail)


def sandbox_gap_row(res: OPEResult, sandbox_value: float | None, cfg: OPEConfig) -> Gate:
    """``ope:sandbox_gap``: fails when the sandbox values the candidate above DR's upper bound by
    more than ``ope.gap_threshold × |logged value|`` — it exploits what the sandbox gets wrong."""
    threshold = f"sandbox ≤ DR upper + {cfg.gap_threshold:.0%} of the logged scale"
    dr = res.estimates.get("dr")
    if res.skipped or dr is None or sandbox_value is None or not math.isfinite(sandbox_value):
        return Gate(
            "ope:sandbox_gap",
            sandbox_value,
            None,
            threshold,
            True,
            "skipped: no off-policy estimate to hold the sandbox's value to",
            skipped=True,
        )
    bound = dr.high + cfg.gap_threshold * value_scale(res.logged_return, res.logged_return_sd, cfg)
    passed = sandbox_value <= bound
    detail = (
        f"the sandbox values the candidate at {sandbox_value:.4g}, logged traffic (DR) at {dr.value:.4g} "
        f"[{dr.low:.4g}, {dr.high:.4g}]"
        + ("" if passed else f": EXPLOITING THE SANDBOX — it promises {sandbox_value - dr.high:.3g} beyond DR's bound")
    )
    return Gate("ope:sandbox_gap", sandbox_value, dr.high, threshold, bool(passed), detail)


@dataclass(frozen=True)
class OffPolicyEvidence:
    """What :func:`ope_gates` found: its gate rows, the ``ope_*`` metrics, a note for the report
    and the result itself (None when ``ope.enabled`` is false)."""

    gates: list[Gate]
    metrics: dict[str, float]
    note: str
    result: OPEResult | None


def ope_gates(
    services: StepServices,
    cfg: OPEConfig,
    exploration: ExplorationParams,
    pack: Pack,
    candidate: PolicyNetwork,
    sandbox_value: float | None,
    reward_label: str | None,
    profile: str | None,
    holdout: HoldOut | None = None,
) -> OffPolicyEvidence:
    """The ``ope:dr`` and ``ope:sandbox_gap`` gates of ``candidate`` as it will serve, on the live
    traffic of the window (``cfg``: the ``ope:`` block; ``exploration``: how the candidate will
    serve), with their MLflow metrics (``ope_*``) and a note for the report. A candidate learnt from
    logs (``holdout``: the split recorded on its version) is judged on the window's held-out
    episodes only: on the episodes it was trained on, its estimate would be optimistic by as much
    as it fitted their noise."""
    if not cfg.enabled:
        return OffPolicyEvidence([], {}, "off-policy evaluation: off (ope.enabled): at most the canary stage", None)
    frame = services.traces.read(services.scenario, services.key.lookback(cfg.window_hours))
    if holdout is not None and len(frame):
        frame = frame[np.asarray(holdout.held_out(frame["episode_id"]), dtype=bool)]
    target = serving_target(candidate, cfg, exploration)
    frame = frame.reset_index(drop=True)
    q: Any = None
    if cfg.direct_method == "sandbox" and traffic_problem(complete_live_episodes(frame), cfg) is None:
        q = sandbox_direct(pack, target, cfg, profile, reward_label)
    res = off_policy_value(pack, frame, target, cfg, q)
    if cfg.direct_method == "reward_model" and not res.skipped:
        res = _with_reward_model(services, pack, frame, target, cfg) or res
    metrics = ope_metrics(res, sandbox_value, cfg)
    gap = metrics.get("ope_sim_to_real_gap")
    note = "off-policy: " + (
        f"insufficient evidence: {res.skipped}"
        if res.skipped
        else f"DR {res.estimates['dr'].value:.4g} on {res.episodes} live episodes"
    )
    if holdout is not None:
        note += f" (the {holdout.share:g} held out of its training log, split seed {holdout.seed})"
    if gap is not None:
        note += (
            f"; SIM-TO-REAL GAP: the sandbox estimates {sandbox_value:.4g}, live traffic (DR) "
            f"{res.estimates['dr'].value:.4g}"
        )
    rows = [ope_gate_row(res, cfg), sandbox_gap_row(res, sandbox_value, cfg)]
    return OffPolicyEvidence(rows, metrics, note, res)


def ope_metrics(res: OPEResult, sandbox_value: float | None, cfg: OPEConfig) -> dict[str, float]:
    """The ``ope_*`` metrics of an evaluation run: the result's, the sandbox estimate of the
    candidate (``ope_sandbox_value``, what DR is compared with) and ``ope_sim_to_real_gap`` when
    :func:`sim_to_real_gap` finds one."""
    metrics = res.metrics()
    if sandbox_value is not None and math.isfinite(sandbox_value):
        metrics["ope_sandbox_value"] = float(sandbox_value)
    gap = sim_to_real_gap(res, sandbox_value, cfg)
    if gap is not None:
        metrics["ope_sim_to_real_gap"] = float(gap)
    return metrics


def ope_run_fields(gates: list[Gate], cfg: OPEConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The params and tags an evaluation run records of its ``ope:dr`` gate beside the ``ope_*``
    metrics: the settings the estimates were made with (interval kind and level, direct method,
    target, window, tolerance, gap threshold) and the gate's state with its skip reason, so the
    run alone says what the off-policy evaluation concluded and why."""
    row = next((g for g in gates if g.gate == "ope:dr"), None)
    if not cfg.enabled or row is None:
        return {}, {T.OPE_STATE: "off", T.OPE_REASON: "ope.enabled is false"}
    params = {
        "ope.ci": cfg.ci,
        "ope.confidence": f"{cfg.confidence:g}",
        "ope.direct_method": cfg.direct_method,
        "ope.target": cfg.target,
        "ope.window_hours": f"{cfg.window_hours:g}",
        "ope.tolerance": f"{cfg.tolerance:g}",
        "ope.gap_threshold": f"{cfg.gap_threshold:g}",
        "ope.min_ess": f"{cfg.min_ess:g}",
        "ope.max_weight_share": f"{cfg.max_weight_share:g}",
        "ope.mean_weight_band": f"{cfg.mean_weight_band:g}",
    }
    tags: dict[str, str] = {T.OPE_STATE: str(row.status)}
    if row.skipped:
        reason = row.detail.removeprefix("skipped: ").removeprefix(INSUFFICIENT)
        tags[T.OPE_REASON] = reason[:5000]  # MLflow caps tag values
    return params, tags


def sandbox_direct(
    pack: Pack, target: TargetProbs, cfg: OPEConfig, profile: str | None, reward_label: str | None
) -> LinearQ:
    """DR's sandbox direct method for ``target``: a linear Q̂ fitted on ``ope.dm_episodes`` sandbox
    episodes the target plays with ``ope.dm_explore`` of its decisions random legal ones."""
    return sandbox_q(
        pack,
        target,
        episodes=cfg.dm_episodes,
        explore=cfg.dm_explore,
        ridge=cfg.ridge,
        profile=profile,
        reward_label=reward_label,
        seed=cfg.seed,
    )


def reward_model_rows(ctx: StepServices, pack: Pack, frame: pd.DataFrame) -> np.ndarray | None:
    """The newest reward model's ``Q̂[N, A]`` on every row of ``frame`` (zero on rows outside
    :func:`complete_live_episodes`); None when no reward model is registered."""
    import pandas as pd

    if latest_reward_model_version(ctx) is None:
        return None
    _, model = load_reward_model_version(ctx)
    rows = complete_live_episodes(frame)
    q = np.zeros((len(frame), pack.scenario.n_actions))
    rewards = pd.to_numeric(rows["reward_total"], errors="coerce").to_numpy(np.float64)
    q[frame.index.get_indexer(rows.index)] = reward_model_q(pack, model, rows, rewards)
    return q


def _with_reward_model(
    ctx: StepServices, pack: Pack, frame: pd.DataFrame, target: TargetProbs, cfg: OPEConfig
) -> OPEResult | None:
    """DR with the newest reward model as the direct method (None when none is registered)."""
    q_rows = reward_model_rows(ctx, pack, frame)
    return None if q_rows is None else off_policy_value(pack, frame, target, cfg, q_rows)
