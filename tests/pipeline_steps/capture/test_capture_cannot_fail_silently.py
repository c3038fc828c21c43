"""A capture cannot fail silently.

* ``test_a_capture_that_quarantines_most_rows_fails_and_keeps_them`` caught: a capture that
  quarantined every row (50 in, 0 accepted, 50 quarantined) exited 0 with no alert, and the capture
  DAG's task went green.
* ``test_quarantine_partitions_list_what_was_written`` caught: a landing-zone capture's
  ``quarantine_partitions`` listed nothing though the quarantine file was written.
* ``test_an_empty_interval_says_which_it_read_and_where_the_traffic_is`` caught: ``rlops capture``
  run right after the agent (it reads the hour that has just ended) said only "0 rows in".
* ``test_no_champion_fallbacks_before_the_first_promotion_raise_no_alert`` caught: re-capturing an
  hour that spans the first promotion raised a false 50 % fallback alert (the ``no_champion``
  fallbacks of before the promotion were counted once a champion existed).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext

SCENARIO = "credit_approval"
NAME = f"{SCENARIO}-policy"
RUN_KEY = "20261130T0500"
FIRST_AT = "rlops.champion.first_at"
START = datetime(2026, 11, 30, 5, 1, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _env(tmp_tracking: str, tmp_storage_root: str) -> None:
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    df = rollout_traces(
        pack, rule_policy, 20, seed=5, profile="live", source="live", start_ts=START, episode_prefix="cap"
    )
    return df.head(50).reset_index(drop=True)


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [json.loads(line) for line in df.to_json(orient="records", lines=True, date_format="iso").splitlines()]


def land(ctx: StepContext, recs: list[dict[str, Any]], when: datetime = START) -> Path:
    folder = Path(ctx.traces.landing_uri[len("file://") :]) / f"scenario={SCENARIO}"
    folder = folder / f"date={when:%Y-%m-%d}" / f"hour={when:%H}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{when:%Y%m%dT%H%M%S%f}Z-agent-1-000000.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def quarantined_rows(uris: list[str], ctx: StepContext) -> int:
    return sum(len(ctx.storage.read_parquet(u)) for u in uris)


def test_a_capture_that_quarantines_most_rows_fails_and_keeps_them(
    rows: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from rlops.cli import main
    from rlops.common.errors import ExitCode, UserError
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.pipeline_steps.orchestration.run_conf import validate_conf
    from rlops.pipeline_steps.orchestration.tasks import capture

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    bad = [{**r, "action": "launch_rockets"} for r in records(rows)]  # an action the scenario lacks
    land(ctx, bad)

    with pytest.raises(UserError) as err:  # CaptureRejected, carrying the capture's result
        capture_step(ctx, CaptureRequest(simulate=False))
    out = getattr(err.value, "summary", None)
    assert out is not None and (out.rows_in, out.rows_accepted, out.rows_quarantined) == (50, 0, 50)
    message = str(err.value)
    assert "50 of its 50 rows (100%)" in message and "capture.max_quarantine_share (50%)" in message
    assert "expect_column_values_to_be_in_set[action]" in message and "launch_rockets" in message
    assert "\n" not in message  # one paragraph
    assert quarantined_rows(out.quarantine_partitions, ctx) == 50  # nothing lost: every row where it went
    assert out.quarantine_reasons[0]["rows"] == 50

    # The command line: the counts on stdout, the paragraph on stderr, exit 2 (bad input).
    code = main(["capture", "--scenario", SCENARIO, "--run-key", RUN_KEY, "--json"])
    std = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT
    printed = json.loads(std.out[std.out.index("{\n") :])  # a library may have logged to stdout before
    assert (printed["rows_in"], printed["rows_accepted"], printed["rows_quarantined"]) == (50, 0, 50)
    assert "error: capture of credit_approval 20261130T0500" in std.err and "launch_rockets" in std.err
    assert quarantined_rows(printed["quarantine_partitions"], ctx) == 50  # the re-run replaced, not added

    # The capture DAG's task fails at once (no retries), not green.
    conf = validate_conf({"scenario": SCENARIO, "reward_fn": "v1", "timesteps": 1000, "mode": "full", "dry_run": False})
    with pytest.raises(UserError, match="max_quarantine_share") as failed:
        capture({**conf, "run_key": RUN_KEY})
    assert isinstance(failed.value, AirflowFailException)

    # Under the share (1 bad row of 50) it is a capture like any other.
    land(ctx, [*records(rows.iloc[1:]), bad[0]])
    ok = capture_step(ctx, CaptureRequest(simulate=False))
    assert (ok.rows_in, ok.rows_accepted, ok.rows_quarantined) == (50, 49, 1)


def test_quarantine_partitions_list_what_was_written(rows: pd.DataFrame) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    recs = records(rows)
    land(ctx, [*recs[:40], *({**r, "action": "launch_rockets"} for r in recs[40:])])
    out = capture_step(ctx, CaptureRequest(simulate=False))
    assert (out.rows_in, out.rows_accepted, out.rows_quarantined) == (50, 40, 10)
    assert out.quarantine_partitions == [f"{ctx.traces.quarantine_uri}/scenario={SCENARIO}/date=2026-11-30/hour=05"]
    assert quarantined_rows(out.quarantine_partitions, ctx) == 10


def test_rows_another_source_already_stored_are_not_bad_input() -> None:
    from rlops.pipeline_steps.capture.input_checks import STORED_KIND, QuarantineTally, quarantine_share, reason_kind
    from rlops.pipeline_steps.capture.summary import CaptureSummary

    tally = QuarantineTally()
    tally.add(
        [
            f"duplicate: (episode_id, step) = ('e', {i}) already captured by another source of this run key"
            for i in range(40)
        ]
    )
    tally.add(["expect_column_values_to_be_in_set[action]: one of the scenario's actions (got 'x')"] * 4)
    reasons = tally.to_list()
    assert reasons[0]["reason"] == STORED_KIND and reasons[0]["rows"] == 40
    assert reasons[1]["reason"] == "expect_column_values_to_be_in_set[action]: one of the scenario's actions"
    assert quarantine_share(50, 44, reasons) == pytest.approx(0.4)  # 4 of the 10 new rows
    assert quarantine_share(40, 40, reasons[:1]) is None  # nothing new: nothing to judge
    assert reason_kind("json: line is not valid JSON (Expecting value: line 1 column 1 (char 0))") == "json"
    summary = CaptureSummary(
        SCENARIO, RUN_KEY, ["a", "b"], False, "landing_zone", 50, 6, 44, [], quarantine_reasons=reasons
    )
    from rlops.pipeline_steps.capture.input_checks import rejection

    assert rejection(summary, 0.5) is None and rejection(summary, 0.3) is not None


def test_an_empty_interval_says_which_it_read_and_where_the_traffic_is(
    rows: pd.DataFrame, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlops.cli import main
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    out = capture_step(ctx, CaptureRequest(simulate=False))  # nothing landed anywhere yet
    assert out.rows_in == 0 and len(out.warnings) == 1
    assert "[2026-11-30T05:00:00+00:00, 2026-11-30T06:00:00+00:00)" in out.warnings[0]
    assert "no landing file" in out.warnings[0] and "capture.simulate_when_empty" in out.warnings[0]

    later = START + timedelta(hours=1, minutes=20)  # the agent ran in the next hour
    land(ctx, records(rows.assign(ts=later.isoformat())), when=later)
    out = capture_step(ctx, CaptureRequest(simulate=False))
    warning = out.warnings[-1]
    assert out.rows_in == 0 and "run key 20261130T0500" in warning
    assert f"scenario={SCENARIO}/date=2026-11-30/hour=06 (1 file(s), the newest written 2026-11-30T06:21" in warning
    assert "after the interval" in warning and "--run-key 20261130T0600" in warning

    assert main(["capture", "--scenario", SCENARIO, "--run-key", RUN_KEY]) == 0  # a quiet hour is no error
    err = capsys.readouterr().err
    assert "warning: no rows in" in err and "hour=06" in err
    assert main(["capture", "--scenario", SCENARIO, "--run-key", "20261130T0600"]) == 0
    assert "50 rows in, 50 accepted" in capsys.readouterr().out


def _version(ctx: StepContext) -> str:
    with ctx.tracker.start_run("a-version") as run:
        path = Path(ctx.local_dir("probe")) / "weights.txt"
        path.write_text("not a policy")
        run.log_artifact(path, artifact_path="policy")
        return ctx.tracker.register_model(run.run_id, "policy", NAME)


def test_no_champion_fallbacks_before_the_first_promotion_raise_no_alert(rows: pd.DataFrame) -> None:
    from rlops.pipeline_steps.capture.fallbacks import summarize
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step
    from rlops.registry.aliases import move_champion

    ctx = StepContext.create(SCENARIO, RUN_KEY, overrides={"capture": {"track": False}})
    recs = records(rows)
    promoted = datetime(2026, 11, 30, 5, 30, tzinfo=UTC)
    for i, r in enumerate(recs):  # 25 decisions on rules before the first promotion, 25 by the champion after
        before = i < 25
        r["ts"] = (
            (START + timedelta(minutes=i)).isoformat() if before else (promoted + timedelta(minutes=i - 23)).isoformat()
        )
        r["fallback"] = before
        r["fallback_reason"] = f"no_champion: {NAME} has no champion alias yet" if before else None
        r["policy_version"] = "rules" if before else f"{NAME}/1"
    land(ctx, recs)

    move_champion(ctx.tracker, NAME, _version(ctx))
    # The hour is re-captured later; the registry's record says when the first champion came.
    ctx.tracker.client.set_registered_model_tag(NAME, FIRST_AT, promoted.isoformat())
    out = capture_step(ctx, CaptureRequest(simulate=False))
    assert isinstance(out.fallbacks, dict) and out.alerts == []
    assert (out.fallbacks["decisions"], out.fallbacks["fallbacks"], out.fallbacks["expected"]) == (50, 25, 25)
    assert out.fallbacks["share"] == 0.0

    from rlops.registry import tags as T
    from rlops.registry.aliases import first_champion_at

    assert T.CHAMPION_FIRST_AT == FIRST_AT and first_champion_at(ctx.tracker, NAME) == promoted
    move_champion(ctx.tracker, NAME, _version(ctx))  # a later promotion keeps the first one's time
    assert first_champion_at(ctx.tracker, NAME) == promoted
    ctx.tracker.client.delete_registered_model_tag(NAME, FIRST_AT)  # a registry promoted before the record
    assert first_champion_at(ctx.tracker, NAME) is not None  # the promotion times its versions carry

    # After the first champion (and the minute a client takes to follow it) a no_champion fallback
    # counts: the agent does not see the registry's champion.
    late = pd.DataFrame(
        {
            "source": ["live"] * 30,
            "fallback": [True] * 30,
            "fallback_reason": ["no_champion: none"] * 30,
            "ts": [promoted + timedelta(seconds=30)] * 10 + [promoted + timedelta(minutes=5)] * 20,
        }
    )
    s = summarize(late, champion_exists=True, champion_since=promoted)
    assert (s.fallbacks, s.expected) == (30, 10) and s.share == 1.0


def test_the_first_promotion_records_its_time() -> None:
    from rlops.registry import tags as T
    from rlops.registry.aliases import move_champion

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    before = datetime.now(UTC).replace(microsecond=0)
    move_champion(ctx.tracker, NAME, _version(ctx))
    first = ctx.tracker.model_tags(NAME)[T.CHAMPION_FIRST_AT]
    assert datetime.fromisoformat(first) >= before
    move_champion(ctx.tracker, NAME, _version(ctx))
    assert ctx.tracker.model_tags(NAME)[T.CHAMPION_FIRST_AT] == first
