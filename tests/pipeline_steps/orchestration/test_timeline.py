"""The simulated production timeline end to end, at a budget the default suite can afford:
two simulated hours of the credit pack, the applicant population ageing and a deliberately worse
candidate offered in the second hour. The pack's DAGs through ``dag.test()``, real PPO, real registry.

What it pins: every landing-zone row is accepted or quarantined (none lost); the first hour's
alarm is the initial calibration (an uncalibrated sandbox is not live), the ageing is detected
by the next hourly check (delay <= 1 h) and triggers one emergency retrain; the worse candidate is
not promoted; traffic was served through the PolicyClient (rules, then the champion); the PNG and
JSON exist and are logged to MLflow. The 48-hour version is ``bench/loop_days.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlops.pipeline_steps.orchestration.events import parse_events
from rlops.pipeline_steps.orchestration.simulate import run_timeline
from rlops.pipeline_steps.orchestration.timeline import TimelineConfig

EVENTS = [
    {"at_hour": 1, "kind": "population", "init": {"user_profile.age": {"dist": "normal", "mean": 58, "std": 10}}},
    {"at_hour": 1.5, "kind": "bad_candidate"},
]


def test_two_simulated_hours_detect_the_ageing_and_refuse_the_bad_candidate(airflow_db: str, tmp_path: Path) -> None:
    cfg = TimelineConfig(hours=2, episodes_per_tick=100, full_timesteps=20_000, eval_episodes=400)
    res = run_timeline(cfg, parse_events(EVENTS), tmp_path / "timeline")
    m = res["metrics"]
    assert m["rows_lost"] == 0 and m["rows"]["landing"] > 0
    assert m["detection_delay_h"] == [1.0], res["hours"]
    assert m["false_alarms"] == 0
    assert m["emergency_retrains"] <= m["drift_events"] + 1
    assert m["bad_candidate_promoted"] is False and m["champion_regressions"] == 0
    first, second = res["hours"]
    assert first["alarm"] and "recalibrated" in first["actions"]
    assert "state.user_profile.age" in second["drifted"]
    assert any(a.startswith("bad candidate") and a.endswith("rejected") for a in second["actions"])
    assert m["dag_runs"] >= 2 * 4 + 2  # capture and roll-out every quarter, drift every hour: the DAGs ran
    # regret: the oracle and the rule engine scored on the same live episodes every hour
    assert all(h["oracle_return"] is not None and h["oracle_return"] >= h["rules_return"] for h in res["hours"])
    assert first["regret"] == first["oracle_return"] - first["live_return"]
    assert abs(first["rules_return"] - first["live_return"]) < 1e-4  # the rule engine served the first hour
    assert "h1 population (user_profile.age)" in m["recovery_h"] and m["mean_regret"] is not None
    assert Path(res["png"]).stat().st_size > 10_000
    doc = json.loads(Path(res["json"]).read_text())
    assert doc["metrics"]["rows_lost"] == 0 and len(doc["hours"]) == 2
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'timeline' / 'mlflow.db'}")
    assert {a.path for a in client.list_artifacts(res["run_id"])} == {"timeline.png", "timeline.json"}
