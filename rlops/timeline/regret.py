"""Regret on the timeline: the served policy against the best policy of the world in force, every hour.

Each tick the production stand-in serves episodes with seeds ``seed .. seed + n − 1`` (one block per
traffic group). :class:`RegretMeter` plays the reference policies and the pack's rule engine on
exactly those episodes — same seeds, the production world with the events in force, scored with the
reward function the business scores with at that time — so each hour has, on the same applicants:

* ``live_return`` — what the served policies earned (champion, challenger, fallbacks: the traffic);
* ``oracle_return`` — the pack's oracle (``oracle.py``: it knows the hidden state, not the draws),
  written for one reward (``oracle_reward``, v1);
* ``trained_return`` — where the business scores with another reward (a rule change), a policy
  trained in that world (the live profile of the production world, the reward in force) with the
  product's defaults (:func:`rlops.model.pack_defaults.derive_defaults`): an oracle written for the
  old reward is no optimum of the new one;
* ``reference_return`` — the better of the two on each tick's episodes: the world-optimal reference;
* ``rules_return`` — the rule engine, the production fallback;
* ``regret = reference_return − live_return`` and ``regret_share = regret / (reference − rules)``.

Over the run (:func:`regret_metrics`):

* ``recovery_h`` — per world-changing event, hours from its onset to the end of the first hour in
  which the live return is back to ≥ ``recovery_fraction`` (95 %) of the reference's in that world
  (None: never, within the run);
* ``mean_regret_share`` — the mean of ``regret_share`` over the hours after the first promotion.

A pack without an oracle gets no figures (``oracle_return`` stays None), and nothing else changes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlops.model.pack_defaults import derive_defaults
from rlops.model.policy import as_act_fn
from rlops.model.ppo import train
from rlops.sandbox.policies import evaluate_policy, load_oracle, rule_policy

if TYPE_CHECKING:
    from rlops.sandbox.pack import Pack
    from rlops.timeline.events import Event

RECOVERY_FRACTION = 0.95


@dataclass
class _Sums:
    oracle: float = 0.0
    trained: float = 0.0
    trained_episodes: int = 0
    reference: float = 0.0
    rules: float = 0.0
    episodes: int = 0


@dataclass
class RegretMeter:
    """Accumulates reference and rule-engine returns on the hour's live episodes."""

    enabled: bool = True
    oracle_reward: str = "v1"
    """the reward the pack's oracle is written for: under any other a policy trained in the world is
    the reference too"""
    reference_timesteps: int | None = None
    """the world-trained reference's budget (None: the product's default, PPOConfig.total_timesteps)"""
    seed: int = 0
    trained: dict[str, dict[str, Any]] = field(default_factory=dict)
    """per world and reward trained in: its budget, steps and wall seconds (the run's report)"""
    _oracles: dict[int, Any] = field(default_factory=dict)
    _world_policies: dict[tuple[int, str], Any] = field(default_factory=dict)
    _hour: _Sums = field(default_factory=_Sums)

    def _oracle(self, pack: Pack) -> Any:

        key = id(pack)
        if key not in self._oracles:
            self._oracles[key] = load_oracle(pack)
        return self._oracles[key]

    def _world_policy(self, pack: Pack, reward_fn: str | None, profile: str) -> Any:
        """A policy trained in this world under ``reward_fn`` with the product's defaults
        (None where the oracle's own reward is in force); trained once per world and reward."""
        if reward_fn is None or reward_fn == self.oracle_reward:
            return None
        key = (id(pack), reward_fn)
        if key not in self._world_policies:
            budget = {"total_timesteps": self.reference_timesteps} if self.reference_timesteps else {}
            plan = derive_defaults(pack, device="cpu", seed=self.seed, **budget)
            env = pack.make_env(plan.num_envs, reward_fn=reward_fn, profile=profile, seed=self.seed)
            wall0 = time.perf_counter()
            result = train(plan.config, env)
            self.trained[f"{pack.path.name}:{reward_fn}"] = {
                "total_timesteps": plan.config.total_timesteps,
                "steps": result.global_step,
                "wall_s": round(time.perf_counter() - wall0, 1),
            }
            self._world_policies[key] = as_act_fn(result.policy)
        return self._world_policies[key]

    def add(self, pack: Pack, seed: int, episodes: int, reward_fn: str | None, profile: str = "live") -> None:
        """Score the references and the rules on the live episodes ``seed .. seed + episodes − 1``."""
        if not self.enabled or episodes <= 0:
            return
        oracle = self._oracle(pack)
        if oracle is None:
            self.enabled = False
            return

        def total(act: Any) -> float:
            res = evaluate_policy(pack, act, episodes=episodes, seed=seed, profile=profile, reward_fn=reward_fn)
            return float(res.returns.sum())

        h = self._hour
        oracle_sum, rules_sum = total(oracle), total(rule_policy)
        h.oracle, h.rules, h.episodes = h.oracle + oracle_sum, h.rules + rules_sum, h.episodes + episodes
        world = self._world_policy(pack, reward_fn, profile)
        trained_sum = total(world) if world is not None else None
        if trained_sum is not None:
            h.trained, h.trained_episodes = h.trained + trained_sum, h.trained_episodes + episodes
        h.reference += max(oracle_sum, trained_sum) if trained_sum is not None else oracle_sum

    def close(self, hour: Any) -> None:
        """Set ``oracle_return``, ``trained_return``, ``reference_return``, ``rules_return``,
        ``regret`` and ``regret_share`` on ``hour`` (a timeline
        :class:`~rlops.timeline.world.Hour`) and start the next."""
        sums, self._hour = self._hour, _Sums()
        if not self.enabled or not sums.episodes or hour.live_return is None:
            return
        hour.oracle_return = sums.oracle / sums.episodes
        hour.trained_return = sums.trained / sums.trained_episodes if sums.trained_episodes else None
        hour.reference_return = sums.reference / sums.episodes
        hour.rules_return = sums.rules / sums.episodes
        hour.regret = hour.reference_return - hour.live_return
        gap = hour.reference_return - hour.rules_return
        hour.regret_share = hour.regret / gap if gap > 1e-6 else None


