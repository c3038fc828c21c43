"""Staged roll-out and rollback as the scheduler runs them: a retrain stages its candidate, the
roll-out step moves it 5 → 15 → 100 % on its live A/B gates (real trace rows through the landing
zone and capture), and rolls the champion back when its live return falls below the previous
champion's — each move recorded in MLflow with its reason."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from rlops.pipeline_steps.promotion.outcome import PromotionStatus
from rlops.registry.aliases import move_champion
from tests.policy_kit import NAME, approve_all, good, pack, promotion_ctx, promotion_sandbox, register  # noqa: F401  (fixtures)

pytestmark = pytest.mark.usefixtures("promotion_sandbox")
HOURS = ["20260105T1000", "20260105T1100", "20260105T1200", "20260105T1300", "20260105T1400"]


def _ctx(run_key: str) -> Any:
    ctx = promotion_ctx(run_key, ab_min_episodes=100)
    ctx.params["rollout"] = {**ctx.params.get("rollout", {}), "regression_min_episodes": 100}
    return ctx


def _serve(ctx: Any, pack: Any, served: dict[str, tuple[Any, str, int]], slow: str | None = None) -> None:
    """Traffic of the run key's hour: ``version → (trace policy, test group, episodes)``, written
    by the agent SDK's tracer into the landing zone and captured, as production would."""
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.sandbox.traces import rollout_traces
    from rlops.timeline.world import SimTracer

    tracer = SimTracer(ctx.traces.landing_uri)
    tracer.clock = ctx.key.start + timedelta(minutes=5)
    for i, (version, (policy, group, n)) in enumerate(served.items()):
        df = rollout_traces(
            pack,
            policy,
            n,
            seed=1000 * i + int(ctx.run_key[-4:-2]) * 10_000,
            profile="live",
            reward_fn="v1",
            policy_version=f"credit_approval-policy/{version}",
            source="live",
            start_ts=ctx.key.start,
            test_group=group,
            episode_prefix=f"{ctx.run_key}-{group}-{version}",
        )
        if version == slow:
            df["latency_ms"] = df["latency_ms"] * 3
        for rec in json.loads(df.to_json(orient="records")):
            tracer.record(rec)
    tracer.flush()
    capture_step(ctx, CaptureRequest(simulate=False))


def test_staged_rollout_then_rollback(pack: Any, good: Any, approve_all: Any) -> None:
    from rlops.pipeline_steps.infra.policy_loader import greedy_act
    from rlops.pipeline_steps.promotion.flow import promote
    from rlops.pipeline_steps.promotion.request import RolloutRequest
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    first = _ctx(HOURS[0])
    old = register(first, pack, approve_all)  # a champion the candidate beats in the sandbox
    move_champion(first.tracker, NAME, old)
    cand = register(first, pack, good)
    res = promote(first, cand, staged=True)  # what a retrain DAG does by default
    assert res.action == "challenger" and res.traffic_fraction == 0.05, res.reason
    assert res.status is PromotionStatus.STAGED and res.champion == old and not res.promoted
    rules_like = greedy_act(good)

    # The stage has not served its minimum time yet: hold.
    held = rollout_step(first)
    assert held.move.action == "held" and "minutes" in held.move.reason
    # The tick's request lays its options over params rollout: no minimum time, so the gates are
    # asked (and have no traffic yet).
    asked = rollout_step(first, RolloutRequest(min_stage_minutes=0))
    assert asked.move.action == "held" and "not judged yet" in asked.move.reason, asked.move.reason

    # An hour of traffic at 5 %: the live A/B gates run on it and pass → 15 %.
    ctx = _ctx(HOURS[1])
    _serve(ctx, pack, {cand: (rules_like, "challenger", 150), old: (rules_like, "champion", 300)})
    ctx.dry_run = True
    quick = rollout_step(ctx, RolloutRequest(min_stage_minutes=20))
    assert quick.move.action == "advanced" and "can become champion in 20 min" in quick.move.reason
    ctx.dry_run = False
    moved = rollout_step(ctx)
    assert moved.move.action == "advanced" and moved.move.traffic_fraction == 0.15, moved
    assert "can become champion in 60 min" in moved.move.reason, moved.move.reason
    assert {g["gate"] for g in moved.move.ab_gates} >= {"ab:completion_rate", "ab:handling_ms"}
    assert all(g["status"] == "pass" for g in moved.move.ab_gates)

    # Another hour at 15 % → finished: challenger → champion, old champion → previous. (Returns of
    # single credit episodes spread widely: thousands of episodes make a fall significant.)
    ctx = _ctx(HOURS[2])
    _serve(ctx, pack, {cand: (rules_like, "challenger", 500), old: (rules_like, "champion", 3000)})
    done = rollout_step(ctx)
    assert done.move.action == "finished" and done.champion == cand, done
    assert ctx.tracker.aliases(NAME) == {"champion": cand, "previous": old}

    # The new champion's live return falls far below the previous one's: rolled back.
    ctx = _ctx(HOURS[3])
    _serve(ctx, pack, {cand: (greedy_act(approve_all), "champion", 3000)})
    back = rollout_step(ctx)
    assert back.move.action == "rolled_back" and back.champion == old, back.move.reason
    assert ctx.tracker.aliases(NAME) == {"champion": old}
    tags = ctx.tracker.model_version_tags(NAME, cand)
    assert tags["rlops.rolled_back"] == "true" and "live return" in tags["rlops.rolled_back.reason"]

    # Every move is a rollout step run in MLflow with its action and reason.
    runs = ctx.tracker.client.search_runs([ctx.tracker.experiment_id], "tags.`rlops.step` = 'rollout'")
    assert sorted(r.data.tags["rlops.rollout.action"] for r in runs) == ["advanced", "finished", "rolled_back"]
    assert all(r.data.params["reason"] for r in runs)


