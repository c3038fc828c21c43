"""Roll-out by segment through the DAGs: ``evaluate.rollout_stages`` serves the challenger to one
region, then to three, then makes it champion, each stage judged by the live A/B gates on its own
segment's episodes; a challenger whose segment gate fails is withdrawn. The traffic is routed as
production routes it: each episode by the policy client from its request key and its state, traced
into the landing zone and captured; rows of other segments never carry the challenger. (Both groups'
decisions are made by the same stand-in network, so that the gates judge what serving adds: a
challenger slow in its segment.)"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from rlops.common.config import REPO_ROOT
from tests.policy_kit import NAME, approve_all, good, pack, register  # noqa: F401  (fixtures)

GUANGDONG = "user_profile.region == 'guangdong'"
EAST = "user_profile.region in ['jiangsu', 'zhejiang', 'shanghai']"
T0 = datetime(2026, 11, 30, 5, 0, tzinfo=UTC)  # the end of the hour the candidate is staged in
EPISODES = 1500  # per hour: about 180 in Guangdong, 300 in the three provinces


@pytest.fixture()
def segment_home(rlops_home: Path) -> Path:
    """The test project with a roll-out by region."""
    f = rlops_home / "params.yaml"
    params = yaml.safe_load(f.read_text())
    params["evaluate"].update(
        rollout_stages=[{"segment": GUANGDONG, "share": 1.0}, {"segment": EAST, "share": 1.0}, 1.0],
        require_stress_test=False,
        ab_min_episodes=100,
    )
    f.write_text(yaml.safe_dump(params))
    return rlops_home


def _rollout_dag(when: datetime) -> dict[str, Any]:
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(REPO_ROOT / "dags" / "rollout.py"))
    assert bag.import_errors == {}
    run = bag.dags["rollout__credit_approval"].test(logical_date=when, run_conf={"reward_fn": "v1", "dry_run": False})
    ti = next(t for t in run.get_task_instances() if t.task_id == "advance_or_roll_back")
    assert str(run.state) == "success", {t.task_id: t.state for t in run.get_task_instances()}
    return ti.xcom_pull(task_ids="advance_or_roll_back")


def _serve_hour(ctx: Any, pack: Any, nets: dict[str, Any], slow_challenger: bool = False) -> pd.DataFrame:
    """An hour of production traffic: every episode routed by the policy client (request key and
    state), decided by the version it was routed to, traced and captured. Returns the rows."""
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.policy_loader import greedy_act
    from rlops.sandbox.traces import rollout_traces
    from rlops.timeline.world import SimTracer

    client = PolicyClient(ctx.config.tracking.uri, "credit_approval", ctx.pack_dir, refresh_every_s=None)
    client.refresh()
    versions = client.serving.versions
    seed = int(ctx.key.start.timestamp()) // 3600
    # Both versions play the same seeded episodes (an episode's initial state is its seed's); each
    # episode keeps the rows of the version the client routes it to.
    frames = {
        group: rollout_traces(
            pack,
            greedy_act(nets[group]),
            EPISODES,
            seed=seed,
            profile="live",
            reward_fn="v1",
            policy_version=f"{NAME}/{versions[group]}",
            source="live",
            start_ts=ctx.key.start,
            test_group=group,
            episode_prefix=f"prod-{ctx.run_key}",
        )
        for group in ("champion", "challenger")
        if versions[group] is not None
    }
    first = frames["champion"].drop_duplicates("episode_id")
    route = {
        ep: client.route(ep, {k: v for k, v in row.items() if k.startswith("state.") and pd.notna(v)})
        for ep, row in zip(first["episode_id"], first.to_dict("records"))
    }
    client.close()
    rows = pd.concat([df[df["episode_id"].map(route).eq(group)] for group, df in frames.items()], ignore_index=True)
    if slow_challenger:  # the challenger's decisions are three times as slow where it serves
        ch = rows["test_group"].eq("challenger")
        rows.loc[ch, "latency_ms"] = rows.loc[ch, "latency_ms"] * 3
    tracer = SimTracer(ctx.traces.landing_uri)
    tracer.clock = ctx.key.start + timedelta(minutes=5)
    for rec in json.loads(rows.to_json(orient="records")):
        tracer.record(rec)
    tracer.flush()
    out = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()
    assert out["rows_in"] == out["rows_accepted"] == len(rows)
    return rows


def _regions(rows: pd.DataFrame, group: str) -> set[str]:
    return set(rows.loc[rows["test_group"].eq(group), "state.user_profile.region"])


@pytest.mark.slow  # minutes: four hours of traffic, three roll-out DAG runs
def test_a_challenger_rolls_out_region_by_region(
    airflow_db: str, segment_home: Path, pack: Any, good: Any, approve_all: Any
) -> None:  # noqa: F811
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.alias_moves import stage_challenger
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.pipeline_steps.promotion.stages import rollout_plan
    from rlops.registry.aliases import move_champion

    def ctx_at(hour: int) -> Any:
        return StepContext.create("credit_approval", (T0 + timedelta(hours=hour - 1)).strftime("%Y%m%dT%H%M"))

    first = ctx_at(0)
    old = register(first, pack, approve_all)  # a champion the candidate beats in the sandbox
    move_champion(first.tracker, NAME, old)
    _serve_hour(first, pack, {"champion": good})  # the hour before the roll-out: the champion everywhere
    cand = register(first, pack, good)
    res = promote(first, cand, staged=True)  # what a retrain does with a passing candidate
    assert res.action == "challenger" and res.traffic_segment == GUANGDONG, res.reason
    tags = first.tracker.model_version_tags(NAME, cand)
    assert (tags["traffic_segment"], tags["traffic_fraction"], tags["rlops.rollout.stage"]) == (GUANGDONG, "1.0", "0")

    # Stage 1: Guangdong only. Its challenger episodes are judged against Guangdong's champion
    # episodes of the hour before (the stage serves all of Guangdong).
    rows = _serve_hour(ctx_at(1), pack, {"champion": good, "challenger": good})
    assert _regions(rows, "challenger") == {"guangdong"}
    assert "guangdong" not in _regions(rows, "champion")  # share 1.0: all of Guangdong, nobody else
    assert set(rows.loc[rows["test_group"].eq("challenger"), "policy_version"]) == {f"{NAME}/{cand}"}
    moved = _rollout_dag(T0 + timedelta(hours=1))
    assert moved["action"] == "advanced" and moved["traffic_segment"] == EAST, moved["reason"]
    assert "in segment user_profile.region == 'guangdong'" in moved["reason"]

    # Stage 2: the three provinces; Guangdong is the champion's again.
    rows = _serve_hour(ctx_at(2), pack, {"champion": good, "challenger": good})
    assert _regions(rows, "challenger") == {"jiangsu", "zhejiang", "shanghai"}
    assert _regions(rows, "champion") == {"guangdong", "other"}
    done = _rollout_dag(T0 + timedelta(hours=2))
    assert done["action"] == "finished" and done["champion"] == cand, done["reason"]
    assert first.tracker.aliases(NAME) == {"champion": cand, "previous": old}
    assert first.tracker.model_version_tags(NAME, cand)["traffic_segment"] == ""

    # A new challenger whose decisions are slow fails its segment's gate: withdrawn,
    # and no other region ever met it.
    nxt = register(first, pack, good)
    stage_challenger(ctx_at(2), nxt, 1.0, "staged by hand for the test", rollout_plan(first.config.evaluate)[0])
    rows = _serve_hour(ctx_at(3), pack, {"champion": good, "challenger": good}, slow_challenger=True)
    assert _regions(rows, "challenger") == {"guangdong"}
    out = _rollout_dag(T0 + timedelta(hours=3))
    assert out["action"] == "withdrawn" and "ab:handling_ms" in out["reason"], out["reason"]
    assert "segment user_profile.region == 'guangdong'" in out["reason"]
    assert first.tracker.aliases(NAME) == {"champion": cand, "previous": old}
    assert first.tracker.model_version_tags(NAME, nxt)["traffic_fraction"] == "0.0"
