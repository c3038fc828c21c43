"""Capture sources besides the landing zone: MLflow's trace store and OTLP JSON exports. Readers only.

An agent instrumented with :class:`rlops.agent_sdk.mlflow_tracing.MlflowTraceExporter` emits every
decision as an MLflow trace whose span ``decision`` carries the trace record as the attribute
``rlops.record``. These readers turn such spans into :class:`~rlops.pipeline_steps.capture.source_lines.SourceLine`
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

* :func:`mlflow_source` — traces of an experiment in a time window, read page by page by
  :func:`rlops.registry.traces.experiment_traces`; an experiment that does not exist is an error,
  never "0 rows";
* :func:`otlp_source` — an OTLP/JSON export file (``{"resourceSpans": [...]}``, one document per
  file or one per line, as the OpenTelemetry collector's file exporter writes), streamed: spans are
  decoded one at a time, so memory stays bounded however many spans the file holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rlops.agent_sdk.mlflow_tracing import RECORD_ATTRIBUTE
from rlops.common.errors import UserError
from rlops.pipeline_steps.capture.json_stream import TOO_DEEP, JsonStream, TooDeep
from rlops.pipeline_steps.capture.source_lines import CaptureSource, SourceLine
from rlops.pipeline_steps.capture.span_mapping import DecisionSpans
from rlops.registry.traces import NoSuchExperiment, experiment_traces

if TYPE_CHECKING:
    from rlops.storage.backend import Storage

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


def _span_line(attributes: Mapping[str, Any], where: str, n: int) -> SourceLine:
    """The row of one span; a span whose attributes nest too deeply to decode is quarantined alone
    (the interpreter's recursion limit is the bound: past it, every other span would be lost too)."""
    try:
        return SourceLine(_line(attributes), where, n)
    except RecursionError:
        raw = attributes.get(RECORD_ATTRIBUTE, "")
        return SourceLine(str(raw)[:4096], where, n, f"otlp: span attribute {RECORD_ATTRIBUTE}: {TOO_DEEP}")


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
    try:
        traces = experiment_traces(
            tracking_uri, experiment, int(start.timestamp() * 1000), int(end.timestamp() * 1000), page_size
        )
    except NoSuchExperiment as exc:
        raise UserError(
            f"capture --from-mlflow: MLflow at {tracking_uri} has no experiment {experiment!r} "
            f"(capture.mlflow_experiment, default: the scenario's name); expected one of {exc.known}"
        ) from None
    source = CaptureSource(f"mlflow:{experiment}", iter(()))

    def items() -> Iterator[SourceLine]:
        for trace in traces:
            where = f"mlflow:{experiment}/{trace.trace_id}"
            decisions = [s for s in trace.spans if _is_decision(s.name, s.attributes)]
            rows = decisions or [s for s in trace.spans if s.parent_id is None]
            source.spans_skipped += len(trace.spans) - len(rows)
            for i, span in enumerate(rows, start=1):
                yield _span_line(span.attributes, where, i)

    source.items = items()
    return source


# --------------------------------------------------------------------------- OTLP/JSON


class _OtlpSpans:
    """Walks ``resourceSpans[].scopeSpans[].spans[]`` of a document, decoding one span at a time."""

    def __init__(self, source: CaptureSource, uri: str) -> None:
        self.source, self.uri = source, uri
        self.count = 0
        self.decided: set[str] = set()  # trace ids with a decision span
        self.roots: list[tuple[str, SourceLine]] = []  # root spans without a record, by trace id
        self.mapped = DecisionSpans()  # decision spans of a framework's instrumentation (rlops.decision)

    def walk(self, r: JsonStream, depth: int = 0) -> Iterator[SourceLine]:
        at = r.offset + r.pos
        if r.peek() != "{":
            value = r.value()
            what = "a document" if depth == 0 else f"an element of {_SPAN_LISTS[min(depth, 2) - 1]}"
            yield SourceLine(
                json.dumps(value, default=str)[:4096],
                f"{self.uri}@{at}",
                at,
                f"otlp: {what} at character {at} is a {type(value).__name__}, expected an object",
            )
            return
        keys: list[str] = []
        for key in r.members():
            keys.append(key)
            listed = (key in _SPAN_LISTS and depth < 2) or key == "spans"
            if listed and r.peek() == "[":
                for _ in r.elements():
                    yield from (self.walk(r, depth + 1) if key != "spans" else self.next_span(r))
            elif listed and r.peek() != "n":  # null: an empty list, as proto3 JSON may write it
                where = r.offset + r.pos
                value = r.value()
                yield SourceLine(
                    json.dumps({key: value}, default=str)[:4096],
                    f"{self.uri}@{where}",
                    where,
                    f"otlp: {key} at character {where} is a {type(value).__name__}, expected an array "
                    "(not an OTLP/JSON trace export?)",
                )
            else:
                r.value()
        # proto3 JSON leaves out an empty list, so ``{}`` is an export of no spans; an object of
        # other keys only (another signal's export, a config file) is no trace export at all
        if depth == 0 and keys and not any(k in _SPAN_LISTS or k == "spans" for k in keys):
            yield SourceLine(
                json.dumps({"keys": keys[:50]})[:4096],
                f"{self.uri}@{at}",
                at,
                f"otlp: the document at character {at} has no resourceSpans (keys {keys[:5]}); "
                "expected an OTLP/JSON trace export",
            )

    def next_span(self, r: JsonStream) -> Iterator[SourceLine]:
        """The span that starts here; one nested too deeply to decode is quarantined alone."""
        at = r.offset + r.pos
        try:
            span = r.value()
        except TooDeep as exc:
            self.count += 1
            yield SourceLine(
                r.buf[max(r.pos - 200, 0) : r.pos],
                f"{self.uri}#span-{self.count}",
                self.count,
                f"otlp: span {self.count} (at character {at}) cannot be decoded: {exc}",
            )
            return
        yield from self.span(span)

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
            yield _span_line(attrs, where, self.count)
        elif self.mapped.is_decision(attrs):
            self.decided.add(trace)
            bad = self.mapped.add_decision(trace, span, attrs, where, self.count)
            if bad is not None:
                yield bad
        else:
            self.mapped.add_span(trace, span, attrs)
            if not span.get("parentSpanId"):
                self.roots.append((trace, _span_line(attrs, where, self.count)))
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
            r = JsonStream(stream, uri)
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
