"""Direct methods for the doubly robust estimator: ``Q̂(s, a)`` of the candidate on logged states.

* ``sandbox`` — the calibrated sandbox (never the production stand-in) rolls the candidate for
  ``ope.dm_episodes`` episodes, taking a uniformly random legal action with probability
  ``ope.dm_explore`` so that every action is tried; each row's return-to-go under that behaviour is
  regressed on the row's state features (the encoded fields and mask the clustering uses) by
  ridge least squares, one linear model per action. It is the sandbox's belief of what an action
  earns from a state and what the candidate earns afterwards: wrong exactly where the sandbox is
  wrong, which DR's importance-weighted correction then repairs with live rewards.
* ``reward_model`` — the newest registered reward model scores each logged state with every
  action; its scores (a preference scale) are mapped to reward units by a least-squares line
  fitted on the logged rows' rewards. A one-step model: it carries no value of what follows.

Either way ``Q̂`` only sets DR's variance; with correct propensities DR is unbiased for any ``Q̂``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from rlops.model.reward_model import score
from rlops.pipeline_steps.training.relabel import step_inputs
from rlops.sandbox.traces import rollout_traces
from rlops.trace_store.states import action_codes, state_features

if TYPE_CHECKING:
    import pandas as pd
    import torch

    from rlops.sandbox.pack import Pack

#: The candidate as OPE sees it: ``(obs[N, D], mask[N, A]) → probabilities[N, A]``.
TargetProbs = Callable[["torch.Tensor", "torch.Tensor"], np.ndarray]


@dataclass(frozen=True)
class LinearQ:
    """``Q̂(x, a) = [x̃, 1] · W[:, a]`` over standardised features ``x̃``."""

    mean: np.ndarray
    std: np.ndarray
    weights: np.ndarray  # [d + 1, A]

    def predict(self, features: np.ndarray) -> np.ndarray:
        x = (np.asarray(features, dtype=np.float64) - self.mean) / self.std
        out: np.ndarray = np.c_[x, np.ones(len(x))] @ self.weights
        return out


def fit_linear_q(
    features: np.ndarray, actions: np.ndarray, targets: np.ndarray, n_actions: int, ridge: float
) -> LinearQ:
    """Ridge least squares of ``targets`` on ``features``, one model per action (an action never
    taken predicts the mean target)."""
    X = np.asarray(features, dtype=np.float64)
    mean, std = X.mean(axis=0), X.std(axis=0)
    std = np.where(std > 1e-9, std, 1.0)
    Z = np.c_[(X - mean) / std, np.ones(len(X))]
    d = Z.shape[1]
    W = np.zeros((d, n_actions))
    W[-1, :] = float(np.mean(targets)) if len(targets) else 0.0
    penalty = ridge * np.eye(d)
    penalty[-1, -1] = 0.0  # the intercept is not shrunk
    for a in range(n_actions):
        rows = actions == a
        if rows.sum() == 0:
            continue
        Za = Z[rows]
        W[:, a] = np.linalg.solve(Za.T @ Za + penalty + 1e-9 * np.eye(d), Za.T @ targets[rows])
    return LinearQ(mean, std, W)


def returns_to_go(frame: pd.DataFrame) -> np.ndarray:
    """Each row's reward plus every later reward of its episode."""
    order = frame.sort_values(["episode_id", "step"], ascending=[True, False], kind="stable").index
    rtg = frame.loc[order].groupby("episode_id", sort=False)["reward_total"].cumsum()
    out: np.ndarray = rtg.reindex(frame.index).to_numpy(dtype=np.float64)
    return out


def exploring_policy(target: TargetProbs, explore: float, seed: int) -> Callable[[Any], Any]:
    """A trace policy over a batched env (``rlops.sandbox.traces.TracePolicy``): the target's
    action, or with probability ``explore`` a uniformly random legal one; it records ``logp``, the
    log of the probability ``(1 − explore)·π(a|s) + explore / n_legal`` with which it chose — the
    propensity an exploring logger writes on each row."""
    import torch

    gen = torch.Generator().manual_seed(seed)

    def act(env: Any) -> Any:
        mask = env.action_masks()
        probs = torch.as_tensor(target(env.observe(), mask), dtype=torch.float64) * mask
        own = torch.multinomial(probs.clamp_min(0) + 1e-12 * mask.double(), 1, generator=gen)[:, 0]
        noise = torch.rand(mask.shape, generator=gen)
        rand = torch.where(mask, noise + 1.0, torch.zeros_like(noise)).argmax(dim=1)
        pick = torch.rand(mask.shape[0], generator=gen) < explore
        action = torch.where(pick, rand, own)
        mu = (1 - explore) * probs.gather(1, action[:, None])[:, 0] + explore / mask.sum(dim=1).double()
        return action, {"logp": mu.log().float()}

    return act


def sandbox_q(
    pack: Pack,
    target: TargetProbs,
    *,
    episodes: int,
    explore: float,
    ridge: float,
    profile: str | None,
    reward_label: str | None,
    seed: int,
) -> LinearQ:
    """Fit the sandbox direct method (see the module docstring) on ``pack`` — the calibrated sandbox."""
    rows = rollout_traces(
        pack,
        exploring_policy(target, explore, seed),
        episodes,
        seed=seed,
        profile=profile,
        reward_fn=reward_label,
        source="sandbox",
        episode_prefix=f"ope-dm-{seed}",
    )
    feats = state_features(pack, rows).numpy()
    return fit_linear_q(feats, action_codes(pack, rows["action"]), returns_to_go(rows), pack.scenario.n_actions, ridge)


def reward_model_q(pack: Pack, model: Any, frame: pd.DataFrame, rewards: np.ndarray) -> np.ndarray:
    """``Q̂[N, A]`` of logged rows from a reward model: every action scored, mapped to reward units."""
    import torch

    obs, _, actions, outcomes = step_inputs(pack, frame)
    states = obs[:, : pack.scenario.layout.n_features]
    n, A = len(frame), pack.scenario.n_actions
    raw = np.stack(
        [score(model, states, torch.full((n,), a, dtype=torch.long), outcomes).numpy() for a in range(A)], axis=1
    ).astype(np.float64)
    taken = raw[np.arange(n), actions.numpy()]
    slope, intercept = np.polyfit(taken, rewards, 1) if n > 1 and np.ptp(taken) > 0 else (0.0, rewards.mean())
    out: np.ndarray = slope * raw + intercept
    return out
