"""``rlops train status``: the per-iteration metrics a policy training run logged to MLflow — of a
finished run by its id, or of a training in progress by its process id — and the plateau flag."""

from __future__ import annotations

import socket
from typing import Any

from rlops.model.early_stop import StagnationMonitor
from rlops.pipeline_steps.infra.context import StepContext
from rlops.pipeline_steps.infra.pass_run import process_alive as process_alive  # re-exported: its old home
from rlops.registry import tags as T

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


def run_of_pid(ctx: StepContext, pid: int, host: str | None = None) -> str:
    """The RUNNING training run of this scenario started by process ``pid`` (on ``host``, default
    this machine); raises LookupError when there is none."""
    from mlflow.entities import ViewType

    host = host or socket.gethostname()
    filt = (  # every step run carries its pid and host: the training's is the one asked for
        f"tags.`{T.STEP}` = '{T.TRAIN_POLICY}' and tags.`{T.PID}` = '{pid}' and tags.`{T.HOST}` = '{host}' "
        "and attributes.status = 'RUNNING'"
    )
    runs = ctx.tracker._call(
        f"find the run of pid {pid}",
        lambda c: c.search_runs(
            [ctx.tracker.experiment_id],
            filt,
            ViewType.ACTIVE_ONLY,
            max_results=1,
            order_by=["attributes.start_time DESC"],
        ),
    )
    if not runs:
        raise LookupError(
            f"no training in progress with pid {pid} on {host} in experiment '{ctx.scenario}' "
            "(a finished run is read by its run id)"
        )
    return str(runs[0].info.run_id)


def plateau_of(returns: list[float], window: int = PLATEAU_WINDOW, tol: float = 0.01) -> tuple[bool, int]:
    """Whether the training return has not improved for ``window`` iterations (the training loop's
    own :class:`~rlops.model.early_stop.StagnationMonitor`), and for how many iterations it has not."""
    monitor, flagged = StagnationMonitor(window, tol), False
    for r in returns:
        flagged = monitor.update(r)
    return flagged, monitor.since


def train_status(
    ctx: StepContext,
    run_id: str | None = None,
    all_metrics: bool = False,
    pid: int | None = None,
    last: int | None = None,
) -> dict[str, Any]:
    """The per-iteration metrics of a training run (by run id, or the running one of ``pid``),
    one row per logged step (the ``last`` ones when given), and the plateau flag."""
    if run_id is None:
        if pid is None:
            raise ValueError("train status needs a run id or a process id (--pid)")
        run_id = run_of_pid(ctx, pid)
    window, tol = ctx.config.ppo.stagnation_window, ctx.config.ppo.stagnation_tol

    def fetch(c: Any) -> dict[str, Any]:
        run = c.get_run(run_id)
        keys = sorted(run.data.metrics) if all_metrics else [k for k in STATUS_COLUMNS if k in run.data.metrics]
        rows: dict[int, dict[str, float]] = {}
        for key in keys:
            for m in c.get_metric_history(run_id, key):
                rows.setdefault(int(m.step), {})[key] = float(m.value)
        status = run.info.status
        if status == "RUNNING" and not process_alive(
            run.data.tags.get(T.PID), run.data.tags.get(T.HOST), run.info.start_time
        ):
            # MLflow still says RUNNING, but the process that ran it is gone (killed): say so.
            status = "KILLED"
        return {
            "run_id": run_id,
            "status": status,
            "mlflow_status": run.info.status,
            "run_name": run.info.run_name,
            "tags": {k: v for k, v in run.data.tags.items() if not k.startswith("mlflow.")},
            "columns": ["step", *keys],
            "rows": [{"step": s, **rows[s]} for s in sorted(rows)],
        }

    res = ctx.tracker._call(f"read metrics of run {run_id}", fetch)
    returns = [r["episodic_return"] for r in res["rows"] if "episodic_return" in r]
    res["plateau"], res["iterations_without_improvement"] = plateau_of(returns, window, tol)
    res["plateau_window"], res["iterations"] = window, len(res["rows"])
    if last:
        res["rows"] = res["rows"][-last:]
    return res
