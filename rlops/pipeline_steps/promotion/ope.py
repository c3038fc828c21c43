"""Off-policy evaluation: what a candidate policy would earn on logged live traffic it never served.

Each logged episode ``i`` is a sequence of steps ``t`` with the served action ``a_t``, its reward
``r_t`` and the probability ``μ(a_t|s_t)`` with which the serving policy chose it (the
*propensity*, recorded on the trace row). The candidate ``π`` gives its own probability of the same
action, and the per-decision importance ratio is ``ρ_t = π(a_t|s_t) / μ(a_t|s_t)``, with the
cumulative weight ``w_t = ρ_0 ⋯ ρ_t`` (``w_{-1} = 1``). Finite horizon, undiscounted (γ = 1, as the
promotion gates score returns). Estimators (Precup et al. 2000; Jiang & Li 2016; Thomas & Brunskill
2016):

* **PDIS** — per-decision importance sampling: ``V_i = Σ_t w_t r_t``; the estimate is the mean
  over episodes. Unbiased when the propensities are right and ``μ > 0`` wherever ``π > 0``.
* **WIS** — per-decision weighted IS: ``Σ_t Σ_i w_{t,i} r_{t,i} / Σ_i w_{t,i}``. Biased but
  consistent, far lower variance when weights are uneven.
* **DR** — doubly robust with a direct method ``Q̂(s, a)``:
  ``V_i = Σ_t [w_t (r_t − Q̂(s_t, a_t)) + w_{t−1} V̂(s_t)]``, ``V̂(s) = Σ_a π(a|s) Q̂(s, a)``. Unbiased
  whatever ``Q̂`` is (given right propensities); a good ``Q̂`` only lowers its variance. The direct
  methods (the calibrated sandbox, or the reward model) are in
  :mod:`rlops.pipeline_steps.promotion.ope_direct`.
* **SNDR** — self-normalised DR: DR with each step's weights divided by their mean over episodes
  (``w_t / w̄_t``), as WIS is to PDIS: a little bias for much less variance when a few large weights
  would otherwise carry the estimate (Kallus & Uehara 2019).
* **Switch DR** — DR whose terms stop where an episode's cumulative weight first exceeds
  ``ope.switch_tau``: from there on the direct method's ``V̂`` stands for the rest of the episode
  (Wang, Agarwal & Dudík 2017). Bounded weights: biased as far as ``Q̂`` is wrong there.

Confidence intervals: PDIS and DR are means of independent per-episode values, so their interval is
the normal one, ``mean ± z·sd/√n`` (``ci: normal``, the default) or a percentile bootstrap over
episodes (``ci: bootstrap``); WIS is a ratio, its interval is always the percentile bootstrap over
episodes.

Calibration (``bench/ope.py``, credit pack, 4,000 logged episodes per candidate, 104 candidates):
the normal interval's width is right. The standardised errors ``(DR − truth)/se`` spread with a
standard deviation of 0.98 (1.0 for a calibrated interval); a bootstrap over episodes covers no more
(90 % against the normal interval's 91 %: at 4,000 episodes the mean of the skewed per-episode
values — skewness 2.4 — is near normal, and the percentile bootstrap is narrower in small samples).
What the earlier count of 21/24 saw was the yardstick: every candidate was scored against one truth
sample (the same 20,000 production episodes for near copies of one policy), so the truths erred
together — the errors' mean was +0.43 se for DR and +0.39 for PDIS, which has no direct method, and
the two estimators' errors correlate at 0.88 — and that shared truth's own standard error (~0.3 se)
was not counted. Widening the interval to absorb it would make the gate's ``fail`` (an upper
bound below the live return) rarer for a reason that is not in the logged traffic; the bench now
gives each candidate its own truth sample and counts its standard error. So measured, on 100
candidates: the standardised errors' mean −0.05 (the offset was the shared truth's), their spread
1.08, coverage 94 % (90 % against the noisy truth without its error counted).

The *effective sample size* ``(Σ_i w_i)² / Σ_i w_i²`` of the final weights says how much
of the logged traffic actually informs the estimate; the gate is skipped below ``min_ess``.

Steps after an episode ended are padded with ``ρ = 1`` and zero rewards and values, so the
per-decision sums run over one rectangular ``[episodes, horizon]`` array: no Python loop per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlops.agent_sdk.serving import exploration_probs
from rlops.common.params_operations import OpeParams

ESTIMATORS = ("pdis", "wis", "dr", "sndr", "switch_dr")


# The settings are the typed ``ope:`` params block (one record: its defaults, bounds and meanings).
OPEConfig = OpeParams


@dataclass(frozen=True)
class Estimate:
    """One estimator's value of the candidate with its interval."""

    estimator: str
    value: float
    low: float
    high: float
    se: float
    ci: str

    def covers(self, x: float) -> bool:
        return self.low <= x <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class Episodes:
    """Logged steps as rectangular ``[E, T]`` arrays (padding: ``rho`` 1, the rest 0)."""

    rho: np.ndarray
    reward: np.ndarray
    q_taken: np.ndarray
    v_hat: np.ndarray
    valid: np.ndarray

    @property
    def n(self) -> int:
        return int(self.rho.shape[0])


