"""Late outcomes of captured credit_approval episodes: 10,000 outcomes arriving 90 simulated days
after their decisions, imported into the outcome store and joined into the returns the off-policy
gate and the drift check read."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import numpy as np
import pandas as pd
import pytest

from rlops.common.errors import UserError
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.outcomes.request import OutcomeCaptureRequest, OutcomeImportRequest
from rlops.pipeline_steps.outcomes.step import capture_outcomes, import_outcomes
from rlops.pipeline_steps.promotion.ope_value import logged_value

SCENARIO = "credit_approval"
RUN_KEY = "20260105T1000"
EPISODES = 10_000
#: The pack's mapping of the loan outcome to reward: a default costs 5.
OVERRIDES = {
    "capture": {"track": False},
    "outcomes": {"rewards": {"default": {"component": "loan_loss", "weight": -5.0}}},
}


@pytest.fixture(scope="module")
def world(_mlflow_template_db: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """10,000 captured episodes; outcome files: one per episode 90 days after its last decision,
    plus 50 of unknown episodes and 30 later than outcomes.max_delay_days."""
    import torch

    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    tmp = tmp_path_factory.mktemp("outcomes")
    shutil.copyfile(_mlflow_template_db, tmp / "mlflow.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        mp.setenv("RLOPS_ARTIFACT_ROOT", str(tmp / "artifacts"))
        mp.setenv("RLOPS_STORAGE_ROOT", f"file://{tmp / 'storage'}")
        torch.set_num_threads(1)
        ctx = StepContext.create(SCENARIO, RUN_KEY, overrides=OVERRIDES)
        capture_step(ctx, CaptureRequest(simulate=True, episodes=EPISODES))
        rows = ctx.traces.reader.read(ctx.traces.scenario_uri(SCENARIO), columns=["episode_id", "ts"])
        last = pd.to_datetime(rows["ts"], utc=True).groupby(rows["episode_id"]).max()
        rng = np.random.default_rng(0)
        defaults = rng.random(len(last)) < 0.2
        lines = [
            {"episode_id": e, "ts": (t + timedelta(days=90)).isoformat(), "values": {"default": int(d)}}
            for (e, t), d in zip(last.items(), defaults, strict=True)
        ]
        unknown = [
            {"episode_id": f"nobody-{i}", "ts": "2026-04-05T10:00:00Z", "values": {"default": 1}} for i in range(50)
        ]
        too_late = [
            {"episode_id": e, "ts": (t + timedelta(days=200)).isoformat(), "values": {"recovered": 1.0}}
            for e, t in list(last.items())[:30]
        ]
        path = tmp / "outcomes.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in [*lines, *unknown, *too_late]))
        yield {"ctx": ctx, "path": path, "last": last, "defaults": pd.Series(defaults, index=last.index), "mp": mp}


def test_ten_thousand_late_outcomes_none_lost_and_returns_change(world: dict[str, Any]) -> None:
    ctx: StepContext = world["ctx"]
    window = (ctx.key.start - timedelta(hours=2), ctx.key.end)
    before = ctx.traces.read(SCENARIO, window, as_of=ctx.key.end)  # no outcome stored yet: every episode censored
    assert set(before["outcome_status"]) == {"censored"}
    returns_before = ctx.traces.returns(SCENARIO, window, as_of=ctx.key.end)
    assert returns_before.censored == EPISODES and len(returns_before.returns) == 0

    res = import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    assert res.records_in == EPISODES + 80 == res.records_accepted + res.records_quarantined
    assert res.records_quarantined == 80
    assert res.quarantine_reasons == {"unknown_episode": 50, "too_late": 30}
    assert res.values_added == EPISODES and res.values_replaced == 0
    quarantined = ctx.storage.read_parquet(res.quarantine_uri)
    assert len(quarantined) == 80 and quarantined["raw"].str.contains("nobody-").sum() == 50

    # a read as the off-policy gate does it (ctx.traces.read over its window), 100 days on
    as_of = ctx.key.end + timedelta(days=100)
    after = ctx.traces.read(SCENARIO, window, as_of=as_of)
    assert len(after) == len(before) and set(after["outcome_status"]) == {"joined"}
    by_ep = lambda df: pd.to_numeric(df["reward_total"]).groupby(df["episode_id"]).sum()  # noqa: E731
    change = (by_ep(after) - by_ep(before)).reindex(world["defaults"].index)
    np.testing.assert_allclose(change.to_numpy(), np.where(world["defaults"], -5.0, 0.0), atol=1e-9)
    # the logged value the off-policy gate compares a candidate with moves by the defaults' cost
    shift = logged_value(after)[0] - logged_value(before)[0]
    assert shift == pytest.approx(-5.0 * world["defaults"].mean())
    summary = ctx.traces.returns(SCENARIO, window, as_of=as_of)
    assert (summary.episodes, summary.joined, summary.censored) == (EPISODES, EPISODES, 0)
    assert summary.mean == pytest.approx(by_ep(after).mean())

    # re-importing the same file changes nothing: no value, no partition, the same quarantine
    files = {p: p.stat().st_mtime_ns for p in Path(ctx.traces.outcomes.root_uri[7:]).rglob("*.parquet")}
    again = import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    assert (again.values_added, again.values_unchanged, again.values_replaced) == (0, EPISODES, 0)
    assert again.partitions == [] and again.records_quarantined == 80
    assert {p: p.stat().st_mtime_ns for p in files} == files


def test_a_changed_value_replaces_the_old_one_and_says_so(world: dict[str, Any], tmp_path: Path) -> None:
    ctx: StepContext = world["ctx"]
    import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    episode, decided = next(iter(world["last"].items()))
    flipped = int(not world["defaults"][episode])
    path = tmp_path / "correction.csv"
    pd.DataFrame(
        {"episode_id": [episode], "ts": [(decided + timedelta(days=90)).isoformat()], "values.default": [flipped]}
    ).to_csv(path, index=False)
    res = import_outcomes(ctx, OutcomeImportRequest(path=str(path)))
    assert (res.values_added, res.values_replaced) == (0, 1)
    assert res.replacements[0]["episode_id"] == episode and res.replacements[0]["new_value"] == flipped
    stored = ctx.traces.outcomes.read(SCENARIO)
    assert len(stored) == EPISODES and stored.loc[stored["episode_id"] == episode, "value"].item() == flipped


def test_drift_live_return_counts_censored_episodes(world: dict[str, Any]) -> None:
    """Half the episodes have outcomes known at the check, the rest are still waiting: the drift
    check's live return leaves the censored ones out and says how many there are."""
    from rlops.pipeline_steps.drift.check import live_returns

    ctx: StepContext = world["ctx"]
    import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    check = StepContext.create(SCENARIO, RUN_KEY, overrides=OVERRIDES)  # as of the run key: nothing known yet
    window = (check.key.start - timedelta(hours=2), check.key.end)
    r_live = live_returns(check, window)
    assert r_live is not None and r_live.censored == EPISODES and len(r_live.returns) == 0
    later = StepContext.create(SCENARIO, "20260415T1000", overrides=OVERRIDES)  # 100 days on: every one joined
    r_later = live_returns(later, window)
    assert r_later is not None and (r_later.censored, r_later.joined, len(r_later.returns)) == (0, EPISODES, EPISODES)


