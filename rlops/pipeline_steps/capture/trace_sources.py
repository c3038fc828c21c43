"""Capture sources besides the landing zone: MLflow's trace store and OTLP JSON exports. Readers only.

An agent instrumented with :class:`rlops.agent_sdk.mlflow_tracing.MlflowTraceExporter` emits every
decision as an MLflow trace whose span ``decision`` carries the trace record as the attribute
``rlops.record``. These readers turn such spans into :class:`~rlops.pipeline_steps.capture.core.SourceLine`
items, the landing zone's text lines; writing is :func:`rlops.pipeline_steps.capture.core.write_capture`'s
job alone, so the interval and duplicate checks, quarantine, the manifest and streaming hold for
these sources exactly as for the landing zone.

Which spans are rows: every span that carries ``rlops.record`` (the exporter's ``decision``), at any
depth (an agent framework often wraps decisions in a request span), and in an OTLP export every span
that carries ``rlops.decision`` (a framework's own instrumentation, e.g. OpenInference: the attribute
mapping and how the outcome is joined are in :mod:`rlops.pipeline_steps.capture.span_mapping`).
The children of a decision (``observe``, ``decide``, …) are parts of it, not rows; they are counted
as ``spans_skipped``. A trace with no decision span at all (another tool's instrumentation, a
truncated export) gives one row per root span, holding its attributes, which the contract then
quarantines with the reason. A span that cannot be read (no attribute list, an attribute without
a key) is quarantined alone.

* :func:`mlflow_source` — traces of an experiment in a time window, through the MLflow client, page
  by page; an experiment that does not exist is an error, never "0 rows";
* :func:`otlp_source` — an OTLP/JSON export file (``{"resourceSpans": [...]}``, one document per
  file or one per line, as the OpenTelemetry collector's file exporter writes), streamed: spans are
  decoded one at a time, so memory stays bounded however many spans the file holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import IO, TYPE_CHECKING, Any

from rlops.agent_sdk.mlflow_tracing import RECORD_ATTRIBUTE
from rlops.common.errors import UserError
from rlops.pipeline_steps.capture.core import CaptureSource, SourceLine
from rlops.pipeline_steps.capture.span_mapping import DecisionSpans

if TYPE_CHECKING:
    from rlops.storage.backend import Storage

#: The most text one value of an OTLP document (one span, one resource block) may take.
MAX_VALUE_CHARS = 16 << 20
_READ_CHARS = 1 << 20
_SPAN_LISTS = ("resourceSpans", "scopeSpans", "instrumentationLibrarySpans")


def _decode(value: Any) -> Any:
    """MLflow stores span attributes JSON-encoded; OTLP carries them as strings of that JSON."""
    for _ in range(2):
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return value
    return value


def _line(attributes: Mapping[str, Any]) -> str:
    record = _decode(attributes.get(RECORD_ATTRIBUTE))
    if isinstance(record, dict):
        return json.dumps(record, default=str)
    # No record: keep what the span says, and let the contract quarantine it with the reason.
    return json.dumps({k: _decode(v) for k, v in attributes.items()}, default=str)


def _is_decision(name: Any, attributes: Mapping[str, Any]) -> bool:
    """A decision is a span carrying the record (the exporter names it ``decision``; the name
    alone proves nothing: other instrumentations use it too)."""
    return RECORD_ATTRIBUTE in attributes


# --------------------------------------------------------------------------- MLflow


def mlflow_source(
    tracking_uri: str, experiment: str, start: datetime, end: datetime, page_size: int = 500
) -> CaptureSource:
    """The decisions of ``experiment``'s traces started in ``[start, end)``. Raises
    :class:`~rlops.common.errors.UserError` when the experiment does not exist."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        names = sorted(e.name for e in client.search_experiments(max_results=50))
        raise UserError(
            f"capture --from-mlflow: MLflow at {tracking_uri} has no experiment {experiment!r} "
            f"(capture.mlflow_experiment, default: the scenario's name); expected one of {names}"
        )
    source = CaptureSource(f"mlflow:{experiment}", iter(()))
    filt = (
        f"attributes.timestamp_ms >= {int(start.timestamp() * 1000)} AND "
        f"attributes.timestamp_ms < {int(end.timestamp() * 1000)}"
    )

    def items() -> Iterator[SourceLine]:
        token = None
        while True:
            page = client.search_traces(
                locations=[exp.experiment_id],
                filter_string=filt,
                max_results=page_size,
                page_token=token,
                order_by=["timestamp_ms ASC"],
            )
            for trace in page:
                where = f"mlflow:{experiment}/{trace.info.trace_id}"
                spans = [(s.name, s.parent_id, dict(s.attributes or {})) for s in trace.data.spans]
                decisions = [s for s in spans if _is_decision(s[0], s[2])]
                rows = decisions or [s for s in spans if s[1] is None]
                source.spans_skipped += len(spans) - len(rows)
                for i, (_, _, attrs) in enumerate(rows, start=1):
                    yield SourceLine(_line(attrs), where, i)
            token = page.token
            if not token:
                return

    source.items = items()
    return source


