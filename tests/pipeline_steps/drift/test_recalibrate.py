"""Recalibration: traces rolled out in the credit pack's ``live`` profile pull the sandbox toward
live — field distributions (KS of age and income drop), per-API error rates and the latency jitter
— and the new version is written, logged and loadable through ``StepContext.load_pack``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import ks_2samp

from rlops.common.config import REPO_ROOT, load_params
from rlops.pipeline_steps.drift.calibrate import PROFILE, RecalConfig, fit_calibration, recalibrate
from rlops.pipeline_steps.drift.field_fits import fit_field, initial_values
from rlops.pipeline_steps.infra.context import StepContext
from rlops.sandbox.pack import Pack, load_pack
from rlops.sandbox.policies import rule_policy
from rlops.sandbox.traces import rollout_traces

REPO = REPO_ROOT
LIVE = {"fraud_api": 0.012, "credit_bureau": 0.02, "sms": 0.037}


@pytest.fixture(scope="module")
def credit() -> Pack:
    return load_pack(REPO / "scenarios" / "credit_approval", check_liveness=False)


@pytest.fixture(scope="module")
def live_traces(credit: Pack) -> pd.DataFrame:
    df = rollout_traces(credit, rule_policy, 3000, seed=11, profile="live", source="live")
    sandbox = rollout_traces(credit, rule_policy, 200, seed=99, source="sandbox")  # must be ignored
    return pd.concat([df, sandbox], ignore_index=True)


def test_fit_field_is_the_mle_of_the_declared_family(credit: Pack) -> None:
    rng = np.random.default_rng(0)
    age = credit.scenario.fields["user_profile.age"]
    x = rng.normal(50, 7, 5000)
    fit = fit_field(age, x)
    assert fit == {"dist": "normal", "mean": pytest.approx(x.mean()), "std": pytest.approx(x.std())}
    income = credit.scenario.fields["user_profile.income_monthly"]
    y = rng.lognormal(8.0, 0.3, 5000)
    assert fit_field(income, y)["mean"] == pytest.approx(np.log(y).mean())
    emp = credit.scenario.fields["user_profile.employment"]
    assert fit_field(emp, np.array([0, 0, 3, 1.0]))["probs"] == {
        "salaried": 0.5,
        "self_employed": 0.25,
        "unemployed": 0.0,
        "retired": 0.25,
    }


def test_fit_moves_fields_errors_and_latency_toward_live(credit: Pack, live_traces: pd.DataFrame) -> None:
    live = live_traces[live_traces["source"] == "live"].reset_index(drop=True)
    cal = fit_calibration(credit, live, RecalConfig())
    assert set(cal.fields) >= {
        "user_profile.age",
        "user_profile.income_monthly",
        "user_profile.employment",
        "user_profile.credit_score",
        "application.loan_amount",
    }
    assert not {"hidden.default_u", "hidden.is_fraud", "system_status.fraud_flag"} & set(cal.fields)
    prof = cal.profile
    assert cal.as_dict()["simulation"]["profiles"][PROFILE] == prof
    lo, hi = prof["latency_jitter_ms"]["min"], prof["latency_jitter_ms"]["max"]
    assert abs(lo - 200) < 60 and abs(hi - 1500) < 60  # sandbox: 0..100, live: 200..1500
    for api, rate in LIVE.items():  # sandbox: 0
        assert prof["error_rates"][api] == pytest.approx(rate, abs=0.01)
    # credit_score is hidden at step 0; its initial value is read where it first becomes visible
    assert cal.field_fits["user_profile.credit_score"].n > 2500


def test_step_writes_a_version_that_load_pack_uses(
    credit: Pack, live_traces: pd.DataFrame, tmp_path: Path, tmp_tracking: str
) -> None:
    params = load_params(
        overrides={"storage": {"root": f"file://{tmp_path / 'storage'}"}, "tracking": {"uri": tmp_tracking}}
    )
    ctx = StepContext.create("credit_approval", "20261130T0500", params=params)
    uri = ctx.uri("traces", "scenario=credit_approval", "date=2026-11-30", "hour=04", "part-0.parquet")
    ctx.storage.write_parquet(uri, live_traces)
    out = recalibrate(ctx, ctx.uri("traces")).as_dict()
    assert out["calibration_uri"].endswith("calibrations/credit_approval/20261130T0500.json")
    assert ctx.storage.read_json(out["latest_uri"])["version"] == "20261130T0500"
    for path in ("user_profile.age", "user_profile.income_monthly"):
        assert out["check"][path]["after"] < out["check"][path]["before"], out["check"][path]
    assert out["check"]["user_profile.employment"]["after"] < out["check"]["user_profile.employment"]["before"]

    pack = ctx.load_pack()  # the latest calibration
    assert PROFILE in pack.scenario.profiles
    live_age = initial_values(credit, live_traces[live_traces["source"] == "live"], "user_profile.age", False)
    col = pack.scenario.columns["user_profile.age"]
    env_before, env_after = credit.make_env(4000, seed=1), pack.make_env(4000, profile=PROFILE, seed=1)
    ks_before = ks_2samp(env_before.S[:, col].numpy(), live_age).statistic
    ks_after = ks_2samp(env_after.S[:, col].numpy(), live_age).statistic
    assert ks_after < 0.7 * ks_before, (ks_before, ks_after)  # one normal vs a two-population mix
    assert pack.scenario.spec.profiles[PROFILE].error_rates["sms"] == pytest.approx(0.037, abs=0.01)

    from rlops.registry.client import Tracker

    runs = Tracker(tmp_tracking, "credit_approval").client.search_runs(
        [Tracker(tmp_tracking, "credit_approval").experiment_id], "tags.`rlops.step` = 'recalibrate'"
    )
    assert len(runs) == 1 and "user_profile.age.mean" in runs[0].data.params
    again = recalibrate(ctx, ctx.uri("traces")).as_dict()  # same run key: the same version, overwritten
    assert again["calibration_uri"] == out["calibration_uri"]


def test_no_live_rows_is_a_clear_error(credit: Pack, live_traces: pd.DataFrame) -> None:
    with pytest.raises(ValueError, match="no live trace rows"):
        fit_calibration(credit, live_traces.iloc[:0], RecalConfig())


def test_a_mixed_live_population_is_fitted_as_population_segments(credit: Pack, live_traces: pd.DataFrame) -> None:
    """``live`` draws 15% of applicants from an elderly segment (age ~72, mostly retired): one
    normal per field left age at KS ≈ 0.06 from live, which the hourly drift check flagged after
    every recalibration. The fit is a mixture now, and the segments carry the other fields too."""
    live = live_traces[live_traces["source"] == "live"].reset_index(drop=True)
    cal = fit_calibration(credit, live, RecalConfig())
    segments = cal.population
    assert segments is not None and cal.mixture is not None and cal.mixture.components == len(segments) >= 2
    assert cal.as_dict()["fit"]["mixture"]["components"] == len(segments)
    assert sum(s["probability"] for s in segments) == pytest.approx(1.0)
    oldest = max(segments, key=lambda s: s["init"]["user_profile.age"]["mean"])
    assert oldest["init"]["user_profile.age"]["mean"] > 55
    assert oldest["init"]["user_profile.employment"]["probs"]["retired"] > 0.3  # the segment, not the field
    pack = load_pack(REPO / "scenarios" / "credit_approval", calibration=cal.as_dict(), check_liveness=False)
    fresh = rollout_traces(credit, rule_policy, 3000, seed=10**6, profile="live", source="live")
    key = torch.arange(20_000, dtype=torch.int64) * 7919 + 5
    S = pack.scenario.sample_initial(key, PROFILE)
    for path in ("user_profile.age", "user_profile.income_monthly", "application.loan_amount"):
        sandbox = S[:, pack.scenario.columns[path]].double().numpy()
        assert ks_2samp(sandbox, initial_values(credit, fresh, path, False)).statistic < 0.035, path


def test_one_population_stays_one_segment(credit: Pack) -> None:
    df = rollout_traces(credit, rule_policy, 2000, seed=3, profile="sandbox", source="live")
    cal = fit_calibration(credit, df, RecalConfig())
    assert cal.population is None and "population" not in cal.as_dict()
    assert cal.as_dict()["fit"]["mixture"]["components"] == 1
    one = fit_calibration(
        credit,
        rollout_traces(credit, rule_policy, 2000, seed=3, profile="live", source="live"),
        RecalConfig(max_components=1),
    )
    assert one.population is None


def test_an_api_slowing_down_is_fitted_on_its_own_action(credit: Pack, tmp_path: Path) -> None:
    """The bureau's latency tripling moved one action's latency; a jitter common to all actions
    could only spread it over every action, and ``latency_ms`` stayed flagged after recalibrating."""
    import shutil

    import yaml

    from rlops.pipeline_steps.drift.calibrate import fit_simulation
    from rlops.timeline.events import parse_events, production_doc

    slow = parse_events([{"at_hour": 0, "kind": "latency", "action": "fetch_credit_report", "factor": 3}])
    shutil.copytree(REPO / "scenarios" / "credit_approval", tmp_path / "world")
    doc = yaml.safe_load((tmp_path / "world" / "scenario.yaml").read_text())
    (tmp_path / "world" / "scenario.yaml").write_text(yaml.safe_dump(production_doc(doc, slow), sort_keys=False))
    world = load_pack(tmp_path / "world", check_liveness=False)
    profile, _ = fit_simulation(credit, rollout_traces(world, rule_policy, 2000, seed=21, profile="live"), 30)
    lo, hi = profile["latency_jitter_ms"]["min"], profile["latency_jitter_ms"]["max"]
    assert abs(lo - 200) < 80 and abs(hi - 1500) < 80, (lo, hi)  # live's jitter, not bent by one action
    own = profile["action_latency_ms"]
    assert own["fetch_credit_report"]["mean"] == pytest.approx(1500, abs=100)
    assert own["initiate_fraud_check"]["mean"] == pytest.approx(300, abs=80)