def test_bad_input_is_one_paragraph(world: dict[str, Any], tmp_path: Path) -> None:
    ctx: StepContext = world["ctx"]
    with pytest.raises(UserError, match="does not exist"):
        import_outcomes(ctx, OutcomeImportRequest(path=str(tmp_path / "missing.jsonl")))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"episode_id": "nobody", "ts": "2026-02-01T00:00:00Z", "values": {"default": 1}}\n{oops\n')
    with pytest.raises(UserError, match=r"none of 2 record\(s\) was accepted.*quarantined in"):
        import_outcomes(ctx, OutcomeImportRequest(path=str(bad)))


def test_capture_of_landed_outcomes(world: dict[str, Any], tmp_path: Path) -> None:
    """Tracer.outcome lines in the landing zone, captured for their interval; a re-run changes nothing."""
    from rlops.agent_sdk.tracer import Tracer

    ctx: StepContext = world["ctx"]
    episodes = list(world["last"].index[:5])
    tracer = Tracer(ctx.traces.landing_uri, flush_interval_s=None)
    for e in episodes:  # written now, stamped 10 days after the decision (within outcomes.max_delay_days)
        at = world["last"][e].to_pydatetime() + timedelta(days=10)
        tracer.outcome(e, scenario=SCENARIO, at=at, default=1, components={"collections": -0.5})
    files = tracer.flush()
    tracer.close()
    written = Path(unquote(files[0]))
    hour, day = written.parent.name.split("=")[1], written.parent.parent.name.split("=")[1]
    now = StepContext.create(SCENARIO, f"{day.replace('-', '')}T{hour}00", overrides=OVERRIDES)
    res = capture_outcomes(now, OutcomeCaptureRequest())
    assert res.files == [f for f in res.files if "/_outcomes/" in f] and len(res.files) == 1
    assert (res.records_in, res.records_accepted, res.records_quarantined) == (5, 5, 0)
    assert res.values_added + res.values_replaced + res.values_unchanged == 10
    rerun = capture_outcomes(now, OutcomeCaptureRequest())
    assert (rerun.values_added, rerun.values_replaced, rerun.values_unchanged) == (0, 0, 10)


def test_the_command_reports_counts_and_refuses_bad_input(world: dict[str, Any], tmp_path: Path, capsys: Any) -> None:
    from rlops.cli import main

    assert main(["outcome", "import", str(world["path"]), "--scenario", SCENARIO, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["records_in"] == out["records_accepted"] + out["records_quarantined"] == EPISODES + 80
    assert main(["outcome", "import", str(tmp_path / "nope.csv"), "--scenario", SCENARIO]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope.csv" in err and "does not exist" in err
    assert main(["outcome", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["required"] == ["episode_id", "ts"]


def test_the_drift_check_reports_censored_episodes(world: dict[str, Any]) -> None:
    """The drift monitor's step at the run key: every captured episode awaits its loan outcome, so
    there is no final live return, and the summary says how many episodes are censored."""
    from rlops.pipeline_steps.drift.check import drift_check
    from rlops.pipeline_steps.drift.request import DriftCheckRequest

    ctx = StepContext.create(SCENARIO, RUN_KEY, overrides=OVERRIDES)
    in_hour = ctx.traces.returns(SCENARIO, (ctx.key.start, ctx.key.end), as_of=ctx.key.end).episodes
    out = drift_check(ctx, DriftCheckRequest(episodes=200))
    assert in_hour > 0 and out.live_censored_episodes == in_hour and out.live_outcome_episodes == 0
    assert out.live_mean_return is None and f"{in_hour} live episode(s) await their outcome" in out.summary


def _uniform(obs: Any, mask: Any) -> np.ndarray:
    legal = mask.numpy().astype(np.float64)
    return legal / legal.sum(axis=1, keepdims=True)


def test_the_off_policy_gate_judges_final_returns_only(world: dict[str, Any]) -> None:
    """Episodes still awaiting their outcome are not judged on their decision-time return: a few
    are left out (counted), a window where more than ope.max_censored of them wait is
    insufficient evidence, and the same window once the outcomes are in is judged whole."""
    from rlops.pipeline_steps.promotion.ope_value import off_policy_value

    ctx: StepContext = world["ctx"]
    import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    pack, cfg = ctx.load_pack(), ctx.config.ope
    window = (ctx.key.start - timedelta(hours=2), ctx.key.end)

    waiting = off_policy_value(pack, ctx.traces.read(SCENARIO, window, as_of=ctx.key.end), _uniform, cfg)
    assert (waiting.censored, waiting.episodes) == (EPISODES, 0)
    assert waiting.skipped is not None and f"{EPISODES} of {EPISODES} complete live episodes still await" in (
        waiting.skipped
    )

    known = ctx.traces.read(SCENARIO, window, as_of=ctx.key.end + timedelta(days=100))
    whole = off_policy_value(pack, known, _uniform, cfg)
    assert (whole.censored, whole.episodes) == (0, EPISODES)
    assert whole.skipped is None or "await" not in whole.skipped

    few = sorted(set(known["episode_id"]))[: int(cfg.max_censored * EPISODES) - 1]
    partly = known.assign(outcome_status=known["outcome_status"].where(~known["episode_id"].isin(few), "censored"))
    res = off_policy_value(pack, partly, _uniform, cfg)
    assert (res.censored, res.episodes) == (len(few), EPISODES - len(few))
    assert res.skipped is None or "await" not in res.skipped
    assert res.as_dict()["censored_episodes"] == len(few) and res.metrics()["ope_censored_episodes"] == len(few)


def test_outcome_drift_judges_settled_episodes_with_their_outcomes(world: dict[str, Any]) -> None:
    """The drift check's outcome test reads the live rows with the outcomes known at its run key:
    at the decisions' hour every episode still waits (no evidence), 100 days on the defaults'
    cost is in the live rewards and the sandbox, which predicts the decision-time reward, misses it."""
    from rlops.pipeline_steps.drift.outcomes import outcome_drift_step

    ctx: StepContext = world["ctx"]
    import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    raw = ctx.traces.reader.read(ctx.traces.scenario_uri(SCENARIO))
    pack = ctx.load_pack()
    waiting = StepContext.create(SCENARIO, RUN_KEY, dry_run=True, overrides=OVERRIDES)
    decided = (waiting.key.start - timedelta(hours=2), waiting.key.end)
    rep = outcome_drift_step(waiting, waiting.config.drift, waiting.config.evaluate.segments, pack, raw, raw, decided)
    assert rep.live_rows == 0 and rep.drifted_cells == []
    later = StepContext.create(SCENARIO, "20260415T1000", dry_run=True, overrides=OVERRIDES)
    rep = outcome_drift_step(later, later.config.drift, later.config.evaluate.segments, pack, raw, raw, decided)
    assert rep.live_rows == int(raw["reward_total"].notna().sum())
    assert rep.drifted_cells, rep.summary()


def test_the_evidence_of_a_window_is_the_episodes_that_settled_in_it(world: dict[str, Any]) -> None:
    """The outcomes arrive 90 days after their decisions. The drift check of the hours they arrive
    in judges those episodes (decided long before), joined; the check of the decisions' own hours has
    none of them final yet. Each episode is evidence once, where its return became final."""
    from rlops.pipeline_steps.drift.check import live_returns
    from rlops.trace_store.settled import settled_in

    ctx: StepContext = world["ctx"]
    import_outcomes(ctx, OutcomeImportRequest(path=str(world["path"])))
    decided = (ctx.key.start - timedelta(hours=2), ctx.key.end)
    arrived = (decided[0] + timedelta(days=90), decided[1] + timedelta(days=90))
    assert settled_in(ctx.traces, SCENARIO, decided).empty  # every one still waits at the decisions' end
    rows = settled_in(ctx.traces, SCENARIO, arrived, ["episode_id", "state.user_profile.age"])
    assert rows["episode_id"].nunique() == EPISODES and set(rows["outcome_status"]) == {"joined"}
    assert "state.user_profile.age" in rows.columns
    check = StepContext.create(SCENARIO, f"{arrived[1] - timedelta(hours=1):%Y%m%dT%H%M}", overrides=OVERRIDES)
    r = live_returns(check, arrived)
    assert r is not None and (len(r.returns), r.joined, r.censored) == (EPISODES, EPISODES, 0)
    by_ep = pd.to_numeric(rows["reward_total"]).groupby(rows["episode_id"]).sum()
    assert r.mean == pytest.approx(by_ep.mean())
