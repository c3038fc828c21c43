"""The off-policy gate: a candidate judged on logged live traffic before it serves any of it.

:func:`off_policy_value` is the pure core (trace rows + the candidate's probabilities + a direct
method → PDIS, WIS and DR with intervals, the logged policy's own live return, the effective
sample size and the agreement with the served decisions); :func:`ope_gates` is what
``evaluate_candidate`` calls: it reads the last ``ope.window_hours`` of live traces, fits the
direct method in the calibrated sandbox, and returns the gate row, the MLflow metrics and a note;
:func:`ope_run_fields` gives the params (interval kind and level, direct method, …) and the tags
(``rlops.ope.state``, ``rlops.ope.reason``) the evaluation run records beside those metrics.

Gate ``ope:dr`` (states ``pass | fail | skipped``):

* ``skipped`` — fewer than ``ope.min_episodes`` complete live episodes in the window, rows without
  a usable propensity (no ``propensity``/``logp``), or an effective sample size under
  ``ope.min_ess`` (the candidate decides too differently from what was served for the logged
  traffic to say anything), more than ``ope.max_unsupported`` of the episodes with a decision the
  served policy made with certainty where the candidate would act otherwise (an agent that does not
  explore logs propensity 1: the candidate's choice there was never possible, so its weight is 0
  whatever the choice earns, and every estimate leans toward what serves now), rewards that are
  not finite, estimates that are not finite numbers, or a mean importance weight far from 1 (the
  logged propensities are not the serving policy's);
  the reason is in the row.
* ``fail`` — the upper bound of DR's interval is below the logged policy's live return minus
  ``ope.tolerance``: on real traffic the candidate is confidently worse than what serves now.
* ``pass`` — otherwise.

A sandbox estimate of the candidate further than ``ope.gap_threshold`` from DR, and outside DR's
interval, is reported as a *sim-to-real gap* (``ope_sim_to_real_gap`` metric and a note): the
sandbox no longer predicts what live traffic earns — the outcome dynamics moved, or the reward the
business scores with did.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.pipeline_steps.promotion.gates import Gate
from rlops.pipeline_steps.promotion.ope import (
    Episodes,
    Estimate,
    OPEConfig,
    cumulative_weights,
    effective_sample_size,
    estimate_all,
    logged_propensities,
    target_probabilities,
    to_episodes,
)
from rlops.pipeline_steps.promotion.ope_direct import LinearQ, TargetProbs, reward_model_q, sandbox_q
from rlops.pipeline_steps.training.relabel import latest_reward_model_version, load_reward_model_version
from rlops.registry import tags as T
from rlops.trace_store.states import action_codes, observations_from_traces, state_features

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from rlops.model.policy import PolicyNetwork
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.gates import Gate
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

    def metrics(self, prefix: str = "ope_") -> dict[str, float]:
        out = {
            f"{prefix}episodes": float(self.episodes),
            f"{prefix}ess": self.ess,
            f"{prefix}logged_return": self.logged_return,
            f"{prefix}agreement": self.agreement,
        }
        for name, e in self.estimates.items():
            out.update({f"{prefix}{name}": e.value, f"{prefix}{name}_low": e.low, f"{prefix}{name}_high": e.high})
        return {k: float(v) for k, v in out.items() if v is not None and math.isfinite(v)}


def network_target(net: PolicyNetwork, greedy: bool) -> TargetProbs:
    """A policy network as OPE's target: greedy (its served argmax) or its softmax."""
    import torch

    def probs(obs: torch.Tensor, mask: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            logp, _ = net.forward(obs.float(), mask.bool())
        return target_probabilities(logp.double().numpy(), mask.numpy().astype(bool), greedy)

    return probs


def complete_live_episodes(frame: pd.DataFrame) -> pd.DataFrame:
    """Live rows of episodes that start at step 0 and end (``done``) inside the frame."""
    if frame.empty:
        return frame
    if "source" in frame:
        frame = frame[frame["source"].fillna("live").astype(str).eq("live")]
    steps = frame.groupby("episode_id")["step"].agg(["min", "count", "max"])
    done = frame.groupby("episode_id")["done"].agg(lambda d: bool(d.fillna(False).astype(bool).any()))
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
        returns = ep.reward.sum(axis=1)
        res.logged_return = float(returns.mean())
        res.logged_return_se = float(returns.std(ddof=1) / math.sqrt(len(returns)))
    choice = mask.numpy().sum(axis=1) > 1  # rows with a real decision
    res.agreement = float((pi[idx, a][choice] > 0.5).mean()) if choice.any() else 1.0
    res.skipped = unsupported_decisions(rows["episode_id"].astype(str).to_numpy(), mu, pi[idx, a], choice, cfg)
    if res.skipped:
        return res
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):  # judged below: unusable_estimates
        res.estimates = estimate_all(ep, cfg)
    res.skipped = unusable_estimates(res)
    if res.skipped:
        return res
    if not res.ess >= cfg.min_ess:  # also for an ESS that is NaN
        res.skipped = (
            f"effective sample size {res.ess:.0f} of {res.episodes} episodes (ope.min_ess {cfg.min_ess:g}):"
            " the candidate decides too differently from what was served"
        )
        return res
    res.skipped = propensity_mismatch(ep)
    return res


