"""Late outcomes joined into returns: what a read of the trace store adds, and how returns are summarised.

An episode's outcome reward is the sum over its stored outcomes known at ``as_of`` (outcome time at
or before it) of ``weight × value`` for each value the pack maps (``outcomes.rewards``) plus every
explicit reward component as it is. It is added to ``reward_total`` of the episode's last step (the
highest ``step``; a missing ``reward_total`` there counts as 0), so a return summed over the episode,
return-to-go and off-policy estimates all see it. Two columns say what happened:

* ``outcome_reward``: the amount added, on the last step of an episode with outcomes (NaN elsewhere);
  the same amounts, per reward component, are merged into that row's ``reward_breakdown`` (a
  component already there has the amount added to its score, a new one is listed with the outcome
  as its reason) and its ``total``, so what reads components — the recalibration of outcome scales
  and factors — sees the outcome as it arrived;
* ``outcome_status`` (every row of the episode): ``joined`` (an outcome arrived), ``censored`` (the
  episode awaits an outcome and its last decision is younger than ``outcomes.max_delay_days`` at
  ``as_of``: its return is not final), ``closed`` (it awaited one, none came within the window: the
  decision-time return is final) or ``none`` (it awaits none).

An episode awaits an outcome when the pack maps at least one outcome to reward and its last action is
one of ``outcomes.awaited_actions`` (every last action when that is null).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rlops.trace_store.outcomes import OutcomeRules

#: The trace columns the join needs beside those a caller asks for.
JOIN_COLUMNS = ("episode_id", "step", "ts", "action", "reward_total")
STATUSES = ("joined", "censored", "closed", "none")


def weighted_outcomes(outcomes: pd.DataFrame, rules: OutcomeRules) -> pd.DataFrame:
    """Each stored outcome row's ``episode_id``, reward ``component`` and ``amount``: a mapped value
    is ``weight × value`` of its rule's component, an explicit component its value; a value the pack
    does not map has no component and adds 0."""
    is_component = outcomes["kind"].to_numpy() == "components"
    names = outcomes["name"].astype(str)
    mapped = {name: component for name, (component, _) in rules.rewards.items()}
    weights = pd.Series({name: w for name, (_, w) in rules.rewards.items()}, dtype="float64")
    weight = names.map(weights).fillna(0.0).to_numpy(np.float64)
    return pd.DataFrame(
        {
            "episode_id": outcomes["episode_id"].astype(str).to_numpy(),
            "component": np.where(is_component, names.to_numpy(), names.map(mapped).to_numpy(dtype=object)),
            "amount": outcomes["value"].to_numpy(np.float64) * np.where(is_component, 1.0, weight),
        }
    )


def outcome_components(outcomes: pd.DataFrame, rules: OutcomeRules) -> dict[str, dict[str, float]]:
    """``{episode id: {reward component: amount}}`` of stored outcome rows (:func:`weighted_outcomes`)."""
    if outcomes.empty:
        return {}
    frame = weighted_outcomes(outcomes, rules).dropna(subset=["component"])
    out: dict[str, dict[str, float]] = {}
    for (episode, name), amount in frame.groupby(["episode_id", "component"], sort=False)["amount"].sum().items():
        out.setdefault(str(episode), {})[str(name)] = float(amount)
    return out


def merged_breakdown(raw: Any, added: dict[str, float]) -> str:
    """A row's ``reward_breakdown`` JSON with the outcome components ``added`` (see the module)."""
    try:
        doc = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    except json.JSONDecodeError:
        doc = {}
    doc = doc if isinstance(doc, dict) else {}
    items = [i for i in doc.get("breakdown") or [] if isinstance(i, dict)]
    by_name = {str(i.get("component")): i for i in items}
    for name, amount in added.items():
        if name in by_name and isinstance(by_name[name].get("score"), (int, float)):
            by_name[name]["score"] = round(float(by_name[name]["score"]) + amount, 6)
        else:
            items.append({"component": name, "score": round(amount, 6), "reason": "late outcome", "rule_ref": None})
    total = doc.get("total")
    total = round((float(total) if isinstance(total, (int, float)) else 0.0) + sum(added.values()), 6)
    return json.dumps({**doc, "total": total, "breakdown": items})


