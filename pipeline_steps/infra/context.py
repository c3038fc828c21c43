"""What every pipeline step shares: params, storage, tracking, the scenario pack, the run key.

A step is a plain function taking a :class:`StepContext` (plus its own small arguments) and
returning a small JSON-able dict; the same dict is what the CLI prints with ``--json`` and what an
Airflow task pushes to XCom. Storage layout under ``storage.root``::

    landing/scenario=<s>/date=<d>/hour=<h>/*.jsonl live agents' trace files (agent_sdk.Tracer)
    traces/scenario=<s>/date=<d>/hour=<h>/part-<run_key>.parquet
    quarantine/scenario=<s>/date=<d>/hour=<h>/part-<run_key>.parquet   rows that broke the contract
    calibrations/<scenario>/<version>.json         sandbox calibrations (+ latest.json)
    reports/<step>/<scenario>/<run_key>/...        drift, stress, evaluation, audit reports

A run key names the data interval a run works on (``20261130T0500``), so re-running a step for
the same interval overwrites its outputs instead of adding to them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.config import REPO_ROOT, load_params, resolve_local

if TYPE_CHECKING:
    from pipeline_steps.infra.storage import Storage
    from pipeline_steps.infra.registry import Tracker
    from sandbox.pack import Pack

_RUN_KEY = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


def run_key_for(when: datetime | None = None) -> str:
    """The run key of a data interval starting at ``when`` (UTC, minute resolution)."""
    when = (when or datetime.now(timezone.utc)).astimezone(timezone.utc)
    return when.strftime("%Y%m%dT%H%M")


def check_run_key(run_key: str) -> str:
    if not _RUN_KEY.match(run_key):
        raise ValueError(f"run key {run_key!r}: expected 1-64 letters, digits, '.', '_' or '-'")
    return run_key


@dataclass
class StepContext:
    """Params plus lazily built storage, tracker and pack for one step run."""

    params: dict[str, Any]
    run_key: str
    scenario: str
    dry_run: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def create(cls, scenario: str | None = None, run_key: str | None = None, dry_run: bool = False,
               params: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None) -> "StepContext":
        p = params if params is not None else load_params(overrides=overrides)
        return cls(p, check_run_key(run_key or run_key_for()), scenario or str(p.get("scenario")), dry_run)

    # ---- shared resources ---------------------------------------------------------------------
    @cached_property
    def storage(self) -> "Storage":
        from pipeline_steps.infra.storage import Storage
        return Storage.from_params(self.params)

    @cached_property
    def tracker(self) -> "Tracker":
        from pipeline_steps.infra.registry import Tracker
        return Tracker.from_params(self.params, scenario=self.scenario)

    def section(self, name: str) -> dict[str, Any]:
        """A params block (``train``, ``evaluate``…) merged with the pack's own overrides."""
        base = dict(self.params.get(name) or {})
        pack_params = self.pack_params.get(name) or {}
        base.update(pack_params)
        return base

    @property
    def pack_dir(self) -> Path:
        root = Path(str(self.params.get("scenarios_dir") or REPO_ROOT / "scenarios"))
        return root / self.scenario

    @cached_property
    def pack_params(self) -> dict[str, Any]:
        import yaml
        f = self.pack_dir / "params.yaml"
        return (yaml.safe_load(f.read_text()) or {}) if f.exists() else {}

    def load_pack(self, calibration: str | None = "latest") -> "Pack":
        """The scenario pack, with the latest sandbox calibration applied unless ``calibration`` is
        None (``latest`` when none exists yet means the pack as written)."""
        from sandbox.pack import load_pack
        cal = self.read_calibration(calibration) if calibration else None
        return load_pack(self.pack_dir, calibration=cal)

    def read_calibration(self, version: str = "latest") -> dict[str, Any] | None:
        uri = self.uri("calibrations", self.scenario, f"{version}.json")
        return self.storage.read_json(uri) if self.storage.exists(uri) else None

    # ---- locations --------------------------------------------------------------------------------
    def uri(self, *parts: str) -> str:
        return self.storage.join(*parts)

    def report_uri(self, step: str, *parts: str) -> str:
        return self.storage.join("reports", step, self.scenario, self.run_key, *parts)

    def local_dir(self, *parts: str) -> Path:
        """A local working folder (checkpoints, exported models) under ``RLOPS_HOME/rlops-data``."""
        d = Path(resolve_local(str(self.params.get("local_dir") or "rlops-data"))).joinpath(*parts)
        d.mkdir(parents=True, exist_ok=True)
        return d
