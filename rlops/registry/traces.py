"""The traces an agent logged to MLflow's trace store, read page by page (``rlops capture
--from-mlflow``, :func:`rlops.pipeline_steps.capture.trace_sources.mlflow_source`).

A trace comes back as a :class:`TraceRecord`: its id and its spans' names, parents and attributes
(MLflow stores each attribute value JSON-encoded; they are passed on as stored).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple


class SpanRecord(NamedTuple):
    name: str
    parent_id: str | None
    attributes: dict[str, Any]


class TraceRecord(NamedTuple):
    trace_id: str
    spans: list[SpanRecord]


class NoSuchExperiment(LookupError):
    """The tracking server has no experiment of that name; ``known`` names some it has."""

    def __init__(self, experiment: str, known: list[str]) -> None:
        super().__init__(f"no experiment {experiment!r}")
        self.experiment, self.known = experiment, known


def experiment_traces(
    tracking_uri: str, experiment: str, start_ms: int, end_ms: int, page_size: int = 500
) -> Iterator[TraceRecord]:
    """The traces of ``experiment`` started in ``[start_ms, end_ms)`` (milliseconds since the epoch),
    oldest first, fetched a page of ``page_size`` at a time as they are consumed. Raises
    :class:`NoSuchExperiment` at once (up to 50 names of existing experiments in ``known``): an
    experiment that does not exist is an error, never "no traces"."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise NoSuchExperiment(experiment, sorted(e.name for e in client.search_experiments(max_results=50)))
    filt = f"attributes.timestamp_ms >= {start_ms} AND attributes.timestamp_ms < {end_ms}"

    def pages() -> Iterator[TraceRecord]:
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
                spans = [SpanRecord(s.name, s.parent_id, dict(s.attributes or {})) for s in trace.data.spans]
                yield TraceRecord(str(trace.info.trace_id), spans)
            token = page.token
            if not token:
                return

    return pages()
