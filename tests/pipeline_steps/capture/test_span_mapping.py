"""The OpenInference attribute mapping on a hand-made OTLP document: a decision span (rlops.decision)
joined with the tool span that ran its action (latency, error), ``done`` on the last decision of a
trace whose root is in the export, every other span skipped, a bad decision value quarantined, and a
trace of OpenInference spans without a decision answered with the attribute to add."""

from __future__ import annotations

import json
from typing import Any

from rlops.pipeline_steps.capture.source_lines import CaptureSource
from rlops.pipeline_steps.capture.span_mapping import DECISION_ATTRIBUTE, DecisionSpans, missing_mapping_reason
from rlops.pipeline_steps.capture.trace_sources import _OtlpSpans


def span(trace: str, sid: str, name: str, start: int, end: int, parent: str = "", **attrs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace,
        "spanId": sid,
        "name": name,
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k.replace("_", "."), "value": {"stringValue": v}} for k, v in attrs.items()],
    }
    if parent:
        out["parentSpanId"] = parent
    return out


def decision(step: int, action: str) -> str:
    return json.dumps({"episode_id": "e1", "step": step, "action": action, "action_mask": "11"})


def test_decisions_are_joined_with_their_tool_spans() -> None:
    kind = {"openinference_span_kind": "CHAIN"}
    spans = [
        span("t1", "r", "LangGraph", 0, 100, **kind),
        span("t1", "d0", "router", 10, 11, "r", rlops_decision=decision(0, "check")),
        span("t1", "x0", "check", 12, 3_000_012, "r", **kind),  # 3 ms
        span("t1", "d1", "router", 20_000_000, 20_000_001, "r", rlops_decision=decision(1, "approve")),
        span("t1", "x1", "approve", 20_000_002, 21_000_002, "r", **kind),
        span("t1", "llm", "FakeChatModel", 20_500_000, 20_600_000, "x1", openinference_span_kind="LLM"),
        span("t2", "r2", "LangGraph", 0, 5, **kind),  # an instrumented run with no decision span
        span("t2", "c2", "approve", 1, 2, "r2", **kind),
    ]
    spans[4]["status"] = {"code": "STATUS_CODE_ERROR", "message": "core banking down"}
    source = CaptureSource("otlp:x", iter(()))
    walker = _OtlpSpans(source, "x")
    early = [line for s in spans for line in walker.span(s)]
    lines = [*early, *walker.undecided_roots()]
    rows = [json.loads(line.text) for line in lines if line.reason is None]
    assert [(r["step"], r["action"], r["done"]) for r in rows] == [(0, "check", False), (1, "approve", True)]
    assert rows[0]["latency_ms"] == 3.0 and rows[0]["error"] is None
    assert rows[1]["error"] == "core banking down" and rows[1]["terminated"] is True
    (raw,) = [line for line in lines if line.reason is not None]
    assert raw.reason == missing_mapping_reason("t2") and DECISION_ATTRIBUTE in raw.reason
    assert len(lines) + source.spans_skipped == len(spans)  # every span: a row or skipped


def test_a_decision_value_that_is_no_json_object_is_quarantined() -> None:
    mapped = DecisionSpans()
    bad = mapped.add_decision("t", {"startTimeUnixNano": "1"}, {DECISION_ATTRIBUTE: "[1, 2]"}, "x#t/s", 1)
    assert bad is not None and bad.reason is not None and "not a JSON object" in bad.reason
    assert list(mapped.rows()) == []


def test_without_the_root_span_the_last_decision_is_not_done() -> None:
    mapped = DecisionSpans()
    mapped.add_decision("t", {"startTimeUnixNano": "1"}, {DECISION_ATTRIBUTE: decision(0, "check")}, "w", 1)
    (line,) = list(mapped.rows())
    assert json.loads(line.text)["done"] is False
