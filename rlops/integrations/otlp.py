"""An OpenTelemetry span exporter writing OTLP/JSON files, what ``rlops capture --otlp`` reads.

OpenTelemetry for Python exports OTLP over gRPC or HTTP/protobuf to a collector, whose ``file``
exporter writes OTLP/JSON; without a collector, :class:`OtlpJsonFileExporter` writes the same format
itself: one ``{"resourceSpans": [...]}`` document per line, a line per :data:`SLICE_SPANS` spans of an
exported batch, trace and span ids in hex as the OTLP/JSON encoding wants::

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OtlpJsonFileExporter("spans.jsonl")))
    LangChainInstrumentor().instrument(tracer_provider=provider)   # OpenInference

Needs the OpenTelemetry SDK and its OTLP protobuf encoder (the ``[langgraph]`` extra of ``rlops-agent``
or ``rlops`` installs them).
"""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlops.integrations import require

_IDS = ("traceId", "spanId", "parentSpanId")
#: spans per OTLP/JSON line: a batch is written as lines of at most this many spans
SLICE_SPANS = 32


def _hex_ids(node: Any) -> Any:
    """protobuf's JSON writes bytes as base64; OTLP/JSON writes trace and span ids as hex."""
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) and v else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """Finished OpenTelemetry spans as one OTLP/JSON document."""
    encoder = require("opentelemetry.exporter.otlp.proto.common.trace_encoder", "langgraph", "OpenTelemetry")
    json_format = require("google.protobuf.json_format", "langgraph", "protobuf")
    doc = json_format.MessageToDict(encoder.encode_spans(spans))
    return _hex_ids(doc)  # type: ignore[no-any-return]


class OtlpJsonFileExporter:
    """Appends each exported batch of spans to ``path`` as one OTLP/JSON line (a ``SpanExporter``)."""

    def __new__(cls, path: str | os.PathLike[str]) -> Any:
        export = require("opentelemetry.sdk.trace.export", "langgraph", "the OpenTelemetry SDK")

        class Exporter(export.SpanExporter):  # type: ignore[misc, name-defined]  # the base class is imported lazily
            def __init__(self) -> None:
                self.path = Path(path)
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.exported = 0
                self._lock = threading.Lock()

            def export(self, spans: Sequence[Any]) -> Any:
                # A batch is encoded a slice at a time: json.dumps holds the interpreter lock for the
                # whole document, and a 512-span batch held it long enough to make the agent's own
                # decisions miss their timeout.
                lines = "".join(
                    json.dumps(otlp_json(spans[i : i + SLICE_SPANS]), separators=(",", ":")) + "\n"
                    for i in range(0, len(spans), SLICE_SPANS)
                )
                with self._lock, open(self.path, "a", encoding="utf-8") as fh:
                    fh.write(lines)
                    fh.flush()
                    os.fsync(fh.fileno())
                    self.exported += len(spans)
                return export.SpanExportResult.SUCCESS

            def shutdown(self) -> None:
                return None

            def force_flush(self, timeout_millis: int = 30000) -> bool:
                return True

        return Exporter()


__all__ = ["OtlpJsonFileExporter", "otlp_json"]
