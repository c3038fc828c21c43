"""The timeline's late outcomes on a tiny hand-checkable frame: the component leaves the traced
rows, each episode's amount is sent once, when due, through ``Tracer.outcome``; and the roll-out's
regression check compares final returns only."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pandas as pd

from rlops.agent_sdk.tracer import Tracer
from rlops.pipeline_steps.promotion.rollout import live_returns
from rlops.timeline.late_outcomes import LateOutcomes

T0 = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)


def _breakdown(**scores: float) -> str:
    items = [{"component": name, "score": score, "reason": name, "rule_ref": None} for name, score in scores.items()]
    return json.dumps({"total": round(sum(scores.values()), 6), "breakdown": items})


def _frame() -> pd.DataFrame:
    """Episode a: approved, the loan repays (+1.0) on its last step; episode b: declined (no loan
    outcome at all)."""
    rows = [
        ("a", 0, T0, -0.1, _breakdown(handling_time=-0.1)),
        ("a", 1, T0 + timedelta(seconds=5), 1.05, _breakdown(loan_outcome=1.0, notified=0.1, handling_time=-0.05)),
        ("b", 0, T0, -0.1, _breakdown(handling_time=-0.1)),
        ("b", 1, T0 + timedelta(seconds=3), 0.05, _breakdown(notified=0.1, handling_time=-0.05)),
    ]
    return pd.DataFrame(rows, columns=["episode_id", "step", "ts", "reward_total", "reward_breakdown"])


def test_the_component_leaves_the_traced_rows_and_waits_for_its_outcome() -> None:
    late = LateOutcomes("loan_outcome", timedelta(hours=1))
    world = _frame()
    traced = late.withhold(world)
    assert traced["reward_total"].round(6).tolist() == [-0.1, 0.05, -0.1, 0.05]
    assert world["reward_total"].tolist()[1] == 1.05  # the world's frame is left as it was
    last = json.loads(traced["reward_breakdown"][1])
    assert [i["component"] for i in last["breakdown"]] == ["notified", "handling_time"] and last["total"] == 0.05
    assert traced["reward_breakdown"][3] == world["reward_breakdown"][3]  # nothing to withhold: unchanged
    # a repays one hour after its last decision; b, declined, settles at once with nothing
    due = {(s.episode_id, s.due, s.value) for s in late.pending}
    assert due == {("a", T0 + timedelta(hours=1, seconds=5), 1.0), ("b", T0 + timedelta(seconds=3), 0.0)}
    assert late.withheld_episodes == 1


def test_outcomes_are_sent_once_when_due(tmp_path: Path) -> None:
    late = LateOutcomes("loan_outcome", timedelta(hours=1))
    late.withhold(_frame())
    tracer = Tracer(tmp_path.as_uri(), flush_interval_s=None)
    assert late.deliver(tracer, "credit_approval", until=T0 + timedelta(minutes=15)) == 1  # b only
    assert late.deliver(tracer, "credit_approval", until=T0 + timedelta(minutes=15)) == 0
    assert late.deliver(tracer, "credit_approval", until=T0 + timedelta(hours=2)) == 1  # a, an hour later
    written = tracer.flush()
    files = [Path(unquote(uri.removeprefix("file://"))) for uri in written]
    lines = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    by_episode = {r["episode_id"]: r for r in lines}
    assert by_episode["a"]["values"] == {"loan_outcome": 1.0}
    assert by_episode["a"]["ts"] == (T0 + timedelta(hours=1, seconds=5)).isoformat()
    assert by_episode["b"]["values"] == {"loan_outcome": 0.0} and len(lines) == 2
    assert late.metrics() == {
        "component": "loan_outcome",
        "delay_h": 1.0,
        "settling_episodes": 1,
        "sent": 2,
        "pending": 0,
    }


def test_the_regression_check_compares_final_returns_only() -> None:
    """v2's recent episodes await their loan outcome (their decision-time return lacks it); v1's older
    ones have it joined. Counting the waiting ones would show v2 as a regression of 1.0."""
    rows = []
    for i in range(4):
        rows.append(("1", f"old-{i}", 1.1, "joined"))
        rows.append(("2", f"new-{i}", 1.1 if i < 2 else 0.1, "joined" if i < 2 else "censored"))
    traces = pd.DataFrame(rows, columns=["policy_version", "episode_id", "reward_total", "outcome_status"])
    returns = live_returns(traces, "credit_approval")
    assert returns["1"].tolist() == [1.1] * 4
    assert returns["2"].tolist() == [1.1, 1.1]  # the two waiting episodes are left out


def test_the_command_shows_the_timeline_s_own_delay_default() -> None:
    """``rlops simulate`` states the default without importing the timeline (torch) at parse time:
    the two must agree."""
    from rlops.commands.simulate import TimelineDefaults
    from rlops.timeline.world import TimelineConfig

    assert TimelineDefaults.outcome_delay_hours == TimelineConfig.outcome_delay_hours
