"""The trace capture DAG stores the late outcomes agents landed in its interval (``Tracer.outcome``):
after the interval's traces, even when the interval had no trace to capture; an interval none of
whose outcome records could be accepted fails its task with the reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT

SCENARIO = "credit_approval"


def _params(home: Path) -> None:
    path = home / "params.yaml"
    params = yaml.safe_load(path.read_text())
    params["capture"].update(simulate_when_empty=False, track=False)
    params["outcomes"] = {"rewards": {"default": {"component": "loan_loss", "weight": -5.0}}}
    path.write_text(yaml.safe_dump(params))


def _next_quarter(now: datetime) -> datetime:
    """The end of the 15-minute interval ``now`` is in: the logical date of the run that owns it."""
    return now.replace(minute=now.minute - now.minute % 15, second=0, microsecond=0) + timedelta(minutes=15)


def _captured_episodes(day_before: datetime) -> list[str]:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext

    ctx = StepContext.create(SCENARIO, day_before.strftime("%Y%m%dT%H00"))
    capture_step(ctx, CaptureRequest(simulate=True, episodes=40))
    rows = ctx.traces.reader.read(ctx.traces.scenario_uri(SCENARIO), columns=["episode_id"])
    return sorted(set(rows["episode_id"]))


def _land_outcomes(episodes: list[str], at: datetime) -> None:
    from rlops.agent_sdk.tracer import Tracer
    from rlops.pipeline_steps.infra.context import StepContext

    tracer = Tracer(StepContext.create(SCENARIO).traces.landing_uri, flush_interval_s=None)
    for episode in episodes:
        tracer.outcome(episode, scenario=SCENARIO, at=at, default=1)
    tracer.flush()
    tracer.close()


def test_the_capture_dag_stores_the_outcomes_landed_in_its_interval(airflow_db: str, rlops_home: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    from rlops.pipeline_steps.infra.context import StepContext

    _params(rlops_home)
    now = datetime.now(UTC)
    episodes = _captured_episodes(now - timedelta(days=1))
    _land_outcomes([*episodes[:5], "nobody-1"], now)
    dag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "trace_capture.py")).dags[f"trace_capture__{SCENARIO}"]
    run = dag.test(logical_date=_next_quarter(now))
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    # no trace landed in the interval: capture is skipped, the outcomes are still stored
    assert str(run.state) == "success" and states["capture"] == "skipped", states
    assert states["capture_outcomes"] == "success", states
    ti = next(ti for ti in run.get_task_instances() if ti.task_id == "capture_outcomes")
    out: dict[str, Any] = ti.xcom_pull(task_ids="capture_outcomes")
    assert (out["records_in"], out["records_accepted"], out["records_quarantined"]) == (6, 5, 1)
    assert out["quarantine_reasons"] == {"unknown_episode": 1}
    rows = StepContext.create(SCENARIO).traces.read(SCENARIO)
    joined = set(rows.loc[rows["outcome_status"] == "joined", "episode_id"])
    assert joined == set(episodes[:5])


def test_an_interval_whose_every_outcome_is_refused_fails_the_task(rlops_home: Path) -> None:
    from rlops.common.errors import UserError
    from rlops.pipeline_steps.orchestration import run_conf, tasks

    _params(rlops_home)
    now = datetime.now(UTC)
    _captured_episodes(now - timedelta(days=1))
    _land_outcomes(["nobody-1", "nobody-2"], now)
    quarter = _next_quarter(now)
    conf = run_conf.validate_conf(
        {"scenario": SCENARIO, "reward_fn": "v1", "timesteps": 5000, "mode": "full", "dry_run": False},
        {"run_id": "t", "logical_date": quarter, "data_interval_start": quarter - timedelta(minutes=15),
         "data_interval_end": quarter},
        interval_minutes=15,
    )  # fmt: skip
    with pytest.raises(UserError, match=r"none of 2 record\(s\) was accepted \(unknown_episode: 2\)"):
        tasks.capture_outcomes(conf)
    empty = {**conf, "run_key": (quarter - timedelta(hours=3)).strftime("%Y%m%dT%H%M") + "-15m"}
    assert tasks.capture_outcomes(empty)["records_in"] == 0  # no lines landed: nothing to store (skipped in a DAG)
