"""Runs looked up, read and ended outside the run a step writes (that one is a
:class:`~rlops.registry.run_handle.RunHandle`): the parent run of a pipeline pass, the runs a killed
process left ``RUNNING``, a training read back by ``rlops train status``.

Every call goes through :meth:`Tracker._call <rlops.registry.client.Tracker>`, so a failure is a
:class:`~rlops.registry.client.TrackingError` naming the operation and the server. A run comes back
as a :class:`RunRecord`, never as MLflow's own entity.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlops.registry import tags as K

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlops.registry.client import Tracker


@dataclass(frozen=True)
class RunRecord:
    """What rlops reads of an MLflow run."""

    run_id: str
    name: str | None
    status: str
    """``RUNNING``, ``FINISHED``, ``FAILED``, ``KILLED`` (MLflow's run status)"""
    start_time: int | None
    """milliseconds since the epoch"""
    tags: dict[str, str]
    metrics: dict[str, float]
    """each metric's latest value"""


def _record(run: Any) -> RunRecord:
    return RunRecord(
        run_id=str(run.info.run_id),
        name=run.info.run_name,
        status=str(run.info.status),
        start_time=run.info.start_time,
        tags=dict(run.data.tags),
        metrics=dict(run.data.metrics),
    )


def search_runs(
    tracker: Tracker,
    experiment_id: str,
    filter_string: str,
    max_results: int | None = None,
    order_by: list[str] | None = None,
) -> list[RunRecord]:
    """The active runs of the experiment that match ``filter_string`` (MLflow's search grammar), in
    ``order_by``'s order; at most ``max_results`` (default: MLflow's page of 1,000)."""
    limit: dict[str, Any] = {} if max_results is None else {"max_results": max_results}

    def search(c: MlflowClient) -> list[Any]:
        return list(c.search_runs([experiment_id], filter_string=filter_string, order_by=order_by, **limit))

    return [_record(r) for r in tracker._call(f"search runs where {filter_string}", search)]


def get_run(tracker: Tracker, run_id: str) -> RunRecord:
    return _record(tracker._call(f"get run {run_id}", lambda c: c.get_run(run_id)))


def create_run(tracker: Tracker, experiment_id: str, run_name: str, tags: Mapping[str, str]) -> str:
    """A new run left ``RUNNING`` (ended by :func:`end_run`); returns its id. A run whose lifetime is
    one block of code is :meth:`Tracker.start_run <rlops.registry.client.Tracker.start_run>`'s."""
    run = tracker._call(
        f"create run {run_name!r}", lambda c: c.create_run(experiment_id, run_name=run_name, tags=dict(tags))
    )
    return str(run.info.run_id)


def delete_run(tracker: Tracker, run_id: str) -> None:
    tracker._call(f"delete run {run_id}", lambda c: c.delete_run(run_id))


def set_run_tag(tracker: Tracker, run_id: str, key: str, value: str) -> None:
    tracker._call(f"tag run {run_id}", lambda c: c.set_tag(run_id, key, value))


def end_run(tracker: Tracker, run_id: str, status: str) -> None:
    tracker._call(f"end run {run_id}", lambda c: c.set_terminated(run_id, status=status))


def close_run(tracker: Tracker, run_id: str, closed_by: str, status: str = "KILLED") -> None:
    """End a run its own process can no longer end (the process was killed), saying who closed it
    (tag ``rlops.closed_by``)."""

    def close(c: MlflowClient) -> None:
        c.set_tag(run_id, K.CLOSED_BY, closed_by)
        c.set_terminated(run_id, status=status)

    tracker._call(f"close run {run_id}", close)


def metric_rows(tracker: Tracker, run_id: str, keys: Sequence[str]) -> dict[int, dict[str, float]]:
    """Every logged value of the metrics ``keys``, as ``{step: {key: value}}``."""

    def read(c: MlflowClient) -> dict[int, dict[str, float]]:
        rows: dict[int, dict[str, float]] = {}
        for key in keys:
            for m in c.get_metric_history(run_id, key):
                rows.setdefault(int(m.step), {})[key] = float(m.value)
        return rows

    return tracker._call(f"read metrics of run {run_id}", read)
