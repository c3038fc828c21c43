"""The live cost of exploration, measured from the logs: what serving without exploration would
have earned on the same traffic against what was earned.

Serving without exploration is the served policy's own choice at every decision; its value is
estimated off-policy from the logged rows (weighted importance sampling): an episode in which a
decision was explored weighs 0, one in which none was weighs ``Π_t 1/μ_t`` — the episodes that
drew no exploration are not a fair sample by themselves, since a longer episode is more likely to
draw one. The cost is ``(V_chosen − V_all) / |V_chosen|``, the share of the return given up to
make every candidate judgeable off-policy. Rows written before decisions were marked (no
``explored`` column) measure nothing, and say so.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

COLUMNS = ("episode_id", "source", "reward_total", "explored", "logp")


@dataclass(frozen=True)
class ExplorationCost:
    """What exploration cost the live return of an interval."""

    decisions: int
    explored_decisions: int
    episodes: int
    explored_episodes: int
    return_all: float
    """Mean return of every live episode."""
    return_chosen: float
    """Value of serving the policy's own choice at every decision (weighted importance sampling)."""
    cost_share: float
    """``(return_chosen − return_all) / |return_chosen|`` (NaN: not measurable)."""

    @property
    def explored_share(self) -> float:
        return self.explored_decisions / self.decisions if self.decisions else 0.0

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ExplorationCost:
        """The record :meth:`to_dict` wrote (a capture summary's ``exploration``)."""

        def num(k: str) -> float:
            return float("nan") if d.get(k) is None else float(d[k])

        return cls(
            decisions=int(d["decisions"]),
            explored_decisions=int(d["explored_decisions"]),
            episodes=int(d["episodes"]),
            explored_episodes=int(d["explored_episodes"]),
            return_all=num("return_all"),
            return_chosen=num("return_chosen"),
            cost_share=num("cost_share"),
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {**asdict(self), "explored_share": self.explored_share}
        return {k: (round(v, 6) if isinstance(v, float) and math.isfinite(v) else v) for k, v in out.items()}

    def describe(self) -> str:
        if not self.decisions:
            return "exploration: no live decisions"
        cost = f"{self.cost_share:+.1%}" if math.isfinite(self.cost_share) else "not measurable"
        return (
            f"exploration: {self.explored_decisions} of {self.decisions} live decisions explored "
            f"({self.explored_share:.1%}); episodes without exploration earn {self.return_chosen:.4g}, all "
            f"{self.return_all:.4g}: cost {cost} of the live return"
        )


def exploration_cost(rows: pd.DataFrame) -> ExplorationCost | None:
    """The cost of exploration on the live ``rows`` (None: no row says whether it explored)."""
    import pandas as pd

    if rows.empty or "explored" not in rows.columns or "reward_total" not in rows.columns:
        return None
    live = rows[rows["source"].astype("string") == "live"] if "source" in rows.columns else rows
    live = live[live["explored"].notna()]
    if live.empty:
        return None
    explored = live["explored"].astype(bool).to_numpy()
    reward = pd.to_numeric(live["reward_total"], errors="coerce").to_numpy(dtype=np.float64)
    logp = (
        pd.to_numeric(live["logp"], errors="coerce").to_numpy(dtype=np.float64)
        if "logp" in live
        else np.zeros(len(live))
    )
    # log of the chosen policy's weight on each row: 1/μ where the choice was served, −inf where explored
    log_w = np.where(explored, -np.inf, -np.nan_to_num(logp, nan=0.0))
    frame = pd.DataFrame({"r": reward, "x": explored, "lw": log_w})
    by_episode = frame.groupby(live["episode_id"].to_numpy())
    returns, any_explored = by_episode["r"].sum(min_count=1), by_episode["x"].any()
    weights = np.exp(by_episode["lw"].sum().to_numpy())
    ok = np.isfinite(returns.to_numpy())
    v_all = float(returns[ok].mean()) if ok.any() else float("nan")
    w = weights[ok]
    v_chosen = float((w * returns.to_numpy()[ok]).sum() / w.sum()) if w.sum() > 0 else float("nan")
    cost = (v_chosen - v_all) / abs(v_chosen) if np.isfinite(v_chosen) and v_chosen != 0 else float("nan")
    return ExplorationCost(
        decisions=len(live),
        explored_decisions=int(explored.sum()),
        episodes=int(returns.size),
        explored_episodes=int(any_explored.sum()),
        return_all=v_all,
        return_chosen=v_chosen,
        cost_share=float(cost),
    )


__all__ = ["COLUMNS", "ExplorationCost", "exploration_cost"]
