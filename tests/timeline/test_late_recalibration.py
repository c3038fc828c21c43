"""The drift monitor recalibrates from the hour it checked (the store's partition of that hour). With
the loan outcome arriving an hour late, that hour's own rows carry no loan outcome yet: the outcome
factors must be fitted on the episodes whose outcome arrived in it, or the sandbox never learns that
older applicants now default 2.5 times as often."""

from __future__ import annotations

import json
import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.capture.request import CaptureRequest
from rlops.pipeline_steps.capture.step import capture_step
from rlops.pipeline_steps.drift.calibrate import recalibrate
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest
from rlops.pipeline_steps.outcomes.step import capture_outcomes
from rlops.sandbox.pack import load_pack
from rlops.sandbox.policies import rule_policy
from rlops.sandbox.traces import rollout_traces
from rlops.timeline.events import parse_events, production_doc
from rlops.timeline.late_outcomes import LateOutcomes
from rlops.timeline.world import SimTracer

SCENARIO = "credit_approval"
OVERRIDES = {
    "capture": {"track": False},
    "outcomes": {"rewards": {"loan_outcome": {"component": "loan_outcome"}}},
}
OLDER_DEFAULT = {"at_hour": 0, "kind": "outcome", "field": "hidden.default_prob", "factor": 2.5}


def _world(tmp: Path) -> Any:
    doc = yaml.safe_load((REPO_ROOT / "scenarios" / SCENARIO / "scenario.yaml").read_text())
    event = {**OLDER_DEFAULT, "when": "user_profile.age >= 60"}
    folder = tmp / "production"
    shutil.copytree(REPO_ROOT / "scenarios" / SCENARIO, folder)
    (folder / "scenario.yaml").write_text(yaml.safe_dump(production_doc(doc, parse_events([event])), sort_keys=False))
    return load_pack(folder, check_liveness=False)


def test_the_hour_s_recalibration_fits_the_outcomes_that_arrived_in_it(tmp_tracking: str, tmp_path: Path) -> None:
    world = _world(tmp_path)
    first = StepContext.create(SCENARIO, "20260105T1000", overrides=OVERRIDES)
    second = StepContext.create(SCENARIO, "20260105T1100", overrides=OVERRIDES)
    late = LateOutcomes("loan_outcome", timedelta(hours=1))
    tracer = SimTracer(first.traces.landing_uri)
    for i, ctx in enumerate((first, second)):
        start = ctx.key.start
        df = rollout_traces(
            world, rule_policy, 4000, seed=i, profile="live", reward_fn="v1", source="live", start_ts=start,
            episode_prefix=f"{SCENARIO}-{i}",
        )  # fmt: skip
        tracer.clock = start + timedelta(seconds=1)
        for rec in json.loads(late.withhold(df).to_json(orient="records")):
            tracer.record(rec)
        late.deliver(tracer, SCENARIO, until=ctx.key.end)
        tracer.flush()
        capture_step(ctx, CaptureRequest())
        capture_outcomes(ctx, OutcomeCaptureRequest())
    hour = f"{second.traces.scenario_uri(SCENARIO)}/date=2026-01-05/hour=11"
    recalibrate(second, traces_uri=hour)
    cal = second.storage.read_json(second.uri("calibrations", SCENARIO, "20260105T1100.json"))
    fits = (cal.get("outcomes") or {}).get("hidden.default_prob") or []
    older = [f for f in fits if "age" in str(f.get("when"))]
    assert older and older[0]["factor"] == pytest.approx(2.5, rel=0.35), fits
