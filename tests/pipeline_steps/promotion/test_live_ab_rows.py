"""The live A/B gates read real rows: trace rows name their policy the way agents write them
(``credit_approval-policy/7``, the client's ``champion``/``challenger`` groups, the simulator's
``control``; before a first champion, the client's rule-engine ``fallback`` rows with reason
``no_champion``), go through the landing zone and capture, and the ``ab:`` gates then run."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.sandbox.pack import Pack

RUN_KEY = "20261130T0500"


def _land(
    ctx: StepContext, pack: Pack, version: str, group: str, seed: int, episodes: int, fallback_reason: str | None = None
) -> int:
    from rlops.sandbox.traces import rollout_traces
    from rlops.timeline.world import SimTracer, no_policy_fallback

    start = ctx.key.start
    df = rollout_traces(
        pack,
        no_policy_fallback,
        episodes,
        seed=seed,
        profile="live",
        reward_fn="v1",
        policy_version=version,
        source="live",
        start_ts=start,
        test_group=group,
        episode_prefix=f"{ctx.scenario}-prod-{group}-{seed}",
    )
    if fallback_reason is not None:  # the rule engine answered, as the policy client records it
        df["fallback"], df["fallback_reason"] = True, fallback_reason
    tracer = SimTracer(ctx.traces.landing_uri)
    tracer.clock = start + timedelta(seconds=1 + seed % 7)
    for rec in json.loads(df.to_json(orient="records")):
        tracer.record(rec)
    tracer.flush()
    return len(df)


@pytest.mark.parametrize("control_group", ["champion", "control"])
def test_ab_gates_run_on_rows_as_agents_write_them(rlops_home: Path, control_group: str) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.evaluate_live import live_ab_gates
    from rlops.pipeline_steps.promotion.gates import GateConfig

    ctx = StepContext.create("credit_approval", RUN_KEY)
    pack = ctx.load_pack(calibration=None)
    rows = _land(ctx, pack, "credit_approval-policy/7", "challenger", 1, 250)
    rows += _land(ctx, pack, "credit_approval-policy/6", control_group, 5000, 250)
    res = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()
    assert res["rows_accepted"] + res["rows_quarantined"] == rows and res["rows_accepted"] > 0

    cfg = GateConfig(ab_min_episodes=200)
    for candidate in ("7", "v7", "credit_approval-policy/7"):
        gates, note = live_ab_gates(ctx, pack, candidate, cfg, window_hours=1)
        names = {g.gate for g in gates}
        assert {"ab:completion_rate", "ab:human_takeover_rate", "ab:handling_ms"} <= names, note
        assert not any(g.skipped for g in gates), note
        assert note.startswith("250 challenger / 250 control"), note
    # Another version's traffic is not this candidate's evidence.
    gates, note = live_ab_gates(ctx, pack, "8", cfg, window_hours=1)
    assert gates == [] and "no live A/B traffic" in note


@pytest.mark.parametrize(
    ("reason", "judged"),
    [("no_champion: credit_approval-policy has no champion alias yet", True), ("timeout: over 50 ms", False)],
    ids=["no-champion", "timeout"],
)
def test_a_first_challenger_is_judged_against_the_rule_engine_served_for_want_of_a_champion(
    rlops_home: Path, reason: str, judged: bool
) -> None:
    """Before a pack's first champion the policy client serves every request but the challenger's
    share with the rule engine (group ``fallback``, reason ``no_champion``): that is the incumbent's
    traffic, the control of the first challenger's live A/B, without which its roll-out would wait
    for a control group that never comes. A rule-engine answer for another reason is no control."""
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.promotion.evaluate_live import live_ab_gates
    from rlops.pipeline_steps.promotion.gates import GateConfig

    ctx = StepContext.create("credit_approval", RUN_KEY)
    pack = ctx.load_pack(calibration=None)
    rows = _land(ctx, pack, "credit_approval-policy/1", "challenger", 1, 250)
    rows += _land(ctx, pack, "rules", "fallback", 5000, 250, fallback_reason=reason)
    res = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()
    assert res["rows_accepted"] == rows

    gates, note = live_ab_gates(ctx, pack, "1", GateConfig(ab_min_episodes=200), window_hours=1)
    if judged:
        assert {"ab:completion_rate", "ab:human_takeover_rate", "ab:handling_ms"} <= {g.gate for g in gates}, note
        assert not any(g.skipped for g in gates) and note.startswith("250 challenger / 250 control"), note
    else:
        assert gates == [] and "no live A/B traffic for this candidate" in note, note
