"""Regret on the timeline: the served policy against the oracle and the rule engine, every hour.

Each tick the production stand-in serves episodes with seeds ``seed .. seed + n − 1`` (one block per
traffic group). :class:`RegretMeter` plays the pack's oracle (``oracle.py``) and its rule engine on
exactly those episodes — same seeds, the production world with the events in force, scored with the
reward function the business scores with at that time — so each hour has, on the same applicants:

* ``live_return`` — what the served policies earned (champion, challenger, fallbacks: the traffic);
* ``oracle_return`` — the best attainable (the oracle knows the hidden state, not the draws);
* ``rules_return`` — the rule engine, the production fallback;
* ``regret = oracle_return − live_return`` and ``regret_share = regret / (oracle − rules)``.

Over the run (:func:`regret_metrics`):

* ``recovery_h`` — per world-changing event, hours from its onset to the end of the first hour in
  which the live return is back to ≥ ``recovery_fraction`` (95 %) of the oracle's in that world
  (None: never, within the run);
* ``mean_regret_share`` — the mean of ``regret_share`` over the hours after the first promotion.

A pack without an oracle gets no figures (``oracle_return`` stays None), and nothing else changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.pipeline_steps.orchestration.events import Event
    from rlops.sandbox.pack import Pack

RECOVERY_FRACTION = 0.95


@dataclass
class _Sums:
    oracle: float = 0.0
    rules: float = 0.0
    episodes: int = 0


@dataclass
class RegretMeter:
    """Accumulates oracle and rule-engine returns on the hour's live episodes."""

    enabled: bool = True
    _oracles: dict[int, Any] = field(default_factory=dict)
    _hour: _Sums = field(default_factory=_Sums)

    def _oracle(self, pack: Pack) -> Any:
        from rlops.sandbox.policies import load_oracle

        key = id(pack)
        if key not in self._oracles:
            self._oracles[key] = load_oracle(pack)
        return self._oracles[key]

    def add(self, pack: Pack, seed: int, episodes: int, reward_version: str | None, profile: str = "live") -> None:
        """Score the oracle and the rules on the live episodes ``seed .. seed + episodes − 1``."""
        if not self.enabled or episodes <= 0:
            return
        oracle = self._oracle(pack)
        if oracle is None:
            self.enabled = False
            return
        from rlops.sandbox.policies import evaluate_policy, rule_policy

        for name, act in (("oracle", oracle), ("rules", rule_policy)):
            res = evaluate_policy(
                pack, act, episodes=episodes, seed=seed, profile=profile, reward_version=reward_version
            )
            setattr(self._hour, name, getattr(self._hour, name) + float(res.returns.sum()))
        self._hour.episodes += episodes

    def close(self, hour: Any) -> None:
        """Set ``oracle_return``, ``rules_return``, ``regret`` and ``regret_share`` on ``hour``
        (a timeline :class:`~rlops.pipeline_steps.orchestration.timeline.Hour`) and start the next."""
        sums, self._hour = self._hour, _Sums()
        if not self.enabled or not sums.episodes or hour.live_return is None:
            return
        hour.oracle_return = sums.oracle / sums.episodes
        hour.rules_return = sums.rules / sums.episodes
        hour.regret = hour.oracle_return - hour.live_return
        gap = hour.oracle_return - hour.rules_return
        hour.regret_share = hour.regret / gap if gap > 1e-6 else None


def recovery_hours(hours: list[Any], onset: float, fraction: float = RECOVERY_FRACTION) -> float | None:
    """Hours from ``onset`` to the end of the first hour (starting at or after it) whose live return
    is at least ``fraction`` of the oracle's."""
    for h in hours:
        if h.hour + 1 <= onset or h.oracle_return is None or h.live_return is None:
            continue
        target = fraction * h.oracle_return if h.oracle_return >= 0 else h.oracle_return / fraction
        if h.live_return >= target:
            out: float | None = round(h.hour + 1 - onset, 3)
            return out
    return None


def regret_metrics(hours: list[Any], events: list[Event], first_promotion_hour: int | None) -> dict[str, Any]:
    """``recovery_h`` per world-changing event, ``mean_regret_share`` after the first promotion,
    and the hourly series (for the JSON report)."""
    if not any(getattr(h, "oracle_return", None) is not None for h in hours):
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
    """Oracle and rule-engine returns beside the live return, the regret shaded (the gap a person
    looks at)."""
    pts = [
        (h.hour + 1, h.live_return, h.oracle_return, h.rules_return)
        for h in hours
        if getattr(h, "oracle_return", None) is not None and h.live_return is not None
    ]
    if not pts:
        return
    x, live, oracle, rules = (list(c) for c in zip(*pts))
    ax.plot(x, oracle, color="tab:green", lw=1.2, ls="--", label="oracle (same episodes)")
    ax.plot(x, rules, color="tab:gray", lw=1.0, ls=":", label="rule engine (same episodes)")
    ax.fill_between(x, live, oracle, color="tab:red", alpha=0.15, label="regret")
    ax.legend(fontsize=7, loc="lower left")