def test_a_failing_live_gate_withdraws_the_challenger(pack: Any, good: Any) -> None:
    from rlops.pipeline_steps.infra.policy_loader import greedy_act
    from rlops.pipeline_steps.promotion.alias_moves import stage_challenger
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    first = _ctx(HOURS[0])
    old = register(first, pack, good)
    move_champion(first.tracker, NAME, old)
    cand = register(first, pack, good)
    stage_challenger(first, cand, 0.05, "staged by hand for the test")
    ctx = _ctx(HOURS[1])
    act = greedy_act(good)
    _serve(ctx, pack, {cand: (act, "challenger", 200), old: (act, "champion", 300)}, slow=cand)
    out = rollout_step(ctx)
    assert out.move.action == "withdrawn" and "ab:handling_ms" in out.move.reason, out
    assert ctx.tracker.aliases(NAME) == {"champion": old}
    assert "live A/B gate(s) failed" in ctx.tracker.model_version_tags(NAME, cand)["rlops.rollout.reason"]


def test_a_challenger_rlops_did_not_stage_is_withdrawn_unjudged(pack: Any, good: Any) -> None:
    """``challenger`` and ``traffic_fraction`` set by hand (the MLflow UI, no webhook): live rows
    that would pass every A/B gate must not make it champion — it never passed the offline gates."""
    from rlops.pipeline_steps.infra.policy_loader import greedy_act
    from rlops.pipeline_steps.promotion.rollout import rollout_step

    first = _ctx(HOURS[0])
    old = register(first, pack, good)
    move_champion(first.tracker, NAME, old)
    cand = register(first, pack, good)
    first.tracker.client.set_registered_model_alias(NAME, "challenger", cand)
    first.tracker.client.set_model_version_tag(NAME, cand, "traffic_fraction", "0.5")
    ctx = _ctx(HOURS[1])
    act = greedy_act(good)
    _serve(ctx, pack, {cand: (act, "challenger", 200), old: (act, "champion", 300)})
    out = rollout_step(ctx)
    assert out.move.action == "withdrawn" and out.champion == old, out
    assert "did not stage" in out.move.reason
    assert ctx.tracker.aliases(NAME) == {"champion": old}
    tags = ctx.tracker.model_version_tags(NAME, cand)
    assert float(tags["traffic_fraction"]) == 0.0 and "did not stage" in tags["rlops.rollout.reason"]
    assert tags["rlops.promotion.outcome"] == "withdrawn"
    runs = ctx.tracker.client.search_runs([ctx.tracker.experiment_id], "tags.`rlops.step` = 'rollout'")
    assert [r.data.tags["rlops.rollout.action"] for r in runs] == ["withdrawn"]