def unsupported_decisions(
    episode: np.ndarray, mu: np.ndarray, pi_taken: np.ndarray, choice: np.ndarray, cfg: OPEConfig
) -> str | None:
    """Why the logged traffic cannot judge a candidate that acts where the served policy never
    explored, or None. A row served with propensity 1 gave every other action no chance; where the
    candidate prefers another action there (``pi_taken`` < 1), its episode's importance weight is
    0 whatever that action would earn, so PDIS, WIS and DR all lean toward what serves now — a
    better candidate would fail the gate for the agent's lack of exploration, not its own worth."""
    blind = choice & (mu >= 1.0 - 1e-6) & (pi_taken < 1.0 - 1e-6)
    episodes = len(np.unique(episode))
    unsupported = len(np.unique(episode[blind]))
    if not episodes or unsupported <= cfg.max_unsupported * episodes:
        return None
    return (
        f"{unsupported} of {episodes} live episodes ({unsupported / episodes:.0%}; ope.max_unsupported "
        f"{cfg.max_unsupported:.0%}) hold a decision served with propensity 1 (the served policy did not explore "
        "there) where the candidate would act otherwise: importance weights count those episodes as worth 0, "
        "so the estimate would lean toward what serves now; agents that explore (PolicyClient(exploration=0.05)) "
        "make such a candidate judgeable"
    )


#: How far the mean importance weight may stray from 1 before the logged propensities are taken to
#: describe another policy than the one that served.
MEAN_WEIGHT_BAND = 10.0


def propensity_mismatch(ep: Episodes) -> str | None:
    """Why the logged propensities cannot be the serving policy's, or None. With the true
    propensities every episode's importance weight has expectation 1 (for any target), so a mean
    weight outside [1/10, 10] over episodes that carry weight (the effective sample size passed)
    says the log's probabilities are wrong — e.g. 1e-12 on every row, which makes any candidate's
    estimate as large as the weights and would pass the gate."""
    w = cumulative_weights(ep.rho)[:, -1] if ep.rho.size else np.zeros(0)
    mean = float(w.mean()) if len(w) else 1.0
    if 1.0 / MEAN_WEIGHT_BAND <= mean <= MEAN_WEIGHT_BAND:
        return None
    return (
        f"the mean importance weight over {len(w)} episodes is {mean:.3g} (about 1 when the logged propensities "
        "are the serving policy's): the logged propensities do not describe what was served"
    )


def sim_to_real_gap(res: OPEResult, sandbox_value: float | None, cfg: OPEConfig) -> float | None:
    """``sandbox − DR`` when it exceeds ``gap_threshold`` and lies outside DR's interval, else None."""
    dr = res.estimates.get("dr")
    if dr is None or sandbox_value is None or not math.isfinite(sandbox_value) or res.skipped:
        return None
    gap = sandbox_value - dr.value
    return gap if abs(gap) > cfg.gap_threshold and not dr.covers(sandbox_value) else None


