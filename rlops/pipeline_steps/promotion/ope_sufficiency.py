"""Why logged traffic cannot judge a target: the *insufficient evidence* of the off-policy gate
(``ope:dr`` skipped, which holds a candidate at the canary stage:
:mod:`rlops.pipeline_steps.promotion.ope_gate`).

Each check gives None where the evidence can decide, else the reason the gate row shows, in the
order :func:`~rlops.pipeline_steps.promotion.ope_value.off_policy_value` asks them: too few complete
live episodes, or rows without a usable propensity or a finite reward (:func:`traffic_problem`);
decisions served with near certainty where the target acts otherwise
(:func:`unsupported_decisions`); estimates that are not finite (:func:`unusable_estimates`);
importance weights that carry no information (:func:`uninformative_weights`); DR's interval
straddling the line it is judged against (:func:`undecided`, with :func:`needed_episodes`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from rlops.pipeline_steps.promotion.ope import TOP_EPISODES, OPEConfig, logged_propensities

if TYPE_CHECKING:
    import pandas as pd

    from rlops.pipeline_steps.promotion.ope_value import OPEResult


def censored_problem(final: int, censored: int, cfg: OPEConfig) -> str | None:
    """Why the window cannot judge while ``censored`` of its complete live episodes await their late
    outcome (None: few enough, left out): leaving many out would judge on the episodes whose
    outcome needs no wait, a biased share of the traffic (a loan declined, not one approved)."""
    total = final + censored
    if censored and censored > cfg.max_censored * total:
        return (
            f"{censored} of {total} complete live episodes still await their outcome (outcomes.max_delay_days): "
            f"more than ope.max_censored {cfg.max_censored:g} of the window; their returns are not final"
        )
    return None


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