def to_episodes(
    episode: np.ndarray,
    step: np.ndarray,
    rho: np.ndarray,
    reward: np.ndarray,
    q_taken: np.ndarray | None = None,
    v_hat: np.ndarray | None = None,
) -> Episodes:
    """Scatter per-row arrays into ``[E, T]`` (rows in any order; ``step`` orders an episode).
    Without a direct method, ``q_taken``/``v_hat`` are zero and DR reduces to PDIS."""
    _, e = np.unique(np.asarray(episode), return_inverse=True)
    order = np.lexsort((np.asarray(step), e))
    e_sorted = e[order]
    starts = np.r_[0, np.flatnonzero(np.diff(e_sorted)) + 1]
    pos = np.arange(len(order)) - np.repeat(starts, np.diff(np.r_[starts, len(order)]))
    E, T = int(e.max()) + 1 if len(e) else 0, int(pos.max()) + 1 if len(pos) else 0

    def grid(values: np.ndarray | None, fill: float) -> np.ndarray:
        out = np.full((E, T), fill, dtype=np.float64)
        if values is not None:
            out[e_sorted, pos] = np.asarray(values, dtype=np.float64)[order]
        return out

    valid = np.zeros((E, T), dtype=bool)
    valid[e_sorted, pos] = True
    return Episodes(grid(rho, 1.0), grid(reward, 0.0), grid(q_taken, 0.0), grid(v_hat, 0.0), valid)


def cumulative_weights(rho: np.ndarray) -> np.ndarray:
    return np.cumprod(rho, axis=1)


def pdis_values(ep: Episodes) -> np.ndarray:
    """Per-episode PDIS terms ``Σ_t w_t r_t``."""
    out: np.ndarray = (cumulative_weights(ep.rho) * ep.reward).sum(axis=1)
    return out


def dr_values(ep: Episodes) -> np.ndarray:
    """Per-episode DR terms ``Σ_t [w_t (r_t − Q̂_t) + w_{t−1} V̂_t]``."""
    w = cumulative_weights(ep.rho)
    w_prev = np.concatenate([np.ones((ep.n, 1)), w[:, :-1]], axis=1)
    out: np.ndarray = (w * (ep.reward - ep.q_taken) + w_prev * ep.v_hat).sum(axis=1)
    return out


def sndr_values(ep: Episodes) -> np.ndarray:
    """Per-episode self-normalised DR terms: :func:`dr_values` with ``w_t / w̄_t`` (a step whose
    weights sum to 0 adds nothing)."""
    w = cumulative_weights(ep.rho)
    mean = w.mean(axis=0) if ep.n else np.ones(w.shape[1])
    wn = np.divide(w, mean, out=np.zeros_like(w), where=mean > 0)
    wn_prev = np.concatenate([np.ones((ep.n, 1)), wn[:, :-1]], axis=1)
    out: np.ndarray = (wn * (ep.reward - ep.q_taken) + wn_prev * ep.v_hat).sum(axis=1)
    return out


