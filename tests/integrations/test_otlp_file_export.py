"""The OTLP/JSON file exporter writes a batch a slice at a time: one document per line of at most
``SLICE_SPANS`` spans, every span once, ids in hex (json.dumps of a whole 512-span batch held the
interpreter lock long enough to make an agent's decision miss its timeout)."""

from __future__ import annotations

import json
from pathlib import Path


def test_a_batch_is_written_as_lines_of_at_most_a_slice_of_spans(tmp_path: Path) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from rlops.integrations.otlp import SLICE_SPANS, OtlpJsonFileExporter

    finished = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(finished))
    tracer = provider.get_tracer("test")
    n = 2 * SLICE_SPANS + 6
    for i in range(n):
        with tracer.start_as_current_span(f"decision-{i}") as span:
            span.set_attribute("rlops.step", i)
    spans = finished.get_finished_spans()
    assert len(spans) == n

    exporter = OtlpJsonFileExporter(tmp_path / "spans.jsonl")
    exporter.export(spans)

    lines = (tmp_path / "spans.jsonl").read_text().splitlines()
    per_line = [
        [s for rs in json.loads(line)["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
        for line in lines
    ]
    assert [len(p) for p in per_line] == [SLICE_SPANS, SLICE_SPANS, 6] and exporter.exported == n
    written = [s for p in per_line for s in p]
    assert sorted(s["name"] for s in written) == sorted(f"decision-{i}" for i in range(n))
    assert all(len(s["spanId"]) == 16 and int(s["spanId"], 16) for s in written)  # hex, not base64
