"""Decision spans of a framework's own instrumentation (OpenInference) → trace rows.

The attribute mapping (docs/integrations/openinference.md):

* **a decision** is a span carrying the attribute ``rlops.decision``: a JSON object with the columns
  of the step known when the next action is chosen — ``trace_id``, ``episode_id``, ``step``, ``ts``,
  ``scenario``, ``source``, ``policy_version``, the state as ``state.<field>`` columns, ``action``,
  ``action_mask``, ``logp``, ``test_group``, ``fallback``/``fallback_reason``.
  :class:`rlops.integrations.langgraph.PolicyRouter` sets it on its own span;
* **its outcome** is the first span of the same trace, starting after the decision, named as the
  action or with ``tool.name`` equal to it (the LangGraph node or the LangChain tool that ran it): its
  duration is ``latency_ms``, an ``ERROR`` status is ``error`` (the status message);
* **done**: the decision with the highest ``step`` of its trace is the episode's last when the
  trace's root span (the graph's run) is in the same export; without it the step stays not done.

Every other span is counted as skipped (not a decision), the outcome spans included. A trace of
OpenInference spans without any decision span is one quarantined row (its root span) whose reason
names the attribute to add (:func:`missing_mapping_reason`). Decision spans and the candidate outcome
spans are kept until the end of the export file (a few small values per span), since OTLP exporters
write a trace's spans in any order.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlops.agent_sdk.mlflow_tracing import DECISION_ATTRIBUTE
from rlops.pipeline_steps.capture.source_lines import SourceLine

OPENINFERENCE_KIND = "openinference.span.kind"
TOOL_NAME = "tool.name"
_ERROR_CODES = ("2", "STATUS_CODE_ERROR", "ERROR")


def missing_mapping_reason(trace_id: str) -> str:
    """The one line answering an OpenInference trace that has no decision span."""
    return (
        f"otlp: OpenInference trace {trace_id} has no decision span: add the span attribute "
        f"'{DECISION_ATTRIBUTE}' (a JSON object of the step's trace columns: episode_id, step, ts, scenario, "
        "source, policy_version, state.<field>..., action, action_mask) to the span that chooses the next "
        "tool; rlops.integrations.langgraph.PolicyRouter sets it (docs/integrations/openinference.md)"
    )


def _ns(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def span_error(span: Mapping[str, Any]) -> str | None:
    """An ``ERROR`` status as text (its message, else ``error``); None otherwise."""
    status = span.get("status") or {}
    if not isinstance(status, Mapping) or str(status.get("code", "")) not in _ERROR_CODES:
        return None
    return str(status.get("message") or "error")[:500]


@dataclass
class _Decision:
    record: dict[str, Any]
    start: int
    where: str
    line_no: int


@dataclass
class _Outcome:
    names: tuple[str, ...]
    start: int
    end: int
    error: str | None
    used: bool = False


@dataclass
class DecisionSpans:
    """Collects the decision spans of an export with their candidate outcomes; :meth:`rows` pairs them
    at the end of the file."""

    decisions: dict[str, list[_Decision]] = field(default_factory=dict)
    outcomes: dict[str, list[_Outcome]] = field(default_factory=dict)
    rooted: set[str] = field(default_factory=set)
    openinference: set[str] = field(default_factory=set)

    def is_decision(self, attributes: Mapping[str, Any]) -> bool:
        return DECISION_ATTRIBUTE in attributes

    def add_decision(
        self, trace: str, span: Mapping[str, Any], attributes: Mapping[str, Any], where: str, n: int
    ) -> SourceLine | None:  # noqa: E501
        """Keep a decision span; a value that is no JSON object is returned as a quarantined line now."""
        raw = attributes.get(DECISION_ATTRIBUTE)
        try:
            record = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            record = None
        except RecursionError:  # nested past the decoder's limit: this span alone is quarantined
            return SourceLine(
                str(raw)[:4096],
                where,
                n,
                f"otlp: span attribute {DECISION_ATTRIBUTE}: depth: JSON nested too deep to parse",
            )
        if not isinstance(record, dict):
            return SourceLine(
                json.dumps({DECISION_ATTRIBUTE: raw}, default=str)[:4096],
                where,
                n,
                f"otlp: span attribute {DECISION_ATTRIBUTE} is not a JSON object: {str(raw)[:80]!r}",
            )
        self.decisions.setdefault(trace, []).append(_Decision(record, _ns(span.get("startTimeUnixNano")), where, n))
        return None

    def add_span(self, trace: str, span: Mapping[str, Any], attributes: Mapping[str, Any]) -> None:
        """A span that is no decision: a possible outcome, and whether its trace is OpenInference's."""
        if OPENINFERENCE_KIND in attributes:
            self.openinference.add(trace)
        if not span.get("parentSpanId"):
            self.rooted.add(trace)
            return
        names = tuple(str(n) for n in (span.get("name"), attributes.get(TOOL_NAME)) if n)
        start, end = _ns(span.get("startTimeUnixNano")), _ns(span.get("endTimeUnixNano"))
        self.outcomes.setdefault(trace, []).append(_Outcome(names, start, end, span_error(span)))

    def rows(self) -> Iterator[SourceLine]:
        """One line per decision, with its outcome and ``done`` (see the module docstring)."""
        for trace, decisions in self.decisions.items():
            decisions.sort(key=lambda d: (_ns(d.record.get("step")), d.start))
            candidates = sorted(self.outcomes.get(trace, []), key=lambda o: o.start)
            for i, d in enumerate(decisions):
                rec = dict(d.record)
                action = str(rec.get("action"))
                hit = next((o for o in candidates if not o.used and action in o.names and o.start >= d.start), None)
                if hit is not None:
                    hit.used = True
                    rec.setdefault("latency_ms", max(hit.end - hit.start, 0) / 1e6)
                    rec.setdefault("error", hit.error)
                last = i == len(decisions) - 1 and trace in self.rooted
                rec.setdefault("done", last)
                if last:
                    rec.setdefault("terminated", True)
                yield SourceLine(json.dumps(rec, default=str), d.where, d.line_no)

    def undecided(self, trace: str) -> str | None:
        """The quarantine reason of a root span of ``trace`` when the trace holds no decision."""
        return missing_mapping_reason(trace) if trace in self.openinference and trace not in self.decisions else None
