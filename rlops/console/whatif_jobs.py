"""Reward what-ifs started from the console: a form queues a job, one background worker runs the
jobs one at a time (a what-if trains a policy: two at once would only halve each other's speed),
and each job's request, status and result are a JSON file under the console's cache folder, so
results stay browsable after a restart.

The console stays read-only toward the registry and the trace store: a job reads the champion and
never saves a reward version (saving is ``rlops reward whatif --save``, then the review of any
reward version). The change is checked when the form is posted, so a bad one is refused at once
and never queued.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import re
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rlops.common.errors import UserError
from rlops.sandbox.reward_choice import choose_reward
from rlops.whatif.change import resolve_change
from rlops.whatif.run import reward_whatif

log = logging.getLogger(__name__)

JOB_ID = re.compile(r"^[0-9a-f]{12}$")
#: Jobs waiting at most; past it a new one is refused (the worker is busy for minutes).
MAX_WAITING = 4

#: ``(scenario, sets, params)`` → the what-if's result (:func:`rlops.whatif.run.reward_whatif`).
Runner = Callable[[str, list[str], list[str]], dict[str, Any]]
#: ``(scenario, sets, params)`` → None, or a UserError saying what is wrong with the change.
Validator = Callable[[str, list[str], list[str]], None]


def split_assignments(text: str) -> list[str]:
    """``compliance=0.62, risk=1.2`` (commas, spaces or lines between) as ``["compliance=0.62", "risk=1.2"]``."""
    return [t for t in re.split(r"[\s,;]+", text.strip()) if t]


class WhatIfJobs:
    """The console's what-if jobs: submit, look up, list; one worker thread runs them in order."""

    def __init__(self, folder_of: Callable[[str], Path], validate: Validator, runner: Runner) -> None:
        self._folder_of, self._validate, self._runner = folder_of, validate, runner
        self._queue: queue.Queue[tuple[str, str]] = queue.Queue()
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None

    def submit(self, scenario: str, sets: list[str], params: list[str]) -> str:
        """Check the change and queue it; the new job's id. A UserError for a bad change or a full queue."""
        self._validate(scenario, sets, params)
        if self._queue.qsize() >= MAX_WAITING:
            raise UserError(f"{MAX_WAITING} what-ifs are already waiting; submit again once one has finished")
        job_id = uuid.uuid4().hex[:12]
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self._write(scenario, {"id": job_id, "scenario": scenario, "sets": sets, "params": params,
                               "status": "queued", "submitted": now, "started": None, "finished": None,
                               "result": None, "error": None})  # fmt: skip
        self._queue.put((scenario, job_id))
        with self._lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._work, name="console-whatif", daemon=True)
                self._worker.start()
        return job_id

    def get(self, scenario: str, job_id: str) -> dict[str, Any] | None:
        """The job's record, or None when there is no such job of this scenario."""
        if not JOB_ID.match(job_id):
            return None
        path = self._folder_of(scenario) / f"{job_id}.json"
        if not path.is_file():
            return None
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc

    def list(self, scenario: str) -> list[dict[str, Any]]:
        """Every job of the scenario, newest first (without their results)."""
        jobs = []
        for path in self._folder_of(scenario).glob("*.json"):
            if JOB_ID.match(path.stem):
                doc = json.loads(path.read_text())
                doc.pop("result", None)
                jobs.append(doc)
        return sorted(jobs, key=lambda j: (j["submitted"], j["id"]), reverse=True)

    def wait(self) -> None:
        """Block until every queued job has finished (tests, a graceful stop)."""
        self._queue.join()

    def _write(self, scenario: str, doc: dict[str, Any]) -> None:
        folder = self._folder_of(scenario)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{doc['id']}.json.tmp"
        tmp.write_text(json.dumps(doc, default=str))
        os.replace(tmp, folder / f"{doc['id']}.json")  # a reader sees the old record or the new, whole

    def _work(self) -> None:
        while True:
            scenario, job_id = self._queue.get()
            try:
                self._run(scenario, job_id)
            finally:
                self._queue.task_done()

    def _run(self, scenario: str, job_id: str) -> None:
        doc = self.get(scenario, job_id)
        if doc is None:
            return
        doc.update(status="running", started=datetime.now(UTC).isoformat(timespec="seconds"))
        self._write(scenario, doc)
        try:
            result = self._runner(scenario, list(doc["sets"]), list(doc["params"]))
            doc.update(status="done", result={k: v for k, v in result.items() if k != "source"})
        except UserError as exc:
            doc.update(status="failed", error=str(exc))
        except Exception as exc:  # noqa: BLE001 - a failed job is recorded; the worker goes on
            log.exception("what-if job %s of %s failed", job_id, scenario)
            doc.update(status="failed", error=f"{type(exc).__name__}: {exc}"[:500])
        doc["finished"] = datetime.now(UTC).isoformat(timespec="seconds")
        self._write(scenario, doc)


def project_jobs(data: Any, settings: Any = None) -> WhatIfJobs:
    """The what-if jobs of a deployment (``data``: the console's ``ProjectData``): results under its
    cache folder, the change checked against the reward in force, the what-if run with ``settings``
    (a :class:`~rlops.whatif.run.WhatIfSettings`; None: its defaults)."""

    def folder(scenario: str) -> Path:
        path: Path = data.cache_dir(scenario) / "whatif"
        return path

    def validate(scenario: str, sets: list[str], params: list[str]) -> None:

        pack = data.pack(scenario)
        choice = choose_reward(pack, None, data.context(scenario).params.get("reward_fn"))
        resolve_change(pack.reward_fn(choice.reward_fn), sets, params)

    def run(scenario: str, sets: list[str], params: list[str]) -> dict[str, Any]:

        return reward_whatif(data.context(scenario), sets, params, settings)

    return WhatIfJobs(folder, validate, run)


__all__ = ["JOB_ID", "MAX_WAITING", "WhatIfJobs", "project_jobs", "split_assignments"]
