"""Capture sources besides the landing zone: MLflow's trace store and OTLP JSON exports.

An agent instrumented with :class:`rlops.agent_sdk.mlflow_tracing.MlflowTraceExporter` emits every
decision as an MLflow trace whose root span ``decision`` carries the trace record as the attribute
``rlops.record``. These readers turn such traces back into the text lines the landing zone holds,
so the rest is the landing zone's path exactly: :func:`rlops.data_contracts.records.parse_json_lines`,
the scenario's data contract, accepted rows to the trace store, the rest to quarantine, and
``rows_in = rows_accepted + rows_quarantined``. A trace without the attribute (another
instrumentation, a truncated export) becomes a line of its span attributes, which the contract
then quarantines with the reason.

* :func:`mlflow_trace_lines` — traces of an experiment in a time window, through the MLflow client;
* :func:`otlp_trace_lines` — an OTLP/JSON export file (``{"resourceSpans": [...]}``, one object
  per file or one per line, as the OpenTelemetry collector's file exporter writes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.context import StepContext
    from rlops.pipeline_steps.infra.storage import Storage

from rlops.agent_sdk.mlflow_tracing import RECORD_ATTRIBUTE, ROOT_SPAN


@dataclass(frozen=True)
class TraceLines:
    """Landing-zone-shaped input: one text line per decision, and where each came from."""

    lines: list[str]
    sources: list[str]


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


def mlflow_trace_lines(tracking_uri: str, experiment: str, start: datetime, end: datetime,
                       page_size: int = 500) -> TraceLines:
    """One line per root ``decision`` span of the experiment's traces started in ``[start, end)``."""
    from mlflow import MlflowClient
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return TraceLines([], [])
    filt = (f"attributes.timestamp_ms >= {int(start.timestamp() * 1000)} AND "
            f"attributes.timestamp_ms < {int(end.timestamp() * 1000)}")
    lines, sources, token = [], [], None
    while True:
        page = client.search_traces(locations=[exp.experiment_id], filter_string=filt, max_results=page_size,
                                    page_token=token, order_by=["timestamp_ms ASC"])
        for trace in page:
            roots = [s for s in trace.data.spans if s.parent_id is None]
            for span in roots:
                if span.name == ROOT_SPAN or len(roots) == 1:
                    lines.append(_line(dict(span.attributes)))
                    sources.append(f"mlflow:{experiment}/{trace.info.trace_id}")
        token = page.token
        if not token:
            return TraceLines(lines, sources)


def _otlp_value(value: Mapping[str, Any]) -> Any:
    for kind in ("stringValue", "boolValue", "intValue", "doubleValue"):
        if kind in value:
            return value[kind]
    return json.dumps(value)


def _otlp_documents(text: str) -> Iterator[dict[str, Any]]:
    stripped = text.strip()
    if not stripped:
        return
    try:
        yield json.loads(stripped)
    except ValueError:  # the collector's file exporter: one JSON document per line
        for line in stripped.splitlines():
            if line.strip():
                yield json.loads(line)


def otlp_trace_lines(storage: "Storage", uri: str) -> TraceLines:
    """One line per root span of an OTLP/JSON export file (``resourceSpans`` → ``scopeSpans`` →
    ``spans``; root = no ``parentSpanId``)."""
    lines, sources = [], []
    for doc in _otlp_documents(storage.read_text(uri)):
        for rs in doc.get("resourceSpans") or []:
            for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []:
                for span in ss.get("spans") or []:
                    if span.get("parentSpanId"):
                        continue
                    attrs = {a["key"]: _otlp_value(a.get("value") or {}) for a in span.get("attributes") or []}
                    lines.append(_line(attrs))
                    sources.append(f"{uri}#{span.get('traceId', '')}")
    return TraceLines(lines, sources)


def capture_trace_lines(ctx: "StepContext", found: TraceLines, source: str) -> dict[str, Any]:
    """The landing zone's path for lines from another source: parse, validate against the
    scenario's contract, write accepted rows and quarantine; ``rows_in = accepted + quarantined``."""
    import pandas as pd

    from rlops.data_contracts.records import parse_json_lines
    from rlops.pipeline_steps.capture.core import validate_rows
    from rlops.data_contracts.schema import contract_for
    from rlops.pipeline_steps.capture.step import _counts
    from rlops.pipeline_steps.infra.trace_store import write_quarantine_partitions, write_trace_partitions
    traces, quarantine = ctx.traces.trace_uri, ctx.traces.quarantine_uri
    start, end = ctx.key.start, ctx.key.end
    rows, unparseable = parse_json_lines(found.lines, found.sources)
    contract = contract_for(ctx.load_pack())
    accepted, quarantined = validate_rows(rows, contract) if len(rows) else (rows.iloc[0:0], rows.iloc[0:0])
    if len(unparseable):
        quarantined = pd.concat([quarantined, unparseable], ignore_index=True)
    parts = write_trace_partitions(ctx.storage, accepted, traces, ctx.run_key, contract=contract,
                                   dry_run=ctx.dry_run) if len(accepted) else []
    qparts = write_quarantine_partitions(ctx.storage, quarantined, quarantine, ctx.scenario, ctx.run_key,
                                         fallback_ts=start, dry_run=ctx.dry_run) if len(quarantined) else []
    return {"scenario": ctx.scenario, "run_key": ctx.run_key, "interval": [start.isoformat(), end.isoformat()],
            "source": source, **_counts(len(found.lines), len(accepted), len(quarantined)),
            "partitions": parts, "quarantine_partitions": qparts, "dry_run": ctx.dry_run}
