"""The off-policy value of a target on logged live traffic: the pure core of the off-policy gate
(:mod:`rlops.pipeline_steps.promotion.ope_gate`) and of ``rlops model evaluate --target``
(:mod:`rlops.pipeline_steps.promotion.ope_targets`).

:func:`off_policy_value` takes trace rows, the target's probabilities (:func:`serving_target`: a
candidate as it will serve) and a direct method, and gives PDIS, WIS and DR with their intervals
(:mod:`rlops.pipeline_steps.promotion.ope`), the logged policy's own live return, the effective
sample size and the agreement with the served decisions: an :class:`OPEResult`, whose ``skipped``
says why the evidence cannot decide (:mod:`rlops.pipeline_steps.promotion.ope_sufficiency`).

Every margin is a share of the logged value's scale (:func:`value_scale`: ``|value|``, at least
``ope.scale_floor`` of the per-episode return's standard deviation), so the same defaults judge a
click rate of 0.005 and a credit return of 0.5.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.common.params_operations import ExplorationParams
from rlops.pipeline_steps.promotion.gate_stats import return_scale
from rlops.pipeline_steps.promotion.ope import (
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
from rlops.pipeline_steps.promotion.ope_direct import LinearQ, TargetProbs
from rlops.pipeline_steps.promotion.ope_sufficiency import (
    censored_problem,
    traffic_problem,
    undecided,
    uninformative_weights,
    unsupported_decisions,
    unusable_estimates,
)
from rlops.trace_store.states import action_codes, observations_from_traces, state_features

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from rlops.model.policy import PolicyNetwork
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
    censored: int = 0
    """Complete live episodes left out because they still await a late outcome (their return is not final)."""

    def metrics(self, prefix: str = "ope_") -> dict[str, float]:
        out = {
            f"{prefix}episodes": float(self.episodes),
            f"{prefix}ess": self.ess,
            f"{prefix}logged_return": self.logged_return,
            f"{prefix}agreement": self.agreement,
            f"{prefix}unsupported_share": self.unsupported_share,
            f"{prefix}margin": self.margin,
            f"{prefix}censored_episodes": float(self.censored),
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
            "censored_episodes": self.censored,
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
    """Live rows of episodes that start at step 0, end (``done``) inside the frame and whose return
    is final (see :func:`judged_episodes`)."""
    return judged_episodes(frame)[0]


def judged_episodes(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """The rows of :func:`complete_live_episodes`, and how many complete live episodes it leaves out
    because they still await a late outcome (``outcome_status`` ``censored``, see
    :mod:`rlops.trace_store.outcome_join`): their return is not final."""
    complete = _complete(frame)
    if complete.empty or "outcome_status" not in complete.columns:
        return complete, 0
    waiting = complete["outcome_status"].astype(str).eq("censored")
    return complete[~waiting], int(complete.loc[waiting, "episode_id"].nunique())


def _complete(frame: pd.DataFrame) -> pd.DataFrame:
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
    rows, censored = judged_episodes(frame)
    if q_rows is not None:
        q_rows = q_rows[frame.index.get_indexer(rows.index)]
    res = OPEResult(episodes=int(rows["episode_id"].nunique()) if len(rows) else 0, censored=censored)
    res.logged_return, res.logged_return_se = logged_value(rows)
    res.logged_return_sd = res.logged_return_se * math.sqrt(max(res.episodes, 1))
    res.skipped = censored_problem(res.episodes, res.censored, cfg) or traffic_problem(rows, cfg)
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