# --------------------------------------------------------------------------- OTLP/JSON


class _Reader:
    """A rolling buffer over a text stream that decodes one JSON value at a time
    (``json.JSONDecoder.raw_decode``), so a document is never held whole."""

    def __init__(self, stream: IO[str], uri: str) -> None:
        self.stream, self.uri = stream, uri
        self.buf, self.pos, self.offset, self.eof = "", 0, 0, False
        self.decoder = json.JSONDecoder()

    def _more(self) -> bool:
        if self.eof:
            return False
        data = self.stream.read(_READ_CHARS)
        if not data:
            self.eof = True
            return False
        self.offset += self.pos
        self.buf = self.buf[self.pos :] + data
        self.pos = 0
        return True

    def peek(self) -> str:
        """The next non-blank character ("" at the end)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in " \t\r\n":
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if not self._more():
                return ""

    def take(self, expected: str) -> None:
        got = self.peek()
        if got != expected:
            raise ValueError(f"expected {expected!r} at character {self.offset + self.pos}, got {got or 'the end'!r}")
        self.pos += 1

    def value(self) -> Any:
        """Decode the next JSON value whole (reading on while it is incomplete)."""
        self.peek()
        while True:
            try:
                obj, stop = self.decoder.raw_decode(self.buf, self.pos)
            except ValueError:
                if len(self.buf) - self.pos > MAX_VALUE_CHARS:
                    raise ValueError(
                        f"a value at character {self.offset + self.pos} is over "
                        f"{MAX_VALUE_CHARS} characters or not JSON"
                    ) from None
                if not self._more():
                    raise ValueError(
                        f"the document ends inside a value at character {self.offset + self.pos}"
                    ) from None
                continue
            # a number cut by the read boundary: decode again with the rest
            if stop == len(self.buf) and not self.eof and isinstance(obj, (int, float)) and self._more():
                continue
            self.pos = stop
            return obj

    def next_document(self) -> bool:
        """Skip to the next line that starts a document (``{`` in its first column), as in the
        collector's one-document-per-line files; False when there is none."""
        while True:
            at = self.buf.find("\n{", self.pos)
            if at >= 0:
                self.pos = at + 1
                return True
            self.pos = max(self.pos, len(self.buf) - 1)
            if not self._more():
                self.pos = len(self.buf)
                return False

    def members(self) -> Iterator[str]:
        """The keys of the object that starts here, one by one; the caller consumes each value."""
        self.take("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            self.take(":")
            yield str(key)
            nxt = self.peek()
            self.pos += 1
            if nxt == "}":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' or '}}' at character {self.offset + self.pos - 1}")

    def elements(self) -> Iterator[None]:
        """Steps through the array that starts here; the caller consumes each element."""
        self.take("[")
        if self.peek() == "]":
            self.pos += 1
            return
        while True:
            yield None
            nxt = self.peek()
            self.pos += 1
            if nxt == "]":
                return
            if nxt != ",":
                raise ValueError(f"expected ',' or ']' at character {self.offset + self.pos - 1}")