def ope_gate_row(res: OPEResult, cfg: OPEConfig) -> Gate:

    threshold = f"DR {cfg.confidence:.0%} upper ≥ logged − {cfg.tolerance:g}"
    if res.skipped:
        return Gate(
            "ope:dr",
            None,
            None if math.isnan(res.logged_return) else res.logged_return,
            threshold,
            True,
            f"skipped: {res.skipped}",
            skipped=True,
        )
    dr, pdis, wis = res.estimates["dr"], res.estimates["pdis"], res.estimates["wis"]
    passed = dr.high >= res.logged_return - cfg.tolerance
    detail = (
        f"DR {dr.value:.3f} [{dr.low:.3f}, {dr.high:.3f}] ({dr.ci}); PDIS {pdis.value:.3f} "
        f"[{pdis.low:.3f}, {pdis.high:.3f}]; WIS {wis.value:.3f} [{wis.low:.3f}, {wis.high:.3f}]; "
        f"{res.episodes} live episodes, ESS {res.ess:.0f}, agreement {res.agreement:.0%}"
    )
    return Gate("ope:dr", dr.value, res.logged_return, threshold, bool(passed), detail)


def ope_gates(
    ctx: StepContext,
    pack: Pack,
    candidate: PolicyNetwork,
    sandbox_value: float | None,
    reward_label: str | None,
    profile: str | None,
) -> tuple[list[Gate], dict[str, float], str]:
    """The ``ope:dr`` gate of ``candidate`` on the live traffic of the window, its MLflow metrics
    (``ope_*``) and a note for the report (the sim-to-real gap when there is one)."""
    cfg = ctx.config.ope
    if not cfg.enabled:
        return [], {}, "off-policy evaluation: off (ope.enabled)"
    frame = ctx.traces.read(ctx.scenario, ctx.key.lookback(cfg.window_hours))
    target = network_target(candidate, cfg.target == "greedy")
    frame = frame.reset_index(drop=True)
    q: Any = None
    if cfg.direct_method == "sandbox" and traffic_problem(complete_live_episodes(frame), cfg) is None:
        q = _sandbox_direct(pack, target, cfg, profile, reward_label)
    res = off_policy_value(pack, frame, target, cfg, q)
    if cfg.direct_method == "reward_model" and not res.skipped:
        res = _with_reward_model(ctx, pack, frame, target, cfg) or res
    metrics = ope_metrics(res, sandbox_value, cfg)
    gap = metrics.get("ope_sim_to_real_gap")
    note = "off-policy: " + (res.skipped or f"DR {res.estimates['dr'].value:.3f} on {res.episodes} live episodes")
    if gap is not None:
        note += (
            f"; SIM-TO-REAL GAP: the sandbox estimates {sandbox_value:.3f}, live traffic (DR) "
            f"{res.estimates['dr'].value:.3f}"
        )
    return [ope_gate_row(res, cfg)], metrics, note


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
    }
    tags: dict[str, str] = {T.OPE_STATE: str(row.status)}
    if row.skipped:
        tags[T.OPE_REASON] = row.detail.removeprefix("skipped: ")[:5000]  # MLflow caps tag values
    return params, tags


def _sandbox_direct(
    pack: Pack, target: TargetProbs, cfg: OPEConfig, profile: str | None, reward_label: str | None
) -> LinearQ:

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


def _with_reward_model(
    ctx: StepContext, pack: Pack, frame: pd.DataFrame, target: TargetProbs, cfg: OPEConfig
) -> OPEResult | None:
    """DR with the newest reward model as the direct method (None when none is registered)."""
    if latest_reward_model_version(ctx) is None:
        return None
    _, model = load_reward_model_version(ctx)
    rows = complete_live_episodes(frame)
    q_rows = np.zeros((len(frame), pack.scenario.n_actions))
    q_rows[frame.index.get_indexer(rows.index)] = reward_model_q(
        pack, model, rows, rows["reward_total"].to_numpy(np.float64)
    )
    return off_policy_value(pack, frame, target, cfg, q_rows)