def settled(joined: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`join_outcomes`' result whose episode's return is final (not ``censored``)."""
    if joined.empty or "outcome_status" not in joined.columns:
        return joined
    return joined[joined["outcome_status"].astype(str).ne("censored")]


def outcome_rewards(outcomes: pd.DataFrame, rules: OutcomeRules) -> pd.Series:
    """Reward per episode id from its stored outcome rows (:func:`weighted_outcomes`, summed)."""
    if outcomes.empty:
        return pd.Series(dtype="float64")
    frame = weighted_outcomes(outcomes, rules)
    return pd.Series(frame["amount"].to_numpy(), index=outcomes["episode_id"].to_numpy()).groupby(level=0).sum()


def last_steps(frame: pd.DataFrame) -> pd.Series:
    """A boolean mask of each episode's last row (highest ``step``, else its last row in the frame)."""
    order = frame["step"] if "step" in frame.columns else pd.Series(np.arange(len(frame)), index=frame.index)
    order = pd.to_numeric(order, errors="coerce").fillna(-1)
    keyed = pd.DataFrame({"e": frame["episode_id"].astype(str).to_numpy(), "o": order.to_numpy()}, index=frame.index)
    last = keyed.sort_values("o", kind="stable").groupby("e", sort=False).tail(1).index
    return pd.Series(frame.index.isin(last), index=frame.index)


def join_outcomes(frame: pd.DataFrame, outcomes: pd.DataFrame, rules: OutcomeRules, as_of: datetime) -> pd.DataFrame:
    """``frame`` (trace rows with at least ``episode_id``) with its episodes' outcomes joined (see the
    module); a copy, the input is left as it was."""
    out = frame.copy()
    if out.empty or "episode_id" not in out.columns:
        return out
    known = outcomes[outcomes["ts"] <= pd.Timestamp(as_of)] if len(outcomes) else outcomes
    reward = outcome_rewards(known, rules)
    episodes = out["episode_id"].astype(str)
    last = last_steps(out).to_numpy()
    has = episodes.isin(set(known["episode_id"])).to_numpy() if len(known) else np.zeros(len(out), dtype=bool)
    added = np.where(last & has, episodes.map(reward).fillna(0.0).to_numpy(np.float64), np.nan)
    if "reward_total" in out.columns:
        base = pd.to_numeric(out["reward_total"], errors="coerce").to_numpy(np.float64)
        out["reward_total"] = np.where(np.isnan(added), base, np.nan_to_num(base) + np.nan_to_num(added))
    out["outcome_reward"] = added
    out["outcome_status"] = _statuses(out, episodes, last, has, rules, as_of)
    if "reward_breakdown" in out.columns and (last & has).any():
        components = outcome_components(known, rules)
        rows = np.flatnonzero(last & has)
        column = out["reward_breakdown"].astype(object).to_numpy(copy=True)
        for i, episode in zip(rows, episodes.to_numpy()[rows]):
            if components.get(episode):
                column[i] = merged_breakdown(column[i], components[episode])
        out["reward_breakdown"] = column
    return out


def _statuses(
    out: pd.DataFrame, episodes: pd.Series, last: np.ndarray, has: np.ndarray, rules: OutcomeRules, as_of: datetime
) -> np.ndarray:
    """Each row's episode status (see the module), decided on the episode's last row."""
    status = np.where(has, "joined", "none").astype(object)
    if rules.rewards:
        awaited = last & ~has
        if rules.awaited_actions is not None and "action" in out.columns:
            awaited &= out["action"].astype(str).isin(sorted(rules.awaited_actions)).to_numpy()
        if "ts" in out.columns:
            decided = pd.to_datetime(out["ts"], utc=True, errors="coerce", format="ISO8601")
            young = (decided + rules.max_delay > pd.Timestamp(as_of)).fillna(True).to_numpy(dtype=bool)
        else:  # no decision time: the episode cannot be shown to be past its window
            young = np.ones(len(out), dtype=bool)
        status[awaited & young] = "censored"
        status[awaited & ~young] = "closed"
    by_episode = pd.Series(status[last], index=episodes[last].to_numpy())
    by_episode = by_episode[~by_episode.index.duplicated()]
    statuses: np.ndarray = episodes.map(by_episode).fillna("none").to_numpy(dtype=object)
    return statuses


@dataclass(frozen=True)
class EpisodeReturns:
    """Returns of a window's episodes with outcomes joined, and the episodes whose return is not final."""

    returns: np.ndarray
    """Summed reward of each final episode that has one (censored episodes left out), by episode id."""
    episodes: int
    joined: int
    """Episodes with an outcome."""
    censored: int
    """Episodes still waiting for an outcome within ``outcomes.max_delay_days``: not in :attr:`returns`."""
    closed: int
    """Episodes that awaited an outcome and got none within the window (decision-time return)."""

    @property
    def mean(self) -> float | None:
        return float(self.returns.mean()) if len(self.returns) else None

    def as_dict(self) -> dict[str, Any]:
        mean = self.mean
        return {
            "episodes": self.episodes,
            "measured": len(self.returns),
            "joined": self.joined,
            "censored": self.censored,
            "closed": self.closed,
            "mean_return": None if mean is None else round(mean, 6),
        }


def episode_returns(joined: pd.DataFrame) -> EpisodeReturns:
    """:class:`EpisodeReturns` of rows as :func:`join_outcomes` returns them (an episode no row of which
    carries a reward has no measured return and is left out, never counted as 0)."""
    if joined.empty or "episode_id" not in joined.columns:
        return EpisodeReturns(np.zeros(0), 0, 0, 0, 0)
    status = joined.groupby("episode_id", sort=True)["outcome_status"].first()
    counts = status.value_counts()
    reward = joined["reward_total"] if "reward_total" in joined.columns else pd.Series(np.nan, index=joined.index)
    summed = pd.to_numeric(reward, errors="coerce").groupby(joined["episode_id"], sort=True).sum(min_count=1)
    final = summed[status.reindex(summed.index).to_numpy() != "censored"].dropna()
    return EpisodeReturns(
        final.to_numpy(np.float64),
        int(len(status)),
        int(counts.get("joined", 0)),
        int(counts.get("censored", 0)),
        int(counts.get("closed", 0)),
    )


__all__ = [
    "JOIN_COLUMNS",
    "STATUSES",
    "EpisodeReturns",
    "episode_returns",
    "join_outcomes",
    "merged_breakdown",
    "outcome_components",
    "outcome_rewards",
    "settled",
    "weighted_outcomes",
]
