"""The off-policy gate: a candidate judged on logged live traffic before it serves any of it.

:func:`off_policy_value` is the pure core (trace rows + the candidate's probabilities + a direct
method → PDIS, WIS and DR with intervals, the logged policy's own live return, the effective
sample size and the agreement with the served decisions); :func:`ope_gates` is what
``evaluate_candidate`` calls: it reads the last ``ope.window_hours`` of live traces, fits the
direct method in the calibrated sandbox, and returns the gate row, the MLflow metrics and a note;
:func:`ope_run_fields` gives the params (interval kind and level, direct method, …) and the tags
(``rlops.ope.state``, ``rlops.ope.reason``) the evaluation run records beside those metrics.

Gate ``ope:dr`` (states ``pass | fail | skipped``; ``skipped`` here always means *insufficient
evidence*, which holds the candidate at the canary stage — :mod:`rlops.pipeline_steps.promotion.evidence`):

* insufficient — fewer than ``ope.min_episodes`` complete live episodes in the window, rows
  without a usable propensity or a finite ``reward_total`` (an agent that reports no reward has
  nothing to judge with), more than ``ope.max_unsupported`` of the episodes with a decision served
  with certainty where the candidate would act otherwise, weights that carry no information (an
  effective sample size under ``ope.min_ess``, the ten largest-weighted episodes holding more
  than ``ope.max_weight_share`` of the weight mass, a mean weight outside ``1 ± ope.mean_weight_band``
  beyond its sampling error), estimates that are not finite, or DR's interval straddling the
  logged value less the margin (neither shown non-inferior nor shown worse); the reason is in the row.
* ``fail`` — DR's upper bound is below the logged value minus the margin ``ope.tolerance`` × the
  logged value's scale (:func:`value_scale`): on real traffic the candidate is confidently worse
  than what serves now.
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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.common.params_operations import ExplorationParams
from rlops.pipeline_steps.promotion.gates import Gate, return_scale
from rlops.pipeline_steps.promotion.ope import (
    TOP_EPISODES,
    Estimate,
    OPEConfig,
    WeightDiagnostics,
    effective_sample_size,
    estimate_all,
    logged_propensities,
    target_probabilities,
    to_episodes,
    weight_diagnostics,
)
from rlops.pipeline_steps.promotion.ope_direct import LinearQ, TargetProbs, reward_model_q, sandbox_q
from rlops.pipeline_steps.training.log_split import HoldOut
from rlops.pipeline_steps.training.relabel import latest_reward_model_version, load_reward_model_version
from rlops.registry import tags as T
from rlops.trace_store.states import action_codes, observations_from_traces, state_features

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import Pack


@dataclass
class OPEResult:
    """What the logged traffic says about one candidate."""

    episodes: int = 0
    estimates: dict[str, Estimate] = field(default_factory=dict)
    logged_return: float = float("nan")
    logged_return_se: float = float("nan")
    ess: float = 0.0
    agreement: float = float("nan")
    skipped: str | None = None
    """Why the evidence is insufficient (None: it decides)."""
    weights: WeightDiagnostics | None = None
    unsupported_share: float = float("nan")
    """Share of episodes with a decision served with certainty where the candidate acts otherwise."""
    logged_return_sd: float = float("nan")
    """Standard deviation of the logged per-episode returns."""
    margin: float = float("nan")
    """``ope.tolerance × scale`` (:func:`value_scale`): how much worse than what serves a candidate may be."""

    def metrics(self, prefix: str = "ope_") -> dict[str, float]:
        out = {
            f"{prefix}episodes": float(self.episodes),
            f"{prefix}ess": self.ess,
            f"{prefix}logged_return": self.logged_return,
            f"{prefix}agreement": self.agreement,
            f"{prefix}unsupported_share": self.unsupported_share,
            f"{prefix}margin": self.margin,
        }
        if self.weights is not None:
            out.update(
                {
                    f"{prefix}max_weight": self.weights.max,
                    f"{prefix}mean_weight": self.weights.mean,
                    f"{prefix}top_weight_share": self.weights.top_share,
                }
            )
        for name, e in self.estimates.items():
            out.update({f"{prefix}{name}": e.value, f"{prefix}{name}_low": e.low, f"{prefix}{name}_high": e.high})
        return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}

    def as_dict(self) -> dict[str, Any]:
        """Every estimator with its interval, the weights' diagnostics and the verdict's reason (JSON)."""

        def num(x: float) -> float | None:
            return round(float(x), 6) if x is not None and math.isfinite(x) else None

        return {
            "episodes": self.episodes,
            "logged_return": num(self.logged_return),
            "logged_return_se": num(self.logged_return_se),
            "estimates": {name: e.to_dict() for name, e in self.estimates.items()},
            "ess": num(self.ess),
            "weights": self.weights.to_dict() if self.weights is not None else None,
            "unsupported_share": num(self.unsupported_share),
            "agreement": num(self.agreement),
            "margin": num(self.margin),
            "insufficient": self.skipped,
        }


def network_target(
    net: PolicyNetwork, greedy: bool, exploration: float = 0.0, distribution: str = "uniform"
) -> TargetProbs:
    """A policy network as OPE's target: greedy (its served argmax, plus the ``exploration`` it
    serves with) or its softmax."""
    import torch

    def probs(obs: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            logp, _ = net.forward(obs.float(), mask.bool())
        return target_probabilities(logp.double().numpy(), mask.numpy().astype(bool), greedy, exploration, distribution)

    return probs


def serving_target(net: PolicyNetwork, cfg: OPEConfig, exploration: ExplorationParams) -> TargetProbs:
    """The candidate as ``ope.target`` says it will serve: ``serving`` (greedy plus the
    ``exploration:`` share and distribution), ``greedy`` or ``stochastic``."""
    if cfg.target == "stochastic":
        return network_target(net, greedy=False)
    share = exploration.share if cfg.target == "serving" else 0.0
    return network_target(net, True, share, exploration.distribution)


def complete_live_episodes(frame: pd.DataFrame) -> pd.DataFrame:
    """Live rows of episodes that start at step 0 and end (``done``) inside the frame."""
    if frame.empty:
        return frame
    if "source" in frame:
        frame = frame[frame["source"].fillna("live").astype(str).eq("live")]
    steps = frame.groupby("episode_id")["step"].agg(["min", "count", "max"])
    # one cast of the column, then a grouped any (a Python function per episode took seconds per 10^4)
    done = frame["done"].astype("boolean").fillna(False).astype(bool).groupby(frame["episode_id"]).any()
    ok = steps.index[(steps["min"] == 0) & (steps["max"] == steps["count"] - 1) & done.reindex(steps.index)]
    return frame[frame["episode_id"].isin(ok)].sort_values(["episode_id", "step"], kind="stable")


def traffic_problem(rows: pd.DataFrame, cfg: OPEConfig) -> str | None:
    """Why the complete live episodes ``rows`` cannot judge a candidate (None: they can)."""
    import pandas as pd

    episodes = int(rows["episode_id"].nunique()) if len(rows) else 0
    if episodes < cfg.min_episodes:
        return f"{episodes} complete live episodes in the window (ope.min_episodes {cfg.min_episodes})"
    mu = logged_propensities(rows)
    if not np.isfinite(mu).all():
        bad = int((~np.isfinite(mu)).sum())
        return f"{bad} of {len(rows)} logged rows carry no usable propensity (propensity or logp)"
    reward = pd.to_numeric(rows["reward_total"], errors="coerce").to_numpy(dtype=np.float64)
    if not np.isfinite(reward).all():
        bad = int((~np.isfinite(reward)).sum())
        return f"{bad} of {len(rows)} logged rows carry no finite reward_total"
    return None


def value_scale(logged: float, logged_sd: float, cfg: OPEConfig) -> float:
    """The logged return's scale every off-policy margin is a share of (:func:`return_scale` with
    ``ope.scale_floor``)."""
    return return_scale(logged, logged_sd, cfg.scale_floor)


def logged_value(rows: pd.DataFrame) -> tuple[float, float]:
    """The mean return of the complete live episodes ``rows`` and its standard error (NaN when
    there are none, or a row has no finite reward: nothing was measured)."""
    import pandas as pd

    if rows.empty or "reward_total" not in rows:
        return float("nan"), float("nan")
    reward = pd.to_numeric(rows["reward_total"], errors="coerce")
    if not np.isfinite(reward.to_numpy(dtype=np.float64)).all():
        return float("nan"), float("nan")
    returns = reward.groupby(rows["episode_id"].to_numpy()).sum().to_numpy(dtype=np.float64)
    se = float(returns.std(ddof=1) / math.sqrt(len(returns))) if len(returns) > 1 else float("nan")
    return float(returns.mean()), se


def unusable_estimates(res: OPEResult) -> str | None:
    """Why the estimates cannot decide (a value or interval bound that is not a finite number:
    importance weights or returns beyond float range), else None. An infinite upper bound would
    pass any candidate."""
    bad = [
        f"{name} {e.value:g} [{e.low:g}, {e.high:g}]"
        for name, e in res.estimates.items()
        if not all(math.isfinite(x) for x in (e.value, e.low, e.high))
    ]
    if not math.isfinite(res.logged_return):
        bad.append(f"logged return {res.logged_return:g}")
    if not bad:
        return None
    return (
        f"the estimates are not finite ({'; '.join(bad)}): importance weights or rewards of the logged "
        "traffic are beyond what can be summed"
    )


def off_policy_value(
    pack: Pack, frame: pd.DataFrame, target: TargetProbs, cfg: OPEConfig, q: LinearQ | np.ndarray | None = None
) -> OPEResult:
    """PDIS, WIS and DR of ``target`` on the complete live episodes of ``frame``; ``q`` is the
    direct method (a fitted :class:`LinearQ`, or ``Q̂[N, A]`` for the rows of ``frame`` as given)."""
    import pandas as pd

    q_rows = None
    if isinstance(q, np.ndarray):
        q_rows = q
        q = None
    rows = complete_live_episodes(frame)
    if q_rows is not None:
        q_rows = q_rows[frame.index.get_indexer(rows.index)]
    res = OPEResult(episodes=int(rows["episode_id"].nunique()) if len(rows) else 0)
    res.logged_return, res.logged_return_se = logged_value(rows)
    res.logged_return_sd = res.logged_return_se * math.sqrt(max(res.episodes, 1))
    res.skipped = traffic_problem(rows, cfg)
    if res.skipped:
        return res
    mu = logged_propensities(rows)
    obs, mask = observations_from_traces(pack, rows)
    pi = target(obs, mask)
    a = action_codes(pack, rows["action"])
    idx = np.arange(len(rows))
    with np.errstate(over="ignore", divide="ignore"):  # a propensity of 1e-320 gives weights past float range
        rho = pi[idx, a] / mu
    reward = pd.to_numeric(rows["reward_total"], errors="coerce").to_numpy(dtype=np.float64)
    if q is not None:
        q_rows = q.predict(state_features(pack, rows).numpy())
    q_taken = v_hat = None
    if q_rows is not None:
        q_rows = np.where(mask.numpy(), q_rows, 0.0)
        q_taken, v_hat = q_rows[idx, a], (pi * q_rows).sum(axis=1)
    ep = to_episodes(rows["episode_id"].astype(str).to_numpy(), rows["step"].to_numpy(), rho, reward, q_taken, v_hat)
    with np.errstate(over="ignore", invalid="ignore"):  # weights or rewards past float range: judged below
        res.ess = effective_sample_size(ep.rho)
        res.weights = weight_diagnostics(ep.rho)
        returns = ep.reward.sum(axis=1)
        res.logged_return = float(returns.mean())
        res.logged_return_sd = float(returns.std(ddof=1))
        res.logged_return_se = res.logged_return_sd / math.sqrt(len(returns))
    res.margin = cfg.tolerance * value_scale(res.logged_return, res.logged_return_sd, cfg)
    choice = mask.numpy().sum(axis=1) > 1  # rows with a real decision
    res.agreement = float((pi[idx, a][choice] > 0.5).mean()) if choice.any() else 1.0
    episode_ids = rows["episode_id"].astype(str).to_numpy()
    acts_otherwise = pi.argmax(axis=1) != a
    res.unsupported_share, res.skipped = unsupported_decisions(episode_ids, mu, acts_otherwise, choice, cfg)
    if res.skipped:
        return res
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # judged below: unusable_estimates
        res.estimates = estimate_all(ep, cfg)
    res.skipped = unusable_estimates(res) or uninformative_weights(res, cfg) or undecided(res, cfg)
    return res


def unsupported_decisions(
    episode: np.ndarray, mu: np.ndarray, acts_otherwise: np.ndarray, choice: np.ndarray, cfg: OPEConfig
) -> tuple[float, str | None]:
    """The share of episodes holding a decision the served policy made with near certainty where
    the candidate would act otherwise, and why that makes the logged traffic unable to judge it
    (None: it does not). A row served with propensity above ``1 − ope.min_support`` left every
    other action less than ``ope.min_support`` of a chance: the candidate's choice there was
    (almost) never tried, its importance weight is (almost) 0 whatever that action earns, and what
    the estimate says of it comes from the direct method alone — the sandbox, exactly where it may
    be wrong — or, without one, leans toward what serves now."""
    blind = choice & (mu > 1.0 - cfg.min_support) & acts_otherwise
    episodes = len(np.unique(episode))
    unsupported = len(np.unique(episode[blind]))
    share = unsupported / episodes if episodes else 0.0
    if not episodes or unsupported <= cfg.max_unsupported * episodes:
        return share, None
    return share, (
        f"{unsupported} of {episodes} live episodes ({share:.0%}; ope.max_unsupported "
        f"{cfg.max_unsupported:.0%}) hold a decision the served policy made with near certainty (less than "
        f"ope.min_support {cfg.min_support:g} left for any other action) where the candidate would act otherwise: "
        "its choices there were never tried, so the estimate would rest on the direct method's guess; uniform "
        "exploration (params exploration.distribution: uniform, PolicyClient(exploration_distribution=…)) "
        "makes such a candidate judgeable"
    )


def uninformative_weights(res: OPEResult, cfg: OPEConfig) -> str | None:
    """Why the importance weights carry too little information to judge by, or None: too small an
    effective sample size, the mass resting on a handful of episodes, or a mean weight (1 with
    the true propensities, for any target) further from 1 than the band and its own sampling error."""
    w = res.weights
    if not res.ess >= cfg.min_ess or w is None:  # also for an ESS that is NaN
        return (
            f"effective sample size {res.ess:.0f} of {res.episodes} episodes (ope.min_ess {cfg.min_ess:g}):"
            " the candidate decides too differently from what was served"
        )
    # The sampling error widens the band, but at most threefold: weights so heavy-tailed that their
    # mean cannot be told from 1 carry no information either.
    se = min(w.mean_se, cfg.mean_weight_band) if math.isfinite(w.mean_se) else cfg.mean_weight_band
    if not abs(w.mean - 1.0) <= cfg.mean_weight_band + 2.0 * se:
        return (
            f"the mean importance weight over {res.episodes} episodes is {w.mean:.3g} (1 ± {cfg.mean_weight_band:g} "
            "with the true propensities, beyond its sampling error): the logged propensities do not describe what "
            "was served, or the weights carry no information"
        )
    if not w.top_share <= cfg.max_weight_share:
        return (
            f"the {TOP_EPISODES} largest-weighted episodes carry {w.top_share:.0%} of the importance-weight mass "
            f"(ope.max_weight_share {cfg.max_weight_share:.0%}; largest weight {w.max:.3g}): the estimate rests on a "
            "handful of rows"
        )
    return None


def undecided(res: OPEResult, cfg: OPEConfig) -> str | None:
    """Why DR's interval decides nothing, or None. The gate passes a candidate shown non-inferior
    (DR's lower bound at or above the logged value less the margin) and fails one shown worse
    (its upper bound below that); an interval that straddles the line shows neither — its pass
    would mean only that the traffic was too thin to refuse anything."""
    dr = res.estimates["dr"]
    line = res.logged_return - res.margin
    if dr.low >= line or dr.high < line:
        return None
    return (
        f"DR {dr.value:.4g} [{dr.low:.4g}, {dr.high:.4g}] straddles the logged value less the margin, "
        f"{res.logged_return:.4g} − {res.margin:.3g} (ope.tolerance {cfg.tolerance:g} of the logged scale): neither "
        f"non-inferior nor worse on this traffic; about {needed_episodes(res):,} logged episodes would decide"
    )


def needed_episodes(res: OPEResult) -> int:
    """Logged episodes at which DR's interval (width ∝ 1/√n) would clear the line it straddles."""
    dr = res.estimates["dr"]
    half = (dr.high - dr.low) / 2.0
    distance = abs(dr.value - (res.logged_return - res.margin))
    if not (distance > 0 and math.isfinite(half)):
        return 0
    return int(math.ceil(res.episodes * (half / distance) ** 2))


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
    ctx: StepContext,
    pack: Pack,
    candidate: PolicyNetwork,
    sandbox_value: float | None,
    reward_label: str | None,
    profile: str | None,
    holdout: HoldOut | None = None,
) -> OffPolicyEvidence:
    """The ``ope:dr`` and ``ope:sandbox_gap`` gates of ``candidate`` as it will serve, on the live
    traffic of the window, with their MLflow metrics (``ope_*``) and a note for the report. A
    candidate learnt from logs (``holdout``: the split recorded on its version) is judged on the
    window's held-out episodes only: on the episodes it was trained on, its estimate would be
    optimistic by as much as it fitted their noise."""
    cfg = ctx.config.ope
    if not cfg.enabled:
        return OffPolicyEvidence([], {}, "off-policy evaluation: off (ope.enabled): at most the canary stage", None)
    frame = ctx.traces.read(ctx.scenario, ctx.key.lookback(cfg.window_hours))
    if holdout is not None and len(frame):
        frame = frame[np.asarray(holdout.held_out(frame["episode_id"]), dtype=bool)]
    target = serving_target(candidate, cfg, ctx.config.exploration)
    frame = frame.reset_index(drop=True)
    q: Any = None
    if cfg.direct_method == "sandbox" and traffic_problem(complete_live_episodes(frame), cfg) is None:
        q = sandbox_direct(pack, target, cfg, profile, reward_label)
    res = off_policy_value(pack, frame, target, cfg, q)
    if cfg.direct_method == "reward_model" and not res.skipped:
        res = _with_reward_model(ctx, pack, frame, target, cfg) or res
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


def reward_model_rows(ctx: StepContext, pack: Pack, frame: pd.DataFrame) -> np.ndarray | None:
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
    ctx: StepContext, pack: Pack, frame: pd.DataFrame, target: TargetProbs, cfg: OPEConfig
) -> OPEResult | None:
    """DR with the newest reward model as the direct method (None when none is registered)."""
    q_rows = reward_model_rows(ctx, pack, frame)
    return None if q_rows is None else off_policy_value(pack, frame, target, cfg, q_rows)