class _OtlpSpans:
    """Walks ``resourceSpans[].scopeSpans[].spans[]`` of a document, decoding one span at a time."""

    def __init__(self, source: CaptureSource, uri: str) -> None:
        self.source, self.uri = source, uri
        self.count = 0
        self.decided: set[str] = set()  # trace ids with a decision span
        self.roots: list[tuple[str, SourceLine]] = []  # root spans without a record, by trace id
        self.mapped = DecisionSpans()  # decision spans of a framework's instrumentation (rlops.decision)

    def walk(self, r: _Reader, depth: int = 0) -> Iterator[SourceLine]:
        if r.peek() != "{":
            at = r.offset + r.pos
            value = r.value()
            what = "a document" if depth == 0 else f"an element of {_SPAN_LISTS[min(depth, 2) - 1]}"
            yield SourceLine(
                json.dumps(value, default=str)[:4096],
                f"{self.uri}@{at}",
                at,
                f"otlp: {what} at character {at} is a {type(value).__name__}, expected an object",
            )
            return
        for key in r.members():
            if key in _SPAN_LISTS and depth < 2 and r.peek() == "[":
                for _ in r.elements():
                    yield from self.walk(r, depth + 1)
            elif key == "spans" and r.peek() == "[":
                for _ in r.elements():
                    yield from self.span(r.value())
            else:
                r.value()

    def span(self, span: Any) -> Iterator[SourceLine]:
        self.count += 1
        where = f"{self.uri}#span-{self.count}"
        if not isinstance(span, dict):
            yield SourceLine(
                json.dumps(span, default=str)[:4096],
                where,
                self.count,
                f"otlp: span {self.count} is a {type(span).__name__}, expected an object",
            )
            return
        trace = str(span.get("traceId", ""))
        where = f"{self.uri}#{trace}/{span.get('spanId', '')}"
        try:
            attrs = {a["key"]: _otlp_value(a.get("value") or {}) for a in span.get("attributes") or []}
        except (KeyError, TypeError, AttributeError) as exc:
            yield SourceLine(
                json.dumps(span, default=str)[:4096],
                where,
                self.count,
                f"otlp: span {self.count} has an unreadable attribute list ({exc!r}); "
                'expected [{"key": ..., "value": {...}}]',
            )
            return
        if _is_decision(span.get("name"), attrs):
            self.decided.add(trace)
            yield SourceLine(_line(attrs), where, self.count)
        elif self.mapped.is_decision(attrs):
            self.decided.add(trace)
            bad = self.mapped.add_decision(trace, span, attrs, where, self.count)
            if bad is not None:
                yield bad
        else:
            self.mapped.add_span(trace, span, attrs)
            if not span.get("parentSpanId"):
                self.roots.append((trace, SourceLine(_line(attrs), where, self.count)))
            else:
                self.source.spans_skipped += 1

    def undecided_roots(self) -> Iterator[SourceLine]:
        """The mapped decisions with their outcomes, then the root spans of traces that held no
        decision (a request span around one is skipped); an OpenInference trace without a decision
        span is quarantined with the one line naming the attribute to add."""
        yield from self.mapped.rows()
        for trace, line in self.roots:
            if trace in self.decided:
                self.source.spans_skipped += 1
                continue
            reason = self.mapped.undecided(trace)
            yield line if reason is None else SourceLine(line.text, line.source, line.line_no, reason)


def _otlp_value(value: Mapping[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "intValue", "doubleValue"):
        if kind in value:
            return value[kind]
    return json.dumps(value)


def otlp_source(storage: Storage, uri: str) -> CaptureSource:
    """The decisions of an OTLP/JSON export file, streamed (see the module docstring). A document
    that breaks off quarantines one row saying where; the spans before it stand."""
    source = CaptureSource(f"otlp:{uri}", iter(()), files_read=[uri])

    def items() -> Iterator[SourceLine]:
        spans = _OtlpSpans(source, uri)
        with storage.open_stream(uri, gzip=uri.lower().endswith(".gz")) as stream:
            r = _Reader(stream, uri)
            doc = 0
            while r.peek():
                doc += 1
                start = r.offset + r.pos
                try:
                    yield from spans.walk(r)
                except ValueError as exc:
                    tail = r.buf[r.pos : r.pos + 200]
                    yield SourceLine(
                        tail,
                        f"{uri}#document-{doc}",
                        doc,
                        f"otlp: document {doc} (from character {start}) is not valid OTLP/JSON: {exc}",
                    )
                    if not r.next_document():
                        break
        yield from spans.undecided_roots()

    source.items = items()
    return source
