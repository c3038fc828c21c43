"""Capture sources in sequence, as the scheduler and an operator would run them on one run key:
the landing zone, then an OTLP export of the same hour, then the landing zone again. One writer
holds the same rules for all of them: each decision is stored once, the second source adds, a
re-run replaces only its own files, and rows in = accepted + quarantined at every step."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT
from rlops.pipeline_steps.infra.context import StepContext

RUN_KEY = "20261130T0000"
START = datetime(2026, 11, 30, 0, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def rows() -> pd.DataFrame:
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / "credit_approval", check_liveness=False)
    return rollout_traces(
        pack, rule_policy, 6, seed=3, profile="live", source="live", start_ts=START, episode_prefix="cap"
    )


def records(df: pd.DataFrame) -> list[dict]:
    return [json.loads(line) for line in df.to_json(orient="records", lines=True, date_format="iso").splitlines()]


def stored(ctx: StepContext) -> pd.DataFrame:
    return ctx.traces.read(ctx.scenario)


def test_landing_then_otlp_then_landing_again(rows: pd.DataFrame, tmp_storage_root: str, tmp_path: Path) -> None:
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step, capture_traces

    ctx = StepContext.create("credit_approval", RUN_KEY, overrides={"capture": {"track": False}})
    episodes = sorted(rows["episode_id"].unique())
    landing_eps, otlp_eps = episodes[:4], episodes[2:]  # two episodes arrive through both sources
    folder = Path(ctx.traces.landing_uri[len("file://") :]) / "scenario=credit_approval" / "date=2026-11-30" / "hour=00"
    folder.mkdir(parents=True)
    (folder / "20261130T000500000000Z-agent-1-000000.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records(rows[rows["episode_id"].isin(landing_eps)]))
    )
    first = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()
    n_landing = int(rows["episode_id"].isin(landing_eps).sum())
    assert first["rows_in"] == first["rows_accepted"] == n_landing

    spans = [
        {
            "traceId": f"t{i}",
            "spanId": f"s{i}",
            "parentSpanId": "root",
            "name": "decision",
            "attributes": [{"key": "rlops.record", "value": {"stringValue": json.dumps(r)}}],
        }
        for i, r in enumerate(records(rows[rows["episode_id"].isin(otlp_eps)]))
    ]
    export = tmp_path / "spans.json"
    export.write_text(json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}))
    second = capture_traces(ctx, otlp_uri=f"file://{export}").as_dict()
    overlap = int(rows["episode_id"].isin(set(landing_eps) & set(otlp_eps)).sum())
    assert second["rows_in"] == len(spans) == second["rows_accepted"] + second["rows_quarantined"]
    assert second["rows_quarantined"] == overlap  # already captured through the landing zone
    assert len(stored(ctx)) == len(rows) and not stored(ctx).duplicated(["episode_id", "step"]).any()

    again = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()  # the scheduler re-runs the interval
    assert again["rows_accepted"] == n_landing
    got = stored(ctx)
    assert len(got) == len(rows) and not got.duplicated(["episode_id", "step"]).any()
    manifests = sorted(p.name for p in Path(ctx.traces.trace_uri[len("file://") :], "_manifests").rglob("*.json"))
    assert len(manifests) == 2 and manifests[0] == f"{RUN_KEY}.json" and manifests[1].startswith(f"{RUN_KEY}~otlp-")
