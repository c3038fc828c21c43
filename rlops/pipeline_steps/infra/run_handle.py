"""One MLflow run as rlops logs to it (see :class:`RunHandle`); created by
:meth:`rlops.pipeline_steps.infra.registry.Tracker.start_run`, which owns the client and its errors."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlops.pipeline_steps.infra.registry import Tracker

T = TypeVar("T")

_PARAM_MAX = 6000  # MLflow's limit on a param value


class RunHandle:
    """One MLflow run; also a :class:`MetricsTracker` for training loops."""

    def __init__(self, tracker: Tracker, run_id: str, artifact_uri: str) -> None:
        self._tracker, self.run_id, self.artifact_uri = tracker, run_id, artifact_uri

    def _c(self, op: str, fn: Callable[[MlflowClient], T]) -> T:
        return self._tracker._call(f"{op} (run {self.run_id})", fn)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.log_metric_steps([(step, metrics)])

    def log_metric_steps(self, steps: Iterable[tuple[int, Mapping[str, float]]]) -> None:
        """Metrics of many steps (a loss curve) in as few store writes as MLflow allows: one
        ``log_batch`` per 1,000 values instead of one transaction per step."""
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, int(step)) for step, metrics in steps for k, v in metrics.items()]
        for i in range(0, len(items), 1000):  # log_batch takes at most 1000 metrics

            def log(c: MlflowClient, b: list[Metric] = items[i : i + 1000]) -> None:
                c.log_batch(self.run_id, metrics=b)

            self._c("log_metrics", log)

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
