"""The narrow services a step uses, without the params, the pack or a calibration.

A step function that only needs to know which run it works for (scenario, run key, dry run, the
DAG run) and where to read and write (storage, the tracker, the trace store, report and local
folders) takes a :class:`StepServices`: what it may read is then exactly what this record names, and
a type check refuses a read of the params, the pack or a calibration through it. What such a step
needs of those is resolved where the request enters and handed to it as a typed value.

:class:`~rlops.pipeline_steps.infra.context.StepContext` satisfies this protocol, so the entry points
that still resolve params from a context hand the same object on; a test fails when a function in
``rlops/pipeline_steps`` newly takes the whole context (``tests/pipeline_steps/infra/test_step_services.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rlops.common.run_key import RunKey
    from rlops.registry.client import Tracker
    from rlops.storage.backend import Storage
    from rlops.trace_store.store import TraceStore


class StepServices(Protocol):
    """Which run a step works for and the services it reads and writes through."""

    scenario: str
    """The scenario pack's name: the partition key of its traces, its reports and its models."""
    run_key: str
    """The data interval the run works on (``20261130T0500``); outputs are keyed by it."""
    dry_run: bool
    """Decide and report what would be done, write nothing."""
    dag_run_id: str | None
    """Airflow's id of the DAG run the step runs in (None outside a DAG)."""

    @property
    def key(self) -> RunKey:
        """The run key as an interval."""

    @property
    def storage(self) -> Storage:
        """Where files live (local folder or S3)."""

    @property
    def tracker(self) -> Tracker:
        """The MLflow tracking and registry client of the scenario."""

    @property
    def traces(self) -> TraceStore:
        """The trace store over the storage's trace partitions."""

    def uri(self, *parts: str) -> str:
        """A location under the storage root."""

    def report_uri(self, step: str, *parts: str) -> str:
        """A location under ``reports/<step>/<scenario>/<run_key>/``."""

    def local_dir(self, *parts: str) -> Path:
        """A local working folder (checkpoints, exported models), created."""
