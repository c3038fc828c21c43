"""OpenInference's LangChain instrumentation of a real LangGraph run (fake chat model), exported over
OTLP/JSON and captured by ``rlops capture``: every span is accounted for (accepted, quarantined with
its reason, or skipped as no decision), the mapped decisions land as the SDK's own rows (the same
episodes, steps, actions and ``done``, so the SDK's copy is then a duplicate), and a raw trace without
the mapping is quarantined with the one line naming the attribute to add."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.integrations.conftest import example, landing_rows, load_example


@pytest.fixture(scope="module")
def agent() -> ModuleType:
    return load_example(example("langgraph") / "credit_agent.py")


@pytest.fixture
def instrumented(tmp_path: Path) -> Iterator[tuple[Path, Any]]:
    """OpenInference's LangChain instrumentor exporting every span to an OTLP/JSON file."""
    from openinference.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from rlops.integrations.otlp import OtlpJsonFileExporter

    path = tmp_path / "otlp" / "spans.jsonl"
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileExporter(path), max_export_batch_size=64))
    LangChainInstrumentor().instrument(tracer_provider=provider)
    try:
        yield path, provider
    finally:
        provider.force_flush()
        LangChainInstrumentor().uninstrument()
        provider.shutdown()


def spans_in(path: Path) -> list[dict[str, Any]]:
    return [
        span
        for line in path.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]


def run_unmapped(agent: ModuleType, apps: list[Any]) -> None:
    """The same graph routed by the agent's own rules, with no rlops adapter: raw OpenInference spans."""
    from langgraph.types import Command

    def own_router(state: Any) -> Command:
        if not state["fraud_check_done"]:
            return Command(goto="initiate_fraud_check")
        if not state["credit_report_fetched"]:
            return Command(goto="fetch_credit_report")
        return Command(goto="approve" if state["approval_result"] == "pending" else "send_notification")

    graph = agent.build_graph(own_router)
    for app in apps:
        graph.invoke(app)


@pytest.mark.slow  # two captures and a real instrumented run: about a minute on 2 busy cores
def test_every_span_is_accounted_for_and_decisions_land_as_the_sdks(
    agent: ModuleType, bare_world: dict[str, Any], instrumented: Path
) -> None:
    from rlops.common.run_key import RunKey
    from rlops.pipeline_steps.capture.request import CaptureRequest
    from rlops.pipeline_steps.capture.step import capture_step, capture_traces
    from rlops.pipeline_steps.infra.context import StepContext

    path, provider = instrumented
    out = agent.run_agent(agent.applications(4, seed=11), bare_world["landing"], bare_world["tracking_uri"])
    run_unmapped(agent, agent.applications(2, seed=12))
    provider.force_flush()
    sdk_rows = landing_rows(bare_world["landing"])
    assert out["decisions"] == len(sdk_rows)
    spans = spans_in(path)
    decisions = [s for s in spans if any(a["key"] == "rlops.decision" for a in s.get("attributes", []))]
    assert len(decisions) == len(sdk_rows)

    stamps = [r["ts"] for r in sdk_rows]
    key = RunKey.covering(min(stamps), max(stamps))
    ctx = StepContext.create("credit_approval", str(key), overrides={"capture": {"track": False}})
    res = capture_traces(ctx, otlp_uri=path.as_uri()).as_dict()
    assert res["rows_in"] == len(sdk_rows) + 2 == res["rows_accepted"] + res["rows_quarantined"]
    assert res["rows_accepted"] == len(sdk_rows) and res["rows_quarantined"] == 2  # the 2 unmapped runs
    assert res["rows_in"] + res["spans_skipped"] == len(spans)  # every span: a row or skipped
    q = ctx.storage.read_parquet(res["quarantine_uri"])
    reasons = set(q["quarantine_reason"])
    assert len(reasons) == 2 and all("add the span attribute 'rlops.decision'" in r for r in reasons)
    assert all(r.count("\n") == 0 for r in reasons)

    stored = ctx.traces.read("credit_approval")
    key_cols = ["episode_id", "step", "action", "done", "action_mask", "policy_version"]
    got = sorted(tuple(r) for r in stored[key_cols].itertuples(index=False))
    want = sorted(tuple(r[c] for c in key_cols) for r in sdk_rows)
    assert got == want
    assert stored["latency_ms"].notna().all()  # joined from the tool node's span

    again = capture_step(ctx, CaptureRequest(simulate=False)).as_dict()  # the SDK's copy of the same decisions
    assert again["rows_in"] == len(sdk_rows) == again["rows_quarantined"]  # duplicates: one episode id
