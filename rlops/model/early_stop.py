"""When to stop training: the stagnation flag on the training return, and early stopping on a
plateau of the *evaluation* return.

The training return of PPO is measured with a sampling (stochastic) policy on episodes that
change every iteration, so it keeps drifting upwards while the greedy policy — the one that is
served — has long stopped improving, or it stalls while the greedy policy still improves.
:class:`EvalPlateau` therefore scores the greedy policy every few iterations on one fixed, seeded
batch of episodes (the same applicants every time, disjoint from the training seeds), keeps the
best weights seen and reports a plateau once ``patience`` evaluations in a row did not beat the
best by ``min_delta · max(1, |best|)``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from typing import Any

import torch

from rlops.model.policy import as_act_fn
from rlops.sandbox.env import BatchedEnv
from rlops.sandbox.policies import evaluate_policy


class StagnationMonitor:
    """Flags a run whose best mean episodic return has not improved for ``window`` iterations.

    An iteration "moves" the return when it beats the best so far by more than
    ``tol · max(1, |best|)``; iterations without finished episodes count as not moving.
    """

    def __init__(self, window: int, tol: float):
        self.window, self.tol = window, tol
        self.best, self.since = -math.inf, 0

    def update(self, episodic_return: float) -> bool:
        if math.isnan(episodic_return):
            moved = False
        elif math.isinf(self.best):
            moved = True
        else:
            moved = episodic_return > self.best + self.tol * max(1.0, abs(self.best))
        if moved:
            self.best, self.since = episodic_return, 0
        else:
            self.since += 1
        return self.window > 0 and self.since >= self.window

    def state_dict(self) -> dict[str, float]:
        return {"best": self.best, "since": self.since}

    def load_state_dict(self, sd: Mapping[str, float]) -> None:
        self.best, self.since = float(sd["best"]), int(sd["since"])


class EvalPlateau:
    """Greedy evaluation every ``every`` iterations on ``episodes`` fixed seeded episodes.

    Args:
        env: the training environment (its scenario, reward function, profile and device are used).
        every: iterations between evaluations (0: never evaluate, never stop).
        episodes: size of the evaluation batch.
        seed: first instance seed of the evaluation batch (keep it away from the training seeds).
        patience: evaluations in a row without improvement that make a plateau (0: never stop).
        min_delta: improvement, relative to ``max(1, |best|)``, that counts as progress.
    """

    def __init__(self, env: Any, every: int, episodes: int, seed: int, patience: int, min_delta: float):
        self.every, self.seed, self.patience, self.min_delta = every, seed, patience, min_delta
        self.env = (
            BatchedEnv(env.scenario, env.reward_fn, episodes, env.profile, env.device, illegal_action="noop")
            if every > 0
            else None
        )
        self.best, self.since, self.best_iteration = -math.inf, 0, 0
        self.best_state: dict[str, torch.Tensor] | None = None

    def due(self, iteration: int) -> bool:
        return self.env is not None and iteration % self.every == 0

    def evaluate(self, policy: Any, reward_fn: Any) -> float:
        """Mean greedy return of ``policy`` on the fixed evaluation batch."""
        assert self.env is not None
        if self.env.reward_fn.version != reward_fn.version:
            self.env.set_reward_fn(reward_fn)
        result = evaluate_policy(None, as_act_fn(policy), seed=self.seed, env=self.env)  # type: ignore[arg-type]  # the env is given, so no pack is needed
        return result.mean_return

    def update(self, iteration: int, policy: Any, reward_fn: Any) -> tuple[float, bool]:
        """Evaluate, remember the best weights, and say whether the return has plateaued."""
        ret = self.evaluate(policy, reward_fn)
        if ret > self.best + self.min_delta * max(1.0, abs(self.best)) or self.best_state is None:
            self.since = 0
        else:
            self.since += 1
        if ret > self.best:
            self.best, self.best_iteration = ret, iteration
            self.best_state = copy.deepcopy(policy.state_dict())
        return ret, self.patience > 0 and self.since >= self.patience

    def restore_best(self, policy: Any) -> bool:
        """Load the best evaluated weights (and observation statistics) into ``policy``."""
        if self.best_state is None:
            return False
        policy.load_state_dict(self.best_state)
        return True

    def state_dict(self) -> dict[str, Any]:
        return {
            "best": self.best,
            "since": self.since,
            "best_iteration": self.best_iteration,
            "best_state": self.best_state or {},
        }

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        self.best, self.since = float(sd["best"]), int(sd["since"])
        self.best_iteration = int(sd["best_iteration"])
        self.best_state = dict(sd["best_state"]) or None


__all__ = ["StagnationMonitor", "EvalPlateau"]
