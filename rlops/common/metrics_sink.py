"""What a training loop reports to: the one protocol shared by the learners (``rlops/model/``) and the
MLflow run handles (``rlops/registry/client.py``), with two in-memory implementations."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class MetricsSink(Protocol):
    """Anything a training loop can report to (an MLflow run handle, a list, nothing)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...


class NullSink:
    """Discards metrics and params (for runs that must not touch MLflow)."""

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        return None

    def log_params(self, params: Mapping[str, Any]) -> None:
        return None


@dataclass
class ListSink:
    """Keeps metric rows (``{"step": …, **metrics}``) and params in memory."""

    rows: list[dict[str, float]] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.rows.append({"step": step, **{k: float(v) for k, v in metrics.items()}})

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(params)

    def series(self, key: str) -> list[float]:
        """The values logged for ``key``, in logging order."""
        return [row[key] for row in self.rows if key in row]
