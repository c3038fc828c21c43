"""Late outcomes in the simulated timeline: a reward component the business learns only some time
after the decision (the credit pack's ``loan_outcome``: a loan is repaid or defaults long after it
was approved).

The production world scores every component at decision time; an agent cannot. So the traced rows
leave the component out (of ``reward_total`` and ``reward_breakdown``), and each episode's amount
arrives ``delay`` after its last decision as an outcome through the SDK's ``Tracer.outcome``, as a
lender's back office would send it. An episode that scored nothing on the component (a declined
loan: nothing to settle) gets its outcome at once. The timeline's params map the outcome to the
component (``outcomes.rewards``), so until it arrives every read of the trace store counts the
episode as awaiting its outcome (``censored``) and the gates judge final returns only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from rlops.agent_sdk.tracer import Tracer


@dataclass(frozen=True)
class Settlement:
    """One episode's late outcome: when it arrives and what it is worth."""

    due: datetime
    episode_id: str
    value: float


@dataclass
class LateOutcomes:
    """The component that settles late, its delay, and the outcomes not yet sent."""

    component: str
    delay: timedelta
    pending: list[Settlement] = field(default_factory=list)
    sent: int = 0
    """outcomes handed to the tracer so far"""
    withheld_episodes: int = 0
    """episodes whose component was left out of the traced rows"""

    def withhold(self, df: pd.DataFrame) -> pd.DataFrame:
        """``df`` as the agent traces it at decision time (a copy): the component's score is taken
        out of each row's ``reward_total`` and ``reward_breakdown``; each episode's sum of it is
        queued to arrive ``delay`` after the episode's last decision (at once when it is 0)."""
        import pandas as pd

        out = df.copy()
        if out.empty:
            return out
        parsed = [_without(raw, self.component) for raw in out["reward_breakdown"].to_numpy()]
        scores = np.array([score for _, score in parsed], dtype=np.float64)
        out["reward_breakdown"] = [text for text, _ in parsed]
        out["reward_total"] = pd.to_numeric(out["reward_total"], errors="coerce").to_numpy(np.float64) - scores
        per_episode = pd.DataFrame(
            {
                "episode": out["episode_id"].astype(str),
                "score": scores,
                "ts": pd.to_datetime(out["ts"], utc=True, format="ISO8601"),
            }
        ).groupby("episode", sort=False)
        value, last = per_episode["score"].sum(), per_episode["ts"].max()
        for episode, amount in value.items():
            settles_later = bool(amount != 0.0)
            due = last[episode].to_pydatetime() + (self.delay if settles_later else timedelta(0))
            self.pending.append(Settlement(due, str(episode), float(amount)))
            self.withheld_episodes += int(settles_later)
        self.pending.sort(key=lambda s: s.due)
        return out

    def deliver(self, tracer: Tracer, scenario: str, until: datetime) -> int:
        """Send every outcome due before ``until`` through ``tracer`` (``Tracer.outcome``, stamped
        with its due time); returns how many were sent."""
        due = [s for s in self.pending if s.due < until]
        self.pending = self.pending[len(due) :]
        for s in due:
            value: dict[str, Any] = {self.component: s.value}  # a named value: params outcomes.rewards maps it
            tracer.outcome(s.episode_id, scenario=scenario, at=s.due, **value)
        self.sent += len(due)
        return len(due)

    def metrics(self) -> dict[str, Any]:
        """What the timeline's JSON reports of the late outcomes."""
        return {
            "component": self.component,
            "delay_h": self.delay.total_seconds() / 3600,
            "settling_episodes": self.withheld_episodes,
            "sent": self.sent,
            "pending": len(self.pending),
        }


def _without(raw: Any, component: str) -> tuple[str, float]:
    """A row's breakdown JSON without ``component``, and that component's score (0 when absent)."""
    doc = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    items = doc.get("breakdown") or []
    score = sum(float(i.get("score") or 0.0) for i in items if i.get("component") == component)
    if not score and not any(i.get("component") == component for i in items):
        return raw if isinstance(raw, str) else json.dumps(doc), 0.0
    kept = [i for i in items if i.get("component") != component]
    total = round(float(doc.get("total") or 0.0) - score, 6)
    return json.dumps({**doc, "total": total, "breakdown": kept}), score
