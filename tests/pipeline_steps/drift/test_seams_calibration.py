"""Seams between capture, drift and recalibration, run as the scheduler runs them.

* ``test_drift_after_recalibration_is_quiet_on_latency_and_error`` caught: the drift baseline was
  rolled out in the plain ``sandbox`` profile, not the current calibration, and its ``error``
  column held ``False`` where live rows hold null — after a recalibration ``latency_ms`` and
  ``error`` were still flagged, so every hourly run asked for an emergency retrain.
* ``test_recalibration_never_edits_the_production_world_and_is_idempotent`` caught: fitted initial
  distributions were written into every profile, and ``live`` applied its population shift on
  top, so each recalibration aged the simulated production population again.
* ``test_calibration_reports_every_unfitted_field_and_refuses_worse_fits`` caught: fields whose
  parameters are expressions (and hidden ones) were left out without a word, and a fit that
  matched live worse was applied.
"""

from __future__ import annotations

import pytest
import torch

from rlops.pipeline_steps.drift.request import DriftCheckRequest
from rlops.pipeline_steps.infra.context import StepContext

SCENARIO = "credit_approval"
KEY = "20261130T0500"


@pytest.fixture()
def ctx(tmp_tracking: str, tmp_storage_root: str) -> StepContext:
    torch.set_num_threads(1)
    return StepContext.create(SCENARIO, KEY, overrides={"recalibrate": {"check_samples": 5000}})


def _live_capture(ctx: StepContext, episodes: int = 1500) -> dict:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    return capture_step(ctx, CaptureRequest(simulate=True, episodes=episodes, profile="live")).as_dict()


def test_drift_after_recalibration_is_quiet_on_latency_and_error(ctx: StepContext) -> None:
    from rlops.pipeline_steps.drift.calibrate import recalibrate
    from rlops.pipeline_steps.drift.check import drift_check

    cap = _live_capture(ctx)
    assert cap["source"] == "simulation:live" and cap["rows_accepted"] > 0
    before = drift_check(ctx, DriftCheckRequest(episodes=1500)).as_dict()
    assert "latency_ms" in before["drifted_fields"]  # the plain sandbox is not live
    recalibrate(ctx, traces_uri=before["target_uri"])
    after = drift_check(ctx, DriftCheckRequest(episodes=1500)).as_dict()
    assert after["profile"] == "calibrated" and after["calibration"] == KEY
    assert not {"latency_ms", "error"} & set(after["drifted_fields"]), after["drifted_fields"]
    base = ctx.storage.read_parquet(after["baseline_uri"])
    live = ctx.storage.read_parquet(after["target_uri"])
    # the error column is encoded alike on both sides: text or null, never True/False
    assert set(base["error"].dropna().unique()) <= set(live["error"].dropna().unique()) | {"error"}
    assert str(base["error"].dtype) == str(live["error"].dtype)


def _initial(pack, profile: str, n: int = 20_000) -> dict[str, float]:
    key = torch.arange(n, dtype=torch.int64) * 7919 + 3
    S = pack.scenario.sample_initial(key, profile)
    age = S[:, pack.scenario.columns["user_profile.age"]].double()
    return {"age": float(age.mean())}


def test_recalibration_never_edits_the_production_world_and_is_idempotent(ctx: StepContext) -> None:
    from rlops.pipeline_steps.drift.calibrate import recalibrate

    _live_capture(ctx, 1000)
    declared = ctx.load_pack(calibration=None)
    live_before = _initial(declared, "live")
    first = recalibrate(ctx).as_dict()
    cal1 = ctx.read_calibration(KEY)
    second = recalibrate(ctx).as_dict()  # the same run key again
    cal2 = ctx.read_calibration(KEY)
    assert first["fields"] == second["fields"]
    assert cal1["fields"] == cal2["fields"] and cal1["simulation"] == cal2["simulation"]
    pack = ctx.load_pack()
    assert _initial(pack, "live") == live_before  # production stand-in untouched
    assert _initial(pack, "sandbox") == _initial(declared, "sandbox")
    # the calibrated sandbox carries the live population's age (about 45), not the declared 40
    assert abs(_initial(pack, "calibrated")["age"] - live_before["age"]) < 1.5
    # a calibration that tries to write another profile is refused
    from rlops.sandbox.errors import PackError
    from rlops.sandbox.pack import load_pack

    with pytest.raises(PackError, match="only the 'calibrated' profile"):
        load_pack(ctx.pack_dir, calibration={"simulation": {"profiles": {"live": {}}}}, check_liveness=False)


def test_calibration_reports_every_unfitted_field_and_refuses_worse_fits(ctx: StepContext) -> None:
    from rlops.pipeline_steps.drift.calibrate import recalibrate, worse_fits

    _live_capture(ctx, 1000)
    res = recalibrate(ctx).as_dict()
    pack = ctx.load_pack(calibration=None)
    every = {f.path for f in pack.scenario.spec.fields}
    assert set(res["fields"]) | set(res["skipped"]) | set(res["rejected"]) == every
    assert "hidden.default_u" in res["skipped"] and "not observed" in res["skipped"]["hidden.default_u"]
    check = {"a": {"metric": "ks", "before": 0.05, "after": 0.02}, "b": {"metric": "ks", "before": 0.02, "after": 0.09}}
    assert worse_fits(check, 0.01) == ["b"]
