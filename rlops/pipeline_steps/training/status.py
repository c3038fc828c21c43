"""``rlops train status``: the per-iteration metrics a policy training run logged to MLflow — of a
finished run by its id, or of a training in progress by its process id — and the plateau flag."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from rlops.common.step_result import StepResult
from rlops.model.early_stop import StagnationMonitor
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import process_alive as process_alive  # re-exported: its old home
from rlops.pipeline_steps.infra.services import StepServices
from rlops.registry import tags as T
from rlops.registry.runs import get_run, metric_rows, search_runs

STATUS_COLUMNS = (
    "episodic_return",
    "episodic_length",
    "entropy",
    "approx_kl",
    "clipfrac",
    "value_loss",
    "human_takeover_rate",
    "illegal_actions",
    "sps",
    "stagnation",
)
PLATEAU_WINDOW = 10
"""Iterations without a better training return that make a plateau (``ppo.stagnation_window``)."""


def run_of_pid(ctx: StepServices, pid: int, host: str | None = None) -> str:
    """The RUNNING training run of this scenario started by process ``pid`` (on ``host``, default
    this machine); raises LookupError when there is none."""
    host = host or socket.gethostname()
    filt = (  # every step run carries its pid and host: the training's is the one asked for
        f"tags.`{T.STEP}` = '{T.TRAIN_POLICY}' and tags.`{T.PID}` = '{pid}' and tags.`{T.HOST}` = '{host}' "
        "and attributes.status = 'RUNNING'"
    )
    runs = search_runs(
        ctx.tracker, ctx.tracker.experiment_id, filt, max_results=1, order_by=["attributes.start_time DESC"]
    )
    if not runs:
        raise LookupError(
            f"no training in progress with pid {pid} on {host} in experiment '{ctx.scenario}' "
            "(a finished run is read by its run id)"
        )
    return runs[0].run_id


def plateau_of(returns: list[float], window: int = PLATEAU_WINDOW, tol: float = 0.01) -> tuple[bool, int]:
    """Whether the training return has not improved for ``window`` iterations (the training loop's
    own :class:`~rlops.model.early_stop.StagnationMonitor`), and for how many iterations it has not."""
    monitor, flagged = StagnationMonitor(window, tol), False
    for r in returns:
        flagged = monitor.update(r)
    return flagged, monitor.since


@dataclass(frozen=True)
class TrainStatus(StepResult):
    """A training run's per-iteration metrics, as ``rlops train status`` shows them, and the plateau flag."""

    run_id: str
    status: str
    """MLflow's status, except ``KILLED`` for a run MLflow still calls RUNNING whose process is gone."""
    mlflow_status: str
    run_name: str | None
    tags: dict[str, str]
    """The run's tags, MLflow's own left out."""
    columns: list[str]
    """``step`` and the metrics shown, the columns of :attr:`rows`."""
    rows: list[dict[str, float]]
    """One row per logged step (the ``last`` ones when asked): the step and each metric's value."""
    plateau: bool
    """The training return has not improved for :attr:`plateau_window` iterations."""
    iterations_without_improvement: int
    plateau_window: int
    iterations: int
    """Steps logged in all (before ``last`` keeps the newest rows)."""


def train_status(
    ctx: StepContext,
    run_id: str | None = None,
    all_metrics: bool = False,
    pid: int | None = None,
    last: int | None = None,
) -> TrainStatus:
    """The per-iteration metrics of a training run (by run id, or the running one of ``pid``),
    one row per logged step (the ``last`` ones when given), and the plateau flag."""
    if run_id is None:
        if pid is None:
            raise ValueError("train status needs a run id or a process id (--pid)")
        run_id = run_of_pid(ctx, pid)
    window, tol = ctx.config.ppo.stagnation_window, ctx.config.ppo.stagnation_tol
    run = get_run(ctx.tracker, run_id)
    keys = sorted(run.metrics) if all_metrics else [k for k in STATUS_COLUMNS if k in run.metrics]
    rows = metric_rows(ctx.tracker, run_id, keys)
    status = run.status
    if status == "RUNNING" and not process_alive(run.tags.get(T.PID), run.tags.get(T.HOST), run.start_time):
        # MLflow still says RUNNING, but the process that ran it is gone (killed): say so.
        status = "KILLED"
    table = [{"step": s, **rows[s]} for s in sorted(rows)]
    plateau, since = plateau_of([r["episodic_return"] for r in table if "episodic_return" in r], window, tol)
    return TrainStatus(
        run_id=run_id,
        status=status,
        mlflow_status=run.status,
        run_name=run.name,
        tags={k: v for k, v in run.tags.items() if not k.startswith("mlflow.")},
        columns=["step", *keys],
        rows=table[-last:] if last else table,
        plateau=plateau,
        iterations_without_improvement=since,
        plateau_window=window,
        iterations=len(table),
    )
