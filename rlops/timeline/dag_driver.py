"""Run a pack's DAGs as the scheduler would, in-process: for each due interval, every DAG whose
schedule fires at that logical date runs through ``dag.test()`` — the DAG definitions as they
ship, with their Param defaults from the resolved params — followed by the runs they triggered
(``drift_monitor__<pack>`` → ``retrain_full__<pack>``). What the simulated timeline uses instead
of calling task functions itself.

Airflow needs a metadata database: :func:`airflow_home` points an unconfigured process at a
SQLite one in a folder of its own (and migrates it); a process that has already imported Airflow
keeps its configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from unittest import mock

from rlops.common.config import REPO_ROOT, load_params, params_path, scenarios_dir
from rlops.common.run_key import RunKey

# The order DAGs due at the same logical date run in: traffic captured first, then judged.
ORDER = ("trace_capture", "drift_monitor", "rollout", "retrain_full", "retrain_incremental", "label_queue")
_PRESETS = {"@hourly": "0 * * * *", "@daily": "0 0 * * *", "@weekly": "0 0 * * 0"}


@dataclass
class DagOutcome:
    """One DAG run: its id, logical date, state, and the XCom value of each task that returned one."""

    dag_id: str
    logical_date: datetime
    state: str
    tasks: dict[str, str] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    triggered: bool = False

    def promotion(self) -> dict[str, Any] | None:
        """The gated promotion's result, refused ones included (None: the task was skipped without
        one, e.g. inputs unchanged)."""
        return self.results.get("evaluate_and_promote")

    def rollout_move(self) -> dict[str, Any]:
        """The roll-out DAG's move: ``action`` (held, advanced, finished, withdrawn, rolled_back),
        ``version``, ``reason``, ``ab_gates``."""
        out: dict[str, Any] = self.results["advance_or_roll_back"]
        return out


def airflow_home(folder: Path) -> None:
    """Configure and migrate a SQLite Airflow home in ``folder`` unless Airflow is already
    imported or its database configured (then that configuration stands: a test session's, a
    deployment's)."""
    if "airflow" in sys.modules or os.environ.get("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        return
    folder.mkdir(parents=True, exist_ok=True)
    os.environ.update(
        {
            "AIRFLOW_HOME": str(folder),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{folder / 'airflow.db'}",
        }
    )
    for cmd in (["db", "migrate"], ["pools", "set", "gpu", "1", "GPU training slots"]):
        out = subprocess.run([sys.executable, "-m", "airflow", *cmd], capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            raise RuntimeError(f"airflow {' '.join(cmd)} failed in {folder}: {out.stderr[-2000:]}")


def is_due(schedule: object, when: datetime) -> bool:
    """Whether a cron schedule (or preset) fires at ``when``."""
    if not schedule:
        return False
    if not isinstance(schedule, str):
        raise TypeError(f"schedule {schedule!r} is not a cron expression or preset")
    from croniter import croniter

    return bool(croniter.match(_PRESETS.get(schedule, schedule), when.replace(tzinfo=None)))


def _definitions_stamp() -> tuple[tuple[str, int, int], ...]:
    """What the DAG definitions are made of — the DAG files, the packs, the params file — as
    (path, mtime, size) of each file: equal stamps, equal DAGs."""
    files = [*(REPO_ROOT / "dags").rglob("*.py"), *scenarios_dir(load_params()).rglob("*"), params_path()]
    stats = ((str(f), f.stat()) for f in files if f.is_file())
    return tuple(sorted((name, st.st_mtime_ns, st.st_size) for name, st in stats))


@contextmanager
def _synced_when_changed(synced: dict[str, tuple[Any, ...]]) -> Iterator[None]:
    """``dag.test()`` re-parses the DAG folder and serializes every DAG in it to the metadata
    database on each call (so that the DAGs a run triggers are there); the scheduler's DAG
    processor does so only when a definition changes. Within this context a bundle is synced
    again only when :func:`_definitions_stamp` changed since its last sync (``synced``, per
    bundle, is updated in place): a DAG run costs what it costs under a scheduler."""
    import airflow.dag_processing.dagbag as dagbag_module

    sync = dagbag_module.sync_bag_to_db

    def sync_when_changed(dagbag: Any, bundle_name: str, bundle_version: str | None, *args: Any, **kw: Any) -> None:
        stamp = (bundle_version, _definitions_stamp())
        if synced.get(bundle_name) != stamp:
            sync(dagbag, bundle_name, bundle_version, *args, **kw)
            synced[bundle_name] = stamp

    with mock.patch.object(dagbag_module, "sync_bag_to_db", sync_when_changed):
        yield


class PackDags:
    """The DAGs of one pack, parsed once from ``dags/``."""

    def __init__(self, scenario: str, kinds: tuple[str, ...] = ORDER) -> None:
        from airflow.dag_processing.dagbag import DagBag

        bag = DagBag(dag_folder=str(REPO_ROOT / "dags"))
        if bag.import_errors:
            raise RuntimeError(f"the DAG folder does not parse: {bag.import_errors}")
        self.scenario, self.kinds = scenario, tuple(k for k in ORDER if k in kinds)
        self.dags = {k: bag.dags[f"{k}__{scenario}"] for k in (*ORDER, "promote")}
        self._synced: dict[str, tuple[Any, ...]] = {}

    def due(self, when: datetime) -> list[str]:
        """The DAGs (of ``kinds``) whose schedule fires at ``when``, in :data:`ORDER`."""
        return [k for k in self.kinds if is_due(self.dags[k].schedule, when)]

    def run(self, kind: str, when: datetime, conf: dict[str, Any] | None = None, triggered: bool = False) -> DagOutcome:
        """``dag.test()`` of the pack's ``kind`` DAG at ``when``; raises when the run failed."""
        dag = self.dags[kind]
        with _synced_when_changed(self._synced):
            run = dag.test(logical_date=when, run_conf=conf)
        tis = run.get_task_instances()
        out = DagOutcome(
            dag.dag_id, when, str(run.state), {ti.task_id: str(ti.state) for ti in tis}, triggered=triggered
        )
        for ti in tis:
            # a refused candidate or an empty capture ends its task skipped with its result kept
            if str(ti.state) in ("success", "skipped"):
                value = ti.xcom_pull(task_ids=ti.task_id)
                if value is not None or str(ti.state) == "success":
                    out.results[ti.task_id] = value
        if out.state != "success":
            raise RuntimeError(f"{dag.dag_id} at {when:%Y-%m-%d %H:%M} ended {out.state}: {out.tasks}")
        return out

    def run_triggered(self) -> list[DagOutcome]:
        """Run the DAG runs other runs triggered (queued in the metadata DB) at their logical dates."""
        from airflow import settings
        from airflow.models.dagrun import DagRun
        from sqlalchemy import select

        done = []
        ids = {d.dag_id: k for k, d in self.dags.items()}
        assert settings.Session is not None, "airflow configures its session factory on import"
        session = settings.Session()
        try:
            queued = session.scalars(
                select(DagRun)
                .where(DagRun.dag_id.in_(list(ids)), DagRun.state == "queued")
                .order_by(DagRun.logical_date)
            ).all()
            # A run triggered without a logical date (the emergency retrain: its own run id) owns the
            # interval its conf names; it runs at that interval's end, as its trigger did.
            todo = [(ids[r.dag_id], _when(r), dict(r.conf or {})) for r in queued]
            for r in queued:
                session.delete(r)
            session.commit()
        finally:
            session.close()
        for kind, when, conf in todo:
            done.append(self.run(kind, when, conf, triggered=True))
        return done


def _when(run: Any) -> datetime:
    """The logical date of a triggered run, or the end of the interval its conf names."""
    if run.logical_date is not None:
        return run.logical_date  # type: ignore[no-any-return]  # Airflow's DagRun column
    key = (run.conf or {}).get("run_key")
    when: datetime = RunKey.parse(str(key)).end if key else run.run_after
    return when