def switch_dr_values(ep: Episodes, tau: float) -> np.ndarray:
    """Per-episode switch-DR terms: :func:`dr_values` over the steps before an episode's cumulative
    weight first exceeds ``tau``; at that step only ``w_{t−1} V̂(s_t)`` is kept, later steps add nothing."""
    w = cumulative_weights(ep.rho)
    kept = np.cumprod(w <= tau, axis=1).astype(np.float64)
    ws = w * kept
    ws_prev = np.concatenate([np.ones((ep.n, 1)), ws[:, :-1]], axis=1)
    out: np.ndarray = (ws * (ep.reward - ep.q_taken) + ws_prev * ep.v_hat).sum(axis=1)
    return out


#: The "handful of rows" whose share of the weight mass :class:`WeightDiagnostics` reports.
TOP_EPISODES = 10


@dataclass(frozen=True)
class WeightDiagnostics:
    """How much of the logged traffic the importance weights of a target actually use: over the
    episodes' final cumulative weights ``w_i`` (expectation 1 with the true propensities)."""

    ess: float
    """``(Σ w)² / Σ w²``: the number of equally weighted episodes the estimate is worth."""
    mean: float
    """Mean weight; about 1 with the true propensities, for any target."""
    mean_se: float
    """Its standard error."""
    max: float
    """The largest weight."""
    top_share: float
    """Share of ``Σ w`` carried by the :data:`TOP_EPISODES` largest weights: near 1, the estimate
    rests on a handful of rows whatever the ESS says."""

    def to_dict(self) -> dict[str, float]:
        return {k: round(float(v), 6) for k, v in self.__dict__.items()}


def weight_diagnostics(rho: np.ndarray) -> WeightDiagnostics:
    w = cumulative_weights(rho)[:, -1] if rho.size else np.zeros(0)
    n = len(w)
    if n == 0:
        return WeightDiagnostics(0.0, float("nan"), float("nan"), float("nan"), float("nan"))
    total = float(w.sum())
    k = TOP_EPISODES
    top = float(np.partition(w, n - k)[n - k :].sum()) if n > k else total
    return WeightDiagnostics(
        ess=effective_sample_size(rho),
        mean=float(w.mean()),
        mean_se=float(w.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"),
        max=float(w.max()),
        top_share=top / total if total > 0 else float("nan"),
    )


def wis_value(rho: np.ndarray, reward: np.ndarray) -> float:
    """Per-decision weighted IS over rows ``[E, T]`` (a step whose weights sum to 0 adds nothing)."""
    w = cumulative_weights(rho)
    den = w.sum(axis=0)
    num = (w * reward).sum(axis=0)
    return float(np.divide(num, den, out=np.zeros_like(num), where=den > 0).sum())


def effective_sample_size(rho: np.ndarray) -> float:
    """``(Σ w)² / Σ w²`` of the episodes' final cumulative weights."""
    w = cumulative_weights(rho)[:, -1] if rho.size else np.zeros(0)
    s2 = float((w**2).sum())
    return float(w.sum() ** 2 / s2) if s2 > 0 else 0.0


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _bootstrap_indices(n: int, samples: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, n, size=(samples, n))


def mean_estimate(name: str, values: np.ndarray, cfg: OPEConfig) -> Estimate:
    """Mean of per-episode values with the ``cfg.ci`` interval."""
    v = np.asarray(values, dtype=np.float64)
    n = v.size
    mean = float(v.mean()) if n else float("nan")
    se = float(v.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    if cfg.ci == "normal" or n < 2:
        z = _z(cfg.confidence)
        return Estimate(name, mean, mean - z * se, mean + z * se, se, "normal")
    means = v[_bootstrap_indices(n, cfg.bootstrap_samples, cfg.seed)].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - cfg.confidence) / 2, (1 + cfg.confidence) / 2])
    return Estimate(name, mean, float(lo), float(hi), se, "bootstrap")