def recovery_hours(hours: list[Any], onset: float, fraction: float = RECOVERY_FRACTION) -> float | None:
    """Hours from ``onset`` to the end of the first hour (starting at or after it) whose live return
    is at least ``fraction`` of the reference's."""
    for h in hours:
        if h.hour + 1 <= onset or h.reference_return is None or h.live_return is None:
            continue
        ref = h.reference_return
        target = fraction * ref if ref >= 0 else ref / fraction
        if h.live_return >= target:
            out: float | None = round(h.hour + 1 - onset, 3)
            return out
    return None


def regret_metrics(hours: list[Any], events: list[Event], first_promotion_hour: int | None) -> dict[str, Any]:
    """``recovery_h`` per world-changing event, ``mean_regret_share`` after the first promotion,
    and the hourly series (for the JSON report)."""
    if not any(getattr(h, "reference_return", None) is not None for h in hours):
        return {}
    changing = [e for e in events if e.drift or e.outcome]
    after = [
        h.regret_share
        for h in hours
        if first_promotion_hour is not None
        and h.hour > first_promotion_hour
        and h.regret_share is not None
        and math.isfinite(h.regret_share)
    ]
    return {
        "recovery_h": {e.label(): recovery_hours(hours, e.at_hour) for e in changing},
        "mean_regret_share": round(sum(after) / len(after), 4) if after else None,
        "mean_regret": round(
            sum(h.regret for h in hours if h.regret is not None) / max(1, sum(h.regret is not None for h in hours)), 4
        ),
    }


def draw(ax: Any, hours: list[Any]) -> None:
    """The world-optimal reference and the rule engine beside the live return, the regret shaded
    (the gap a person looks at)."""
    pts = [
        (h.hour + 1, h.live_return, h.reference_return, h.rules_return)
        for h in hours
        if getattr(h, "reference_return", None) is not None and h.live_return is not None
    ]
    if not pts:
        return
    x, live, reference, rules = (list(c) for c in zip(*pts))
    ax.plot(x, reference, color="tab:green", lw=1.2, ls="--", label="best in the world in force (same episodes)")
    ax.plot(x, rules, color="tab:gray", lw=1.0, ls=":", label="rule engine (same episodes)")
    ax.fill_between(x, live, reference, color="tab:red", alpha=0.15, label="regret")
    ax.legend(fontsize=7, loc="lower left")
