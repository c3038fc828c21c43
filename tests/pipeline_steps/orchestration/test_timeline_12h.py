"""Twelve simulated hours of the credit pack with the four standard events scaled into them —
the applicant population ages at hour 3, the credit bureau's latency triples at hour 5, its error
rate jumps at hour 7, a deliberately worse candidate is offered at hour 9 — asserting what
``bench/loop_days.py`` measures over 48 hours: each drift event alarms within the hour, no alarm
in a stable hour once calibrated, at most one emergency retrain per drift event (plus the first
calibration), the worse candidate refused, no promotion that made live return fall, no
landing-zone row lost; and production traffic went through the policy client's fallback (the
rule engine before the first champion) and its challenger split: the first policy rolls out
staged, moved 5% → 15% → 100% by the roll-out DAG on live A/B gates that ran on real rows, and the
client served each alias move within a minute of simulated time. Everything runs through the
pack's DAG definitions (``dag.test()`` at each due interval): about 14 DAG runs per simulated hour, so this
runs for tens of minutes; it carries the ``soak`` marker (``pytest -m soak``), outside the default and slow suites.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlops.pipeline_steps.orchestration.events import parse_events
from rlops.pipeline_steps.orchestration.simulate import run_timeline
from rlops.pipeline_steps.orchestration.timeline import TimelineConfig

AGEING = {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}
EVENTS = [
    {"at_hour": 3, "kind": "population", "init": AGEING},
    {"at_hour": 5, "kind": "latency", "action": "fetch_credit_report", "factor": 3},
    {"at_hour": 7, "kind": "error_rate", "api": "credit_bureau", "rate": 0.25},
    {"at_hour": 9, "kind": "bad_candidate"},
]


@pytest.mark.soak
def test_twelve_simulated_hours_hold_the_loop_properties(airflow_db: str, tmp_path: Path) -> None:
    cfg = TimelineConfig(hours=12)
    res = run_timeline(cfg, parse_events(EVENTS), tmp_path / "timeline")
    m, hours = res["metrics"], res["hours"]
    table = [(h["hour"], h["alarm"], h["drifted"], h["actions"]) for h in hours]
    assert m["detection_delay_h"] == [1.0, 1.0, 1.0], table
    assert m["false_alarms"] == 0, table
    assert m["emergency_retrains"] <= m["drift_events"] + 1, table
    assert m["bad_candidate_promoted"] is False and m["champion_regressions"] == 0, table
    assert m["rows_lost"] == 0 and m["rows"]["landing"] > 0
    assert m["fallback_episodes"] > 0 and m["challenger_episodes"] > 0, table
    assert any("challenger at" in a for h in hours for a in h["actions"]), table
    assert m["stage_moves"] >= 2 and m["ab_gates_run"] > 0, table
    assert m["promotion_to_agent_s"] is not None and m["promotion_to_agent_s"] <= 60
