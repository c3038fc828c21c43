"""Each decision of a production agent as an MLflow trace (optional; needs ``mlflow``).

Pass an :class:`MlflowTraceExporter` to :class:`agent_sdk.Tracer` (``exporters=[...]``) and every
trace record the tracer buffers is also emitted as one MLflow trace, visible in the experiment's
Traces tab: a root span ``decision`` with the children ``observe`` (the state), ``decide`` (the
action, its mask and log-probability), ``execute`` (latency, error) and ``reward`` (total and
breakdown). The root span's attribute ``rlops.record`` holds the whole trace record as JSON, so
rlops' capture can turn MLflow traces (or an OTLP JSON export of them) back into trace rows
under the same data contract and quarantine as the landing zone. MLflow tracing is
OpenTelemetry-compatible, so the same spans can go to any OTLP collector MLflow is set up for.

mlflow is imported on first use only: an agent without it can import :mod:`rlops.agent_sdk` freely.
A failed export is logged and counted (:attr:`MlflowTraceExporter.failed`), never raised into
the agent; a span MLflow did not start (it answers with a no-op span and a warning instead of
raising) is a failed export too, so :attr:`MlflowTraceExporter.exported` counts only decisions that
became traces.

Each decision is its own trace, also when the agent runs inside another trace (e.g. under
``mlflow.langchain.autolog()``, whose span is active while the agent's tools run): the spans are
started in an empty context, so the active span of the agent's framework is neither their parent
nor disturbed.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

log = logging.getLogger(__name__)

RECORD_ATTRIBUTE = "rlops.record"
# The span attribute a framework adapter sets on its decision span (OpenInference/OTLP capture reads it).
DECISION_ATTRIBUTE = "rlops.decision"
ROOT_SPAN = "decision"
CHILD_SPANS = ("observe", "decide", "execute", "reward")
_DECIDE_FIELDS = (
    "action",
    "action_mask",
    "logp",
    "entropy",
    "value",
    "policy_version",
    "test_group",
    "fallback",
    "fallback_reason",
    "shadow_policy_version",
    "shadow_action",
    "shadow_served_logp",
)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def _ts_ns(rec: Mapping[str, Any]) -> int:
    ts = rec.get("ts")
    try:
        when = datetime.fromisoformat(str(ts)) if ts else datetime.now(UTC)
    except ValueError:
        when = datetime.now(UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1e9)


def _scalar(value: Any) -> Any:
    """A span attribute value: scalars as they are, anything else as JSON text."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, default=_json_default)


class MlflowTraceExporter:
    """Emits trace records as MLflow traces in ``experiment`` (created on first use). With
    ``tracking_uri`` it sets the process's MLflow tracking URI, which MLflow tracing exports to."""

    def __init__(self, experiment: str, tracking_uri: str | None = None) -> None:
        self.experiment, self.tracking_uri = experiment, tracking_uri
        self._experiment_id: str | None = None
        self.exported = 0
        self.failed = 0
        self.trace_ids: list[str] = []

    def _setup(self) -> str:
        import mlflow

        if self._experiment_id is None:
            if self.tracking_uri:
                mlflow.set_tracking_uri(self.tracking_uri)
            client = mlflow.MlflowClient()
            exp = client.get_experiment_by_name(self.experiment)
            self._experiment_id = exp.experiment_id if exp else client.create_experiment(self.experiment)
        return self._experiment_id

    def export(self, rec: Mapping[str, Any]) -> str | None:
        """Emit one record as a trace; returns the MLflow trace id (None when it failed)."""
        try:
            # a fresh context: no active span of the agent's framework becomes the decision's parent
            trace_id = contextvars.Context().run(self._emit, rec)
        except Exception as exc:  # noqa: BLE001 - tracing must never break the agent
            self.failed += 1
            log.warning("MLflow trace export failed: %s", exc)
            return None
        self.exported += 1
        self.trace_ids.append(trace_id)
        return trace_id

    def _emit(self, rec: Mapping[str, Any]) -> str:
        import mlflow
        from mlflow.entities import SpanType
        from mlflow.entities.span import NoOpSpan

        def started(span: Any, name: str) -> Any:
            if isinstance(span, NoOpSpan) or span is None:
                raise RuntimeError(f"MLflow did not start the span {name!r} (see its warning above)")
            return span

        exp_id = self._setup()
        end = _ts_ns(rec)
        latency_ns = int(float(rec.get("latency_ms") or 0.0) * 1e6)
        start = end - latency_ns - 3_000  # observe and decide precede execution
        ident = {k: rec.get(k) for k in ("scenario", "trace_id", "episode_id", "step", "source")}
        root = started(
            mlflow.start_span_no_context(
                ROOT_SPAN,
                span_type=SpanType.AGENT,
                experiment_id=exp_id,
                start_time_ns=start,
                inputs={"episode_id": rec.get("episode_id"), "step": rec.get("step")},
                attributes={
                    RECORD_ATTRIBUTE: json.dumps(dict(rec), default=_json_default),
                    **{f"rlops.{k}": _scalar(v) for k, v in ident.items() if v is not None},
                },
            ),
            ROOT_SPAN,
        )
        state = {k: _scalar(v) for k, v in rec.items() if str(k).startswith("state.")}
        spans = {
            "observe": (state, start, start + 1_000, {}),
            "decide": (
                {k: _scalar(rec.get(k)) for k in _DECIDE_FIELDS if rec.get(k) is not None},
                start + 1_000,
                start + 3_000,
                {"action": rec.get("action")},
            ),
            "execute": (
                {"latency_ms": rec.get("latency_ms"), "error": rec.get("error"), "done": rec.get("done")},
                start + 3_000,
                end,
                {},
            ),
            "reward": (
                {"reward_total": rec.get("reward_total"), "reward_breakdown": _scalar(rec.get("reward_breakdown"))},
                end,
                end + 1_000,
                {},
            ),
        }
        for name, (attrs, t0, t1, outputs) in spans.items():
            child = started(
                mlflow.start_span_no_context(
                    name,
                    span_type=SpanType.TOOL if name == "execute" else SpanType.UNKNOWN,
                    parent_span=root,
                    start_time_ns=t0,
                    attributes={k: v for k, v in attrs.items() if v is not None},
                ),
                name,
            )
            child.end(
                outputs=outputs or None,
                end_time_ns=t1,
                status="ERROR" if name == "execute" and rec.get("error") else "OK",
            )
        root.end(
            outputs={"action": rec.get("action"), "reward_total": rec.get("reward_total")}, end_time_ns=end + 1_000
        )
        return str(root.trace_id)

    def flush(self) -> None:
        """Wait for MLflow's asynchronous trace logging, if any, to finish."""
        try:
            import mlflow

            mlflow.flush_trace_async_logging()
        except Exception as exc:  # noqa: BLE001 - a failed flush must not fail the agent
            log.warning("MLflow trace flush failed: %s", exc)
