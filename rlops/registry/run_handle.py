"""One MLflow run as rlops logs to it (see :class:`RunHandle`); created by
:meth:`rlops.registry.client.Tracker.start_run`, which owns the client and its errors."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlops.registry.client import Tracker

T = TypeVar("T")
log = logging.getLogger(__name__)

_PARAM_MAX = 6000  # MLflow's limit on a param value


class RunHandle:
    """One MLflow run; also a :class:`MetricsTracker` for training loops."""

    def __init__(self, tracker: Tracker, run_id: str, artifact_uri: str) -> None:
        self._tracker, self.run_id, self.artifact_uri = tracker, run_id, artifact_uri

    def _c(self, op: str, fn: Callable[[MlflowClient], T]) -> T:
        return self._tracker._call(f"{op} (run {self.run_id})", fn)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.log_metric_steps([(step, metrics)])

    def log_metric_steps(
        self, steps: Iterable[tuple[int, Mapping[str, float]]], timestamps_ms: Sequence[int] | None = None
    ) -> None:
        """Metrics of many steps (a loss curve) in as few store writes as MLflow allows: one
        ``log_batch`` per 1,000 values instead of one transaction per step. ``timestamps_ms``: when
        each step's values were measured (default: now)."""
        from mlflow.entities import Metric

        rows = list(steps)
        times = list(timestamps_ms) if timestamps_ms is not None else [int(time.time() * 1000)] * len(rows)
        items = [
            Metric(k, float(v), ts, int(step))
            for (step, metrics), ts in zip(rows, times, strict=True)
            for k, v in metrics.items()
        ]
        for i in range(0, len(items), 1000):  # log_batch takes at most 1000 metrics

            def log(c: MlflowClient, b: list[Metric] = items[i : i + 1000]) -> None:
                c.log_batch(self.run_id, metrics=b)

            self._c("log_metrics", log)

    def buffered(self, every_s: float = 10.0) -> BufferedMetrics:
        """This run as a training loop's metrics sink that writes in batches (see :class:`BufferedMetrics`)."""
        return BufferedMetrics(self, every_s)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:_PARAM_MAX]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # log_batch takes at most 100 params

            def log(c: MlflowClient, b: list[Param] = items[i : i + 100]) -> None:
                c.log_batch(self.run_id, params=b)

            self._c("log_params", log)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        from mlflow.entities import RunTag

        items = [RunTag(k, str(v)) for k, v in tags.items()]
        self._c("set_tags", lambda c: c.log_batch(self.run_id, tags=items))

    def log_artifact(self, path: str | os.PathLike[str], artifact_path: str | None = None) -> None:
        """Log a local file, or every file of a local folder, under ``artifact_path``."""
        p = Path(path)
        if p.is_dir():
            self._c("log_artifacts", lambda c: c.log_artifacts(self.run_id, str(p), artifact_path))
        else:
            self._c("log_artifact", lambda c: c.log_artifact(self.run_id, str(p), artifact_path))

    def log_inputs(self, datasets: list[Any]) -> None:
        """Attach MLflow ``DatasetInput``s (see :mod:`rlops.pipeline_steps.infra.datasets`)."""
        self._c("log_inputs", lambda c: c.log_inputs(self.run_id, datasets=datasets))

    def log_dict(self, obj: dict[str, Any], artifact_file: str) -> None:
        self._c("log_dict", lambda c: c.log_dict(self.run_id, obj, artifact_file))

    def log_text(self, text: str, artifact_file: str) -> None:
        self._c("log_text", lambda c: c.log_text(self.run_id, text, artifact_file))

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        """Log a matplotlib (or plotly) figure as an image artifact."""
        self._c("log_figure", lambda c: c.log_figure(self.run_id, figure, artifact_file))


class BufferedMetrics:
    """A metrics sink over a run that writes the rows of ``every_s`` seconds in one ``log_batch``.

    A training loop reports every iteration; written one by one, each report is a store
    transaction (an HTTP round trip to a tracking server) the loop waits for — 20-80 ms on a
    2-core machine against SQLite, a tenth of an iteration once the loop runs at full speed. The
    first row is written at once and the rest at most ``every_s`` seconds late, so ``rlops train
    status`` still follows a training in progress; :meth:`flush` writes what is left (use the sink
    as a context manager, so a failing run keeps its rows too). Params go through at once.
    """

    def __init__(self, run: RunHandle, every_s: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._run, self.every_s, self._clock = run, every_s, clock
        self._rows: list[tuple[int, dict[str, float]]] = []
        self._times: list[int] = []
        self._last: float | None = None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self._rows.append((int(step), dict(metrics)))
        self._times.append(int(time.time() * 1000))
        if self._last is None or self._clock() - self._last >= self.every_s:
            self.flush()

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._run.log_params(params)

    def flush(self) -> None:
        """Write the buffered rows (one ``log_batch`` per 1,000 values)."""
        rows, times, self._rows, self._times = self._rows, self._times, [], []
        self._last = self._clock()
        if rows:
            self._run.log_metric_steps(rows, times)

    def __enter__(self) -> BufferedMetrics:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is None:
            self.flush()
            return
        try:
            self.flush()
        except Exception as err:  # noqa: BLE001 - the training's own error is the one to raise
            log.warning("could not write the last training metrics: %s", err)
