"""Agent decisions as MLflow traces, and back: an SDK-instrumented toy agent's decisions show up as
MLflow traces (spans observe/decide/execute/reward) and, after capture from MLflow's trace store
or from an OTLP JSON export, as trace-store rows — rows in = accepted + quarantined."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from rlops.common.config import REPO_ROOT

SCENARIO = "credit_approval"
RUN_KEY = "20261130T0000"
START = datetime(2026, 11, 30, 0, 1, tzinfo=UTC)  # inside the run key's 15 minutes
CORE = {
    "trace_id",
    "episode_id",
    "step",
    "ts",
    "scenario",
    "source",
    "test_group",
    "policy_version",
    "action",
    "done",
    "latency_ms",
    "error",
}


def _nest(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"state.a.b": 1}`` → ``{"a": {"b": 1}}`` (what a live agent's observer returns)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        node = out
        *parents, leaf = key.split(".")[1:]
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = None if isinstance(value, float) and math.isnan(value) else value
    return out


@pytest.fixture(autouse=True)
def _restore_tracking_uri(tmp_tracking: str) -> Any:
    """The exporter sets the process's MLflow tracking URI (tracing exports through it); put it
    back so later tests in this process use their own store."""
    yield
    import mlflow

    mlflow.set_tracking_uri(None)


@pytest.fixture(scope="module")
def sandbox_rows() -> pd.DataFrame:
    """Three episodes of the rule engine: what the toy agent decides, step by step."""
    from rlops.sandbox.pack import load_pack
    from rlops.sandbox.policies import rule_policy
    from rlops.sandbox.traces import rollout_traces

    pack = load_pack(REPO_ROOT / "scenarios" / SCENARIO, check_liveness=False)
    return rollout_traces(
        pack,
        rule_policy,
        3,
        seed=11,
        profile="live",
        reward_fn="v1",
        policy_version="rules",
        source="live",
        start_ts=START,
    )


def run_toy_agent(tracer: Any, rows: pd.DataFrame) -> int:
    """A toy agent instrumented with the SDK: each decision goes through ``Episode.step``. The
    last decision of the last episode names an action the scenario does not have."""
    from rlops.agent_sdk import rollout

    @rollout(tracer, scenario=SCENARIO, policy_version="toy-1", source="live")
    def agent(steps: list[dict[str, Any]], episode: Any, broken: bool = False) -> None:
        for i, r in enumerate(steps):
            state = _nest({k: v for k, v in r.items() if k.startswith("state.")})
            action = "launch_rockets" if broken and i == len(steps) - 1 else r["action"]
            extra = {k: v for k, v in r.items() if k not in CORE and not k.startswith("state.")}
            episode.step(
                state, action, latency_ms=float(r["latency_ms"]), ts=str(r["ts"]), done=bool(r["done"]), **extra
            )

    groups = [g.to_dict("records") for _, g in rows.groupby("episode_id", sort=True)]
    for i, steps in enumerate(groups):
        agent(steps, broken=i == len(groups) - 1)
    return len(rows)


def test_toy_agent_decisions_are_mlflow_traces_and_capture_into_the_trace_store(
    sandbox_rows: pd.DataFrame, tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from mlflow import MlflowClient

    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.mlflow_tracing import MlflowTraceExporter
    from rlops.pipeline_steps.capture.step import capture_traces
    from rlops.pipeline_steps.infra.context import StepContext

    exporter = MlflowTraceExporter(SCENARIO, tracking_uri=tmp_tracking)
    tracer = Tracer(tmp_path / "landing", flush_every=10_000, exporters=[exporter])
    n = run_toy_agent(tracer, sandbox_rows)
    tracer.close()
    assert exporter.exported == n and exporter.failed == 0

    client = MlflowClient(tracking_uri=tmp_tracking)
    exp = client.get_experiment_by_name(SCENARIO)
    traces = list(client.search_traces(locations=[exp.experiment_id], max_results=500))
    assert len(traces) == n
    first = traces[0]
    assert {s.name for s in first.data.spans} == {"decision", "observe", "decide", "execute", "reward"}
    root = next(s for s in first.data.spans if s.parent_id is None)
    record = root.attributes["rlops.record"]
    record = json.loads(record) if isinstance(record, str) else record
    assert record["scenario"] == SCENARIO and record["policy_version"] == "toy-1"
    decide = next(s for s in first.data.spans if s.name == "decide")
    assert decide.attributes["action"] == record["action"]

    ctx = StepContext.create(SCENARIO, RUN_KEY)
    res = capture_traces(ctx).as_dict()
    assert res["source"] == f"mlflow:{SCENARIO}"
    assert res["rows_in"] == n == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_quarantined"] == 1  # the decision with an action the scenario lacks
    stored = pd.concat([ctx.storage.read_parquet(p) for p in res["partitions"]], ignore_index=True)
    assert len(stored) == res["rows_accepted"] and set(stored["policy_version"]) == {"toy-1"}
    quarantined = pd.concat([ctx.storage.read_parquet(p) for p in res["quarantine_partitions"]])
    assert "launch_rockets" in quarantined["raw"].iloc[0] and quarantined["quarantine_reason"].iloc[0]
    # the capture is a step run of its pass, with the written partitions as its datasets
    runs = client.search_runs([exp.experiment_id], "tags.`rlops.step` = 'capture'")
    assert len(runs) == 1 and runs[0].inputs.dataset_inputs
    assert runs[0].data.tags["mlflow.parentRunId"]


def _otlp_span(trace_id: str, span_id: str, attrs: dict[str, str], parent: str = "") -> dict[str, Any]:
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": "decision",
        "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attrs.items()],
    }


def test_otlp_json_export_is_a_capture_source(
    sandbox_rows: pd.DataFrame, tmp_tracking: str, tmp_storage_root: str, tmp_path: Path
) -> None:
    from rlops.pipeline_steps.capture.step import capture_traces
    from rlops.pipeline_steps.infra.context import StepContext

    head = sandbox_rows.head(5).astype(object)
    recs = head.where(head.notna(), None).to_dict("records")  # JSON has null, never NaN (the tracer writes null)
    spans = [
        _otlp_span(f"t{i}", f"s{i}", {"rlops.record": json.dumps(json.dumps(r, default=str))})
        for i, r in enumerate(recs)
    ]
    spans.append(_otlp_span("t0", "c0", {"latency_ms": "3"}, parent="s0"))  # a child span: not a decision
    spans.append(_otlp_span("tx", "sx", {"http.route": "/health"}))  # another tool's root span
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}
    export = tmp_path / "spans.json"
    export.write_text(json.dumps(doc))
    ctx = StepContext.create(SCENARIO, RUN_KEY, overrides={"capture": {"track": False}})
    res = capture_traces(ctx, otlp_uri=f"file://{export}").as_dict()
    assert res["rows_in"] == 6 and res["rows_accepted"] == 5 and res["rows_quarantined"] == 1
    q = ctx.storage.read_parquet(res["quarantine_partitions"][0])
    assert "/health" in q["raw"].iloc[0]


def test_agent_sdk_does_not_need_mlflow_to_import() -> None:
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['mlflow'] = None\n"
        "import rlops.agent_sdk, rlops.agent_sdk.mlflow_tracing as m\n"
        "e = m.MlflowTraceExporter('x')\n"
        "assert e.export({'action': 'a'}) is None and e.failed == 1\n"
        "assert not any(k.startswith('pipeline_steps') for k in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_timestamps_fall_in_the_interval() -> None:
    from rlops.agent_sdk.mlflow_tracing import _ts_ns

    ns = _ts_ns({"ts": (START + timedelta(seconds=5)).isoformat()})
    assert ns == int((START + timedelta(seconds=5)).timestamp() * 1e9)
