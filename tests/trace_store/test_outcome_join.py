"""Outcomes joined into returns, on cases small enough to check by hand, and the outcome store's upsert."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rlops.storage.backend import Storage
from rlops.trace_store.outcome_join import episode_returns, join_outcomes, outcome_rewards, settled
from rlops.trace_store.outcomes import STORE_SCHEMA, OutcomeRules, OutcomeStore

T0 = datetime(2026, 1, 5, 10, tzinfo=UTC)
RULES = OutcomeRules(timedelta(days=180), {"default": ("loan_loss", -5.0)}, frozenset({"approve"}))


def traces() -> pd.DataFrame:
    """Three two-step episodes: a approved (reward 1 + 2), b approved (0.5 + 0.5), c rejected (1 + 0)."""
    rows = []
    for ep, (r0, r1), last in [("a", (1.0, 2.0), "approve"), ("b", (0.5, 0.5), "approve"), ("c", (1.0, 0.0), "reject")]:
        rows += [
            {"episode_id": ep, "step": 0, "ts": T0, "action": "screen", "reward_total": r0},
            {"episode_id": ep, "step": 1, "ts": T0 + timedelta(minutes=1), "action": last, "reward_total": r1},
        ]
    return pd.DataFrame(rows)


def outcomes(*rows: tuple[str, str, str, float, datetime]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["episode_id", "kind", "name", "value", "ts"]).assign(
        ts=lambda d: pd.to_datetime(d["ts"], utc=True)
    )


def test_a_default_costs_its_weight_on_the_last_step_and_components_count_as_they_are() -> None:
    later = T0 + timedelta(days=90)
    stored = outcomes(("a", "values", "default", 1.0, later), ("a", "components", "fees", 0.25, later))
    joined = join_outcomes(traces(), stored, RULES, as_of=later)
    assert joined["reward_total"].tolist() == [1.0, 2.0 - 5.0 + 0.25, 0.5, 0.5, 1.0, 0.0]
    assert joined["outcome_reward"].fillna(0).tolist() == [0, -4.75, 0, 0, 0, 0]
    assert joined["outcome_status"].tolist() == ["joined"] * 2 + ["censored"] * 2 + ["none"] * 2
    summary = episode_returns(joined)
    # b still awaits its outcome: counted, left out of the returns (a: -1.75, c: 1.0)
    assert (summary.episodes, summary.joined, summary.censored, summary.closed) == (3, 1, 1, 0)
    assert sorted(summary.returns.tolist()) == [-1.75, 1.0] and summary.mean == pytest.approx(-0.375)


def test_the_outcome_s_components_are_merged_into_the_last_step_s_breakdown() -> None:
    """a's default (-5 of loan_loss, which its decision-time breakdown already holds at -1) and an
    explicit fees component (new): the scores add, the new one is listed, the total moves; b waits."""
    later = T0 + timedelta(days=90)
    frame = traces().assign(reward_breakdown=None)
    frame.loc[1, "reward_breakdown"] = json.dumps(
        {"total": 2.0, "breakdown": [{"component": "loan_loss", "score": -1.0, "reason": "r", "rule_ref": "x"}]}
    )
    stored = outcomes(("a", "values", "default", 1.0, later), ("a", "components", "fees", 0.25, later))
    joined = join_outcomes(frame, stored, RULES, as_of=later)
    doc = json.loads(joined.loc[1, "reward_breakdown"])
    assert doc["total"] == pytest.approx(2.0 - 5.0 + 0.25)
    assert {i["component"]: i["score"] for i in doc["breakdown"]} == {"loan_loss": -6.0, "fees": 0.25}
    assert pd.isna(joined.loc[0, "reward_breakdown"]) and pd.isna(joined.loc[3, "reward_breakdown"])  # untouched
    # the rows whose return is final: a (joined) and c (awaits nothing); b's are left out
    assert sorted(set(settled(joined)["episode_id"])) == ["a", "c"]


def test_an_outcome_is_joined_only_once_it_happened_and_a_window_closes() -> None:
    stored = outcomes(("a", "values", "default", 1.0, T0 + timedelta(days=90)))
    early = join_outcomes(traces(), stored, RULES, as_of=T0 + timedelta(days=30))
    assert early["outcome_status"].tolist()[:4] == ["censored"] * 4 and early["reward_total"].sum() == 5.0
    late = join_outcomes(traces(), stored, RULES, as_of=T0 + timedelta(days=181))
    assert late["outcome_status"].tolist()[:4] == ["joined", "joined", "closed", "closed"]
    assert episode_returns(late).returns.tolist() == [-2.0, 1.0, 1.0]


def test_without_a_mapping_nothing_is_awaited_and_unmapped_values_add_nothing() -> None:
    stored = outcomes(("b", "values", "clicks", 3.0, T0))
    joined = join_outcomes(traces(), stored, OutcomeRules(), as_of=T0 + timedelta(days=1))
    assert joined["reward_total"].tolist() == traces()["reward_total"].tolist()
    assert set(joined["outcome_status"]) == {"joined", "none"}
    assert outcome_rewards(stored, OutcomeRules()).to_dict() == {"b": 0.0}


def test_a_missing_reward_on_the_last_step_takes_the_outcome() -> None:
    frame = traces()
    frame.loc[1, "reward_total"] = np.nan
    joined = join_outcomes(frame, outcomes(("a", "values", "default", 1.0, T0)), RULES, as_of=T0 + timedelta(days=1))
    assert joined.loc[1, "reward_total"] == -5.0


def row(episode: str, name: str, value: float, days: int = 90) -> dict[str, object]:
    return {
        "scenario": "s",
        "episode_id": episode,
        "kind": "values",
        "name": name,
        "value": value,
        "ts": pd.Timestamp(T0 + timedelta(days=days)),
        "decision_ts": pd.Timestamp(T0),
        "source_uri": "f",
    }


def test_upsert_adds_keeps_and_replaces(tmp_path: Path) -> None:
    store = OutcomeStore(Storage(f"file://{tmp_path}"), f"file://{tmp_path}/outcomes", f"file://{tmp_path}/q")
    first = pd.DataFrame([row("a", "default", 1.0), row("b", "default", 0.0)])
    wrote = store.upsert("s", first)
    assert (wrote.added, wrote.unchanged, wrote.replaced, len(wrote.partitions)) == (2, 0, 0, 1)
    again = store.upsert("s", first)
    assert (again.added, again.unchanged, again.replaced, again.partitions) == (0, 2, 0, [])
    changed = store.upsert("s", pd.DataFrame([row("b", "default", 1.0), row("c", "default", 0.0)]))
    assert (changed.added, changed.unchanged, changed.replaced) == (1, 0, 1)
    assert changed.replacements[0]["old_value"] == 0.0 and changed.replacements[0]["new_value"] == 1.0
    stored = store.read("s").sort_values("episode_id")
    assert stored["value"].tolist() == [1.0, 1.0, 0.0] and list(stored.columns) == STORE_SCHEMA.names
