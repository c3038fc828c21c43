"""One pipeline pass, one parent run: every step run of a pass nests under it in MLflow.

A pass is keyed by (scenario, run key): the scenario names the experiment, the run key the data
interval. Airflow runs each task in its own process, so the parent cannot be held in memory; it
is found by its tags (``rlops.pass = true`` and ``rlops.run_key``) and created when absent. Two
processes creating it at the same moment both look again afterwards and keep the oldest, so a
pass ends with one parent. The DAG run id (when a DAG task runs the step) is tagged on the
parent and on the step run.

A step run also carries the process id and host that run it. A process killed outright (SIGKILL,
the out-of-memory killer) never ends its run; the next run of the same step of the pack on that
host ends every run of the step still ``RUNNING`` whose process no longer exists there as
``KILLED`` (and their pass's parent run, when no other step of it still runs). Interrupted and
terminated processes end their own runs (:mod:`rlops.common.signals`).

Usage in a step::

    with step_run(ctx, tags.TRAIN_POLICY, extra_tags={tags.MODE: "full"}) as run:
        run.log_metrics(...)
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rlops.registry import tags as T
from rlops.registry.runs import close_run, create_run, delete_run, end_run, get_run, search_runs, set_run_tag

if TYPE_CHECKING:
    from rlops.pipeline_steps.infra.services import StepServices
    from rlops.registry.client import Tracker
    from rlops.registry.run_handle import RunHandle


def step_run_name(step: str, scenario: str, run_key: str, label: str | None = None) -> str:
    """``train_policy full · 20261130T0500`` (``label`` goes after the step). The experiment is the
    scenario's: naming it again pushed the run key past the width MLflow's run table shows."""
    head = f"{step} {label}" if label else step
    return f"{head} · {run_key}"


def pass_run_name(scenario: str, run_key: str) -> str:
    """``pass · 20261130T0500`` (in the scenario's experiment)."""
    return f"pass · {run_key}"


def _q(value: str) -> str:
    return value.replace("'", "\\'")


def find_pass_run(tracker: Tracker, scenario: str, run_key: str) -> str | None:
    """Run id of the pass's parent run (the oldest, should two exist), or None."""
    exp_id = tracker.experiment_id_for(scenario)
    filt = f"tags.`{T.PASS}` = 'true' and tags.`{T.RUN_KEY}` = '{_q(run_key)}'"
    runs = search_runs(tracker, exp_id, filt, max_results=50, order_by=["attributes.start_time ASC"])
    if not runs:
        return None
    return min(runs, key=lambda r: (r.start_time or 0, r.run_id)).run_id


def ensure_pass_run(tracker: Tracker, scenario: str, run_key: str, dag_run_id: str | None = None) -> str:
    """Find or create the parent run of the pass (scenario, run key); returns its run id."""
    found = find_pass_run(tracker, scenario, run_key)
    if found is None:
        exp_id = tracker.experiment_id_for(scenario)
        run_tags = {T.PASS: "true", T.SCENARIO: scenario, T.RUN_KEY: run_key}
        if dag_run_id:
            run_tags[T.DAG_RUN_ID] = dag_run_id
        mine = create_run(tracker, exp_id, pass_run_name(scenario, run_key), run_tags)
        found = find_pass_run(tracker, scenario, run_key) or mine
        if found != mine:  # another process won the race: keep one parent per pass
            delete_run(tracker, mine)
    elif dag_run_id:
        set_run_tag(tracker, found, T.DAG_RUN_ID, dag_run_id)
    return found


def _close_parent(tracker: Tracker, parent: str, failed: bool, killed: bool = False) -> None:
    """The parent shows FAILED once any step failed, KILLED when its last step was killed,
    FINISHED otherwise (ended at the last step)."""
    status = get_run(tracker, parent).status
    new = "FAILED" if status == "FAILED" or (failed and not killed) else ("KILLED" if killed else "FINISHED")
    end_run(tracker, parent, new)


def process_alive(pid: Any, host: Any = None, started_ms: int | None = None) -> bool:
    """Whether process ``pid`` on ``host`` still runs. Another host's process cannot be seen from
    here and counts as alive; on this host a missing process, a zombie, or a process that started
    after ``started_ms`` (its pid reused by another program) does not."""
    if host is not None and str(host) != socket.gethostname():
        return True
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
        if state in (b"Z", b"X"):
            return False
        if started_ms is not None and os.stat(f"/proc/{pid}").st_ctime * 1000 > started_ms + 60_000:
            return False
    except (OSError, IndexError):
        pass
    return True


def close_runs_of_dead_processes(tracker: Tracker, scenario: str, step: str) -> list[str]:
    """End as KILLED the runs of ``step`` of ``scenario`` left RUNNING by a process of this host that
    no longer exists (see the module doc); returns their ids. A run without a readable pid, from
    another host or from a live process is left alone."""
    exp_id = tracker.experiment_id_for(scenario)
    host = socket.gethostname()
    where = (
        f"tags.`{T.STEP}` = '{_q(step)}' and tags.`{T.SCENARIO}` = '{_q(scenario)}' and "
        f"tags.`{T.HOST}` = '{_q(host)}' and attributes.status = 'RUNNING'"
    )
    closed: list[str] = []
    parents: set[str] = set()
    for r in search_runs(tracker, exp_id, where):
        pid = str(r.tags.get(T.PID) or "")
        if not pid.isdigit() or int(pid) == os.getpid() or process_alive(pid, host, r.start_time):
            continue
        close_run(tracker, r.run_id, f"the next {step} run on {host}: process {pid} ended without closing it")
        closed.append(r.run_id)
        if r.tags.get("mlflow.parentRunId"):
            parents.add(r.tags["mlflow.parentRunId"])
    for parent in parents:
        _close_orphaned_parent(tracker, exp_id, parent)
    return closed


def _close_orphaned_parent(tracker: Tracker, exp_id: str, parent: str) -> None:
    still = f"tags.`mlflow.parentRunId` = '{_q(parent)}' and attributes.status = 'RUNNING'"
    if search_runs(tracker, exp_id, still):
        return
    if get_run(tracker, parent).status == "RUNNING":
        end_run(tracker, parent, "KILLED")


@contextmanager
def step_run(
    ctx: StepServices, step: str, label: str | None = None, extra_tags: Mapping[str, Any] | None = None
) -> Iterator[RunHandle]:
    """A step run nested under the pass's parent run, named after step, scenario and run key,
    tagged with the process and host running it; runs of the step that ended processes left
    RUNNING are closed first."""
    dag_run_id = ctx.dag_run_id
    tracker = ctx.tracker
    close_runs_of_dead_processes(tracker, ctx.scenario, step)
    parent = ensure_pass_run(tracker, ctx.scenario, ctx.run_key, dag_run_id)
    run_tags: dict[str, Any] = {
        T.STEP: step,
        T.SCENARIO: ctx.scenario,
        T.RUN_KEY: ctx.run_key,
        T.PID: os.getpid(),
        T.HOST: socket.gethostname(),
        **(extra_tags or {}),
    }
    if dag_run_id:
        run_tags[T.DAG_RUN_ID] = dag_run_id
    failed, killed = True, False
    try:
        with tracker.start_run(
            step_run_name(step, ctx.scenario, ctx.run_key, label), tags=run_tags, parent_run_id=parent
        ) as run:
            yield run
            failed = False
    except KeyboardInterrupt:  # interrupted or terminated (rlops.common.signals): the run ended KILLED
        killed = True
        raise
    finally:
        try:
            _close_parent(tracker, parent, failed, killed)
        except Exception:  # noqa: BLE001 - bookkeeping; the step's own outcome matters more
            pass
