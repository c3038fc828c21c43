"""A training's metrics reach MLflow in one write per interval, each value with its own step and
time; the first row at once, what is left when the training ends (or fails)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pytest

from rlops.common.config import load_params
from rlops.registry.client import Tracker
from rlops.registry.run_handle import BufferedMetrics


class _Run:
    """Records each store write the sink makes."""

    def __init__(self) -> None:
        self.writes: list[list[tuple[int, dict[str, float]]]] = []

    def log_metric_steps(
        self, steps: Iterable[tuple[int, Mapping[str, float]]], timestamps_ms: Sequence[int] | None = None
    ) -> None:
        self.writes.append([(s, dict(m)) for s, m in steps])


def test_rows_are_written_at_once_then_once_per_interval_then_at_the_end() -> None:
    run, now = _Run(), [0.0]
    sink = BufferedMetrics(run, every_s=10.0, clock=lambda: now[0])  # type: ignore[arg-type]  # a stand-in run
    with sink:
        for it in range(1, 8):
            sink.log_metrics({"episodic_return": float(it)}, step=it * 100)
            now[0] += 3.0  # an iteration takes 3 s
    # iteration 1 at once; 2-4 when 10 s have passed (at 12 s); 5-7 when the training ends
    assert [[s for s, _ in w] for w in run.writes] == [[100], [200, 300, 400, 500], [600, 700]]


def test_a_failing_training_keeps_its_rows_and_its_own_error() -> None:
    class _GoesDown(_Run):
        def log_metric_steps(self, *a: Any, **k: Any) -> None:
            if self.writes:
                raise ConnectionError("tracking server down")
            super().log_metric_steps(*a, **k)

    run = _GoesDown()
    sink = BufferedMetrics(run, every_s=3600)  # type: ignore[arg-type]  # a stand-in run
    with pytest.raises(RuntimeError, match="diverged"), sink:
        sink.log_metrics({"loss": 1.0}, step=1)  # written at once
        sink.log_metrics({"loss": 2.0}, step=2)  # buffered; the server is gone when it is due
        raise RuntimeError("diverged")
    assert run.writes == [[(1, {"loss": 1.0})]]


def test_buffered_rows_land_in_mlflow_with_their_steps_and_times(tmp_tracking: str) -> None:
    tracker = Tracker.from_params(load_params(), "credit_approval")
    with tracker.start_run("buffered") as run, run.buffered(every_s=3600) as sink:
        for step in (128, 256, 384):
            sink.log_metrics({"episodic_return": step / 1000, "sps": 1.0}, step=step)
        sink.log_params({"threads": 1})
    history = tracker.client.get_metric_history(run.run_id, "episodic_return")
    assert [(m.step, m.value) for m in history] == [(128, 0.128), (256, 0.256), (384, 0.384)]
    assert all(m.timestamp > 0 for m in history)
    assert tracker.client.get_run(run.run_id).data.params["threads"] == "1"
