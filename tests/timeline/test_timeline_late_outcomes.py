"""The credit pack's loan outcome as it arrives in production: decided now, settled later. Over
simulated hours the agent traces each decision without its loan outcome (``loan_outcome``), and the
lender's back office sends each episode's outcome an hour after its last decision through
``Tracer.outcome``; the capture DAG stores the outcomes it finds landed each quarter, and every read of
the trace store joins them.

Asserted: no outcome lost (sent = read by capture = accepted, none quarantined); the joined returns
of each settled hour are the production world's own returns, to the rounding of the stored
breakdown; the last hour's approved loans still await their outcome (censored, not silently 0);
and the loop around it holds — no landing-zone row lost, the drift monitor's first calibration, a
first policy staged as challenger and served by the policy client, no champion regression. Marked
``slow`` (about five minutes on two cores)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from rlops.common.run_key import RunKey
from rlops.timeline.simulate import run_timeline
from rlops.timeline.world import TimelineConfig, _environment

HOURS = 5


@pytest.mark.slow
def test_loan_outcomes_that_arrive_an_hour_later_are_joined_into_the_world_s_returns(
    airflow_db: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.infra.context import StepContext

    cfg = TimelineConfig(
        hours=HOURS,
        late_outcome="loan_outcome",
        outcome_delay_hours=1.0,
        params=(("rollout.staged_first_champion", True),),
    )
    root = tmp_path / "timeline"
    res = run_timeline(cfg, [], root)
    m, hours = res["metrics"], res["hours"]
    table = [(h["hour"], h["live_return"], h["actions"]) for h in hours]
    late = m["late_outcomes"]
    assert late["settling_episodes"] > 0 and late["pending"] > 0, late
    assert late["sent"] == late["records_in"] == late["records_accepted"] and late["records_quarantined"] == 0, late
    assert m["rows_lost"] == 0 and m["rows"]["quarantined"] == 0, m["rows"]

    t0 = RunKey.parse(cfg.start).start
    with _environment(root / "params.yaml", root, cfg.scenario):
        traces = StepContext.create(cfg.scenario).traces
        for h in hours[: HOURS - 2]:  # settled: every outcome of the hour arrived an hour later
            window = (t0 + timedelta(hours=h["hour"]), t0 + timedelta(hours=h["hour"] + 1))
            joined = traces.returns(cfg.scenario, window)
            assert joined.censored == 0 and joined.joined == joined.episodes == h["episodes"], (h["hour"], joined)
            assert joined.mean == pytest.approx(h["live_return"], abs=1e-5), (h["hour"], joined.mean, table)
        last = traces.returns(cfg.scenario, (t0 + timedelta(hours=HOURS - 1), t0 + timedelta(hours=HOURS)))
        assert 0 < last.censored < last.episodes, last  # approved loans wait; declined ones settled at once

    assert hours[0]["alarm"] and "recalibrated" in hours[0]["actions"], table
    assert any("challenger at" in a for h in hours for a in h["actions"]), table
    assert m["challenger_episodes"] > 0 and m["champion_regressions"] == 0, table
