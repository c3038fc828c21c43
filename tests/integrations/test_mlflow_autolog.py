"""The MLflow trace path under ``mlflow.langchain.autolog()``: the LangGraph agent runs inside autolog's
traces while its decisions are exported as traces of their own. None is lost (each decision is one
trace; autolog's graph traces stay whole), the exporter's counts are true, and capture from MLflow
reads every decision back (rows in = accepted + quarantined)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from tests.integrations.conftest import example, landing_rows, load_example


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return load_example(example("langgraph") / "credit_agent.py")


@pytest.fixture
def autolog(bare_world: dict[str, Any]) -> Iterator[dict[str, Any]]:
    import mlflow

    mlflow.set_tracking_uri(bare_world["tracking_uri"])
    mlflow.set_experiment("credit_approval")
    mlflow.langchain.autolog()
    try:
        yield bare_world
    finally:
        mlflow.langchain.autolog(disable=True)
        # set_experiment and set_tracking_uri are process-global (the former also sets
        # MLFLOW_EXPERIMENT_ID): later tests name their own store and experiment
        mlflow.set_tracking_uri(None)
        mlflow.tracking.fluent._active_experiment_id = None
        os.environ.pop("MLFLOW_EXPERIMENT_ID", None)


def test_no_decision_is_lost_under_autolog(agent: ModuleType, autolog: dict[str, Any]) -> None:
    import mlflow

    from rlops.agent_sdk import Tracer
    from rlops.agent_sdk.mlflow_tracing import RECORD_ATTRIBUTE, MlflowTraceExporter
    from rlops.agent_sdk.policy_client import PolicyClient
    from rlops.common.run_key import RunKey
    from rlops.integrations.core import observed_fields
    from rlops.integrations.langgraph import DecisionLoop, PolicyRouter, StateMapping
    from rlops.pipeline_steps.capture.step import capture_traces
    from rlops.pipeline_steps.infra.context import StepContext

    uri = autolog["tracking_uri"]
    exporter = MlflowTraceExporter("credit_approval", tracking_uri=uri)
    tracer = Tracer(autolog["landing"], exporters=[exporter])
    client = PolicyClient(uri, "credit_approval", agent.PACK, refresh_every_s=None)
    loop = DecisionLoop(client, tracer, scenario="credit_approval")
    router = PolicyRouter(loop, StateMapping.by_leaf_name(observed_fields(agent.PACK)), episode_key="application_id")
    graph = agent.build_graph(router)
    apps = agent.applications(5, seed=13)
    for app in apps:
        graph.invoke(app, config=router.config())
    tracer.close()
    client.close()
    rows = landing_rows(autolog["landing"])
    assert exporter.exported == len(rows) and exporter.failed == 0

    mc = mlflow.MlflowClient(uri)
    exp = mc.get_experiment_by_name("credit_approval")
    traces = mc.search_traces(locations=[exp.experiment_id], max_results=1000)
    roots = [next(s for s in t.data.spans if s.parent_id is None) for t in traces]
    decisions = [s for s in roots if s.name == "decision" and RECORD_ATTRIBUTE in (s.attributes or {})]
    assert len(decisions) == len(rows)  # each decision its own trace, none lost
    assert len(roots) - len(decisions) == len(apps)  # autolog's graph traces, whole
    assert {t.info.trace_id for t in traces} >= set(exporter.trace_ids)

    stamps = [r["ts"] for r in rows]
    key = RunKey.covering(min(stamps), max(stamps))
    ctx = StepContext.create("credit_approval", str(key), overrides={"capture": {"track": False}})
    res = capture_traces(ctx).as_dict()
    assert res["rows_accepted"] == len(rows)
    assert res["rows_in"] == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_quarantined"] == len(apps)  # autolog's own traces: no decision record, quarantined
    assert res["rows_in"] + res["spans_skipped"] == sum(len(t.data.spans) for t in traces)


def test_a_span_mlflow_did_not_start_is_a_failed_export(monkeypatch: pytest.MonkeyPatch, bare_world: Any) -> None:
    import mlflow
    from mlflow.entities.span import NoOpSpan

    from rlops.agent_sdk.mlflow_tracing import MlflowTraceExporter

    exporter = MlflowTraceExporter("credit_approval", tracking_uri=bare_world["tracking_uri"])
    monkeypatch.setattr(mlflow, "start_span_no_context", lambda *a, **k: NoOpSpan())  # what MLflow answers on failure
    rec = {"trace_id": "t", "episode_id": "e", "step": 0, "ts": "2026-12-05T00:00:00+00:00", "action": "approve"}
    assert exporter.export(rec) is None
    assert (exporter.exported, exporter.failed) == (0, 1)