def wis_estimate(ep: Episodes, cfg: OPEConfig) -> Estimate:
    value = wis_value(ep.rho, ep.reward)
    if ep.n < 2:
        return Estimate("wis", value, float("nan"), float("nan"), float("nan"), "bootstrap")
    idx = _bootstrap_indices(ep.n, cfg.bootstrap_samples, cfg.seed + 1)
    w = cumulative_weights(ep.rho)
    num, den = (w * ep.reward)[idx].sum(axis=1), w[idx].sum(axis=1)  # [B, T]
    boots = np.divide(num, den, out=np.zeros_like(num), where=den > 0).sum(axis=1)
    lo, hi = np.quantile(boots, [(1 - cfg.confidence) / 2, (1 + cfg.confidence) / 2])
    return Estimate("wis", value, float(lo), float(hi), float(boots.std(ddof=1)), "bootstrap")


def estimate_all(ep: Episodes, cfg: OPEConfig) -> dict[str, Estimate]:
    """PDIS, WIS, DR, SNDR and switch DR of one candidate on the same logged episodes (the
    self-normalised and switch intervals are those of their per-episode terms' mean)."""
    return {
        "pdis": mean_estimate("pdis", pdis_values(ep), cfg),
        "wis": wis_estimate(ep, cfg),
        "dr": mean_estimate("dr", dr_values(ep), cfg),
        "sndr": mean_estimate("sndr", sndr_values(ep), cfg),
        "switch_dr": mean_estimate("switch_dr", switch_dr_values(ep, cfg.switch_tau), cfg),
    }


# --------------------------------------------------------------------------- probabilities
def target_probabilities(
    logp: np.ndarray, mask: np.ndarray, greedy: bool, exploration: float = 0.0, distribution: str = "uniform"
) -> np.ndarray:
    """The candidate's action probabilities ``[N, A]`` from its masked log-probabilities: the
    softmax itself, or (``greedy``) what a server of it does — its legal argmax, and with
    ``exploration`` ε the share of decisions drawn from the exploration ``distribution``:
    ``(1 − ε)·[a = argmax] + ε·explore(a)`` (:func:`rlops.agent_sdk.serving.exploration_probs`)."""
    lp = np.where(mask, logp, -np.inf)
    if not greedy:
        return np.where(mask, np.exp(lp), 0.0)
    out = np.zeros_like(lp, dtype=np.float64)
    out[np.arange(len(lp)), lp.argmax(axis=1)] = 1.0
    if exploration > 0.0:
        explore = exploration_probs(mask, np.where(mask, np.exp(lp), 0.0), distribution)
        out = (1.0 - exploration) * out + exploration * explore
    return out


def logged_propensities(frame: Any) -> np.ndarray:
    """``μ(a_t|s_t)`` of each row: the ``propensity`` column where recorded, else ``exp(logp)``
    (the rule engine explores too, and its rows carry their propensity); a rule-engine row with
    neither is taken as deterministic (1). A non-positive or missing value is NaN."""
    import pandas as pd

    n = len(frame)
    logp = (
        pd.to_numeric(frame["logp"], errors="coerce").to_numpy(dtype=np.float64)
        if "logp" in frame
        else np.full(n, np.nan)
    )
    mu = np.exp(logp)
    if "propensity" in frame:
        given = pd.to_numeric(frame["propensity"], errors="coerce").to_numpy(dtype=np.float64)
        mu = np.where(np.isfinite(given), given, mu)
    if "fallback" in frame:  # a rule-engine row written before the rule engine explored: deterministic
        fell_back = frame["fallback"].fillna(False).to_numpy(dtype=bool)
        mu = np.where(fell_back & ~np.isfinite(mu), 1.0, mu)
    return np.where((mu > 0) & (mu <= 1 + 1e-6), np.minimum(mu, 1.0), np.nan)
